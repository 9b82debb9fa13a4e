from django.contrib import admin
from django.urls import include, path

from scylla_django.metrics import metrics_view

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/scylla/", include("scylla_django.api.urls")),
    path("metrics", metrics_view),
]
