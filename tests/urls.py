from django.contrib import admin
from django.urls import include, path

from scylla_django.admin import INDEX_TEMPLATE
from scylla_django.metrics import metrics_view

# The "Scylla console" module on the admin index is opt-in.
admin.site.index_template = INDEX_TEMPLATE

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/scylla/", include("scylla_django.api.urls")),
    path("metrics", metrics_view),
]
