from django.contrib import admin
from django.urls import include, path
from django.views.generic import TemplateView
from drf_spectacular.views import SpectacularSwaggerView

from scylla_django.admin import INDEX_TEMPLATE

# The "Scylla console" module (dashboard, bulk purge) on the admin index.
admin.site.index_template = INDEX_TEMPLATE

urlpatterns = [
    # The example project's home page (templates/home.html): links to everything below.
    path("", TemplateView.as_view(template_name="home.html"), name="home"),
    path("admin/", admin.site.urls),
    path("api/scylla/", include("scylla_django.api.urls")),
    # Swagger UI over the API's schema; log in at /admin/ first (the schema needs a user).
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="scylla:schema"), name="api-docs"),
]
