"""The API's answers to requests it has no route or no use for: JSON errors, never a silent
pass or an HTML page; and authentication without `rest_framework.authtoken`.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from django.test import Client

from scylla_django.enums import Status
from scylla_django.models import Task
from tests.factories import TaskFactory
from tests.helpers import (
    API,
    assert_error,
    assert_field_error,
    client_for,
    post,
)
from tests.processes import ROOT, child_env

pytestmark = pytest.mark.django_db


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


SESSION_ONLY_CLIENT = """
import django
django.setup()
from django.contrib.auth.models import User
from django.test import Client
client = Client()
token = client.get("/api/scylla/tasks/", HTTP_AUTHORIZATION="Token 0123456789abcdef")
client.force_login(User.objects.get(username="client"))
print(token.status_code, token.json()["code"], client.get("/api/scylla/tasks/").status_code)
"""


@pytest.mark.django_db(transaction=True)
def test_a_project_without_authtoken_serves_the_api_on_sessions(client_user):
    """A process whose settings never had authtoken (the model cannot even be imported)."""
    env = {**child_env(), "DJANGO_SETTINGS_MODULE": "tests.settings_without_authtoken"}
    done = subprocess.run(
        [sys.executable, "-c", SESSION_ONLY_CLIENT],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["403", "not_authenticated", "200"]
