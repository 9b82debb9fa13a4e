from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/scylla/", include("scylla_django.api.urls")),
]
