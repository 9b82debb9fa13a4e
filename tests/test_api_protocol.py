"""The API's answers to requests it has no route or no use for: JSON errors, never a silent
pass or an HTML page; and authentication without `rest_framework.authtoken`.
"""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from scylla_django.enums import Status
from scylla_django.models import Task
from tests.factories import TaskFactory
from tests.helpers import (
    API,
    CLIENT_PERMISSIONS,
    assert_error,
    assert_field_error,
    client_for,
    make_user,
    post,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def client_user() -> User:
    return make_user("client", *CLIENT_PERMISSIONS)


@pytest.mark.parametrize("path", ["/nope/", "/tasks/t1/restart/", "/tasks", "/workers/w/x/"])
def test_a_post_to_an_unknown_route_is_the_json_404(client_user, path):
    response = post(client_for(client_user), path, {})
    assert_error(response, 404, "not_found")
    # Also with Django's CSRF checks on, as for a browser's session.
    client = Client(enforce_csrf_checks=True)
    client.force_login(client_user)
    response = client.post(f"{API}{path}", "{}", content_type="application/json")
    assert response.status_code == 404 and response.json()["code"] == "not_found"


def test_an_unknown_query_parameter_on_the_list_is_refused_naming_the_allowed_ones(client_user):
    TaskFactory()
    api = client_for(client_user)
    response = api.get(f"{API}/tasks/?stauts=ready")
    assert_field_error(response, "stauts", "unknown_parameter")
    detail = response.json()["errors"]["stauts"][0]["detail"]
    for name in ("status", "queue", "ordering", "page_size", "cursor", "created_after"):
        assert name in detail
    assert api.get(f"{API}/tasks/?status=ready&ordering=rn&page_size=5").status_code == 200


@pytest.mark.parametrize(
    ("method", "path"),
    [("get", "/queues/"), ("get", "/tasks/t1/"), ("post", "/tasks/t1/cancel/")],
)
def test_operations_without_query_parameters_refuse_any(client_user, method, path):
    task = TaskFactory(rn="t1")
    response = getattr(client_for(client_user), method)(f"{API}{path}?queue=x", format="json")
    assert_field_error(response, "queue", "unknown_parameter")
    assert Task.objects.get(pk=task.pk).status == Status.READY


def test_without_authtoken_the_api_works_with_sessions_and_a_token_is_no_500(client_user, settings):
    settings.INSTALLED_APPS = [
        a for a in settings.INSTALLED_APPS if a != "rest_framework.authtoken"
    ]
    client = Client()
    response = client.get(f"{API}/tasks/", HTTP_AUTHORIZATION="Token 0123456789abcdef")
    assert response.status_code in (401, 403)
    assert response.json()["code"] == "not_authenticated"
    client.force_login(client_user)
    assert client.get(f"{API}/tasks/").status_code == 200
    assert client.get(f"{API}/schema/?format=json").status_code == 200
