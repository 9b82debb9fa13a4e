from django.contrib import admin
from django.urls import include, path

import scylla_django.admin_schedules  # noqa: F401  (registers the schedule admin)

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/scylla/", include("scylla_django.api.urls")),
]
