"""The HTTP API (docs/howto/http-api.md): Django REST framework views over the same model methods as
everything else, with django-filter filtering and a drf-spectacular OpenAPI 3 schema.

Mount it with `path("api/scylla/", include("scylla_django.api.urls"))` and add
`rest_framework`, `rest_framework.authtoken`, `django_filters` and `drf_spectacular` to
`INSTALLED_APPS`. The views configure themselves (authentication, parsing, rendering,
pagination, errors), so no `REST_FRAMEWORK` setting is needed.

This package is the only part of scylla_django that imports `rest_framework`,
`django_filters` or `drf_spectacular`.
"""
