"""Schemathesis, in process against the schema the API generates: for every operation, no 5xx,
no response that breaks the schema, valid input accepted and invalid input refused.

The requests go through Django's WSGI handler. As Django's test client does, the handler is
kept from closing the database connection at each request's start and end, so that every
request of a test runs in the test's own transaction, rolled back after it: no connection
opened per request and no tables emptied per test.
"""

from __future__ import annotations

import os

import pytest
import schemathesis
from django.core import signals
from django.core.handlers.wsgi import WSGIHandler
from django.db import close_old_connections
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.settings import patched_settings
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.config import SchemathesisConfig
from schemathesis.specs.openapi.checks import negative_data_rejection, positive_data_acceptance

import scylla_django
from scylla_django.api.schema import SCHEMA_SETTINGS
from scylla_django.models import Task, Worker
from tests.factories import running_task
from tests.helpers import ALL_PERMISSIONS, make_user, token_header

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def connection_kept():
    """The test's connection (and transaction) serves every request of the test."""
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    yield
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


def generated_schema() -> dict:
    with patched_settings(SCHEMA_SETTINGS):
        return SchemaGenerator().get_schema(request=None, public=True)


# NUL characters cannot be stored by PostgreSQL, and the API refuses them (see test_api_input).
# Examples per operation: 40, or SCYLLA_TEST_FUZZ_EXAMPLES (scripts/test runs fewer in the cells
# that repeat a Django version or a database another cell fuzzes in full). The coverage phase
# (every boundary case the schema defines, hundreds per operation whatever the number of
# examples, most of the fuzzing's time) runs with the full budget only.
EXAMPLES = int(os.environ.get("SCYLLA_TEST_FUZZ_EXAMPLES") or 40)
CONFIG = SchemathesisConfig.from_dict(
    {
        "generation": {"allow-x00": False, "max-examples": EXAMPLES},
        "phases": {"coverage": {"enabled": EXAMPLES >= 40}},
    }
)
schema = schemathesis.openapi.from_dict(generated_schema(), config=CONFIG)
schema.app = WSGIHandler()


@pytest.fixture
def auth() -> dict[str, str]:
    """The token of a staff user with every permission, and data for responses to carry.

    The database holds a task in each state, a worker of the user's own and an event.
    """
    user = make_user("fuzzer", *ALL_PERMISSIONS, is_staff=True)
    worker = Worker.objects.register(queues=["default"])
    Worker.objects.filter(pk=worker.pk).update(user=user)
    running_task(worker, rn="fuzz-running")
    running_task(worker, rn="fuzz-done").complete(worker, result={"ok": True})
    Task.objects.submit("default", {"n": 1}, rn="fuzz-ready", priority=9)
    scylla_django.emit("fuzz.happened", {"n": 1})
    return {"Authorization": token_header(user)}


def refused_dependency(body: dict) -> bool:
    """Whether a submission breaks a rule between fields, or on the server's state, that the
    schema cannot state: a window without a key, an order rule without an order key, a limit
    or rate that is not configured (none is, here), a lock pair whose mode is not one, or a
    lock named in both modes."""
    locks = body.get("locks") if isinstance(body.get("locks"), list) else []
    modes: dict[str, set[str]] = {}
    for lock in locks:
        if isinstance(lock, str):
            lock = [lock, "exclusive"]
        if not isinstance(lock, list) or len(lock) != 2 or not isinstance(lock[0], str):
            return True  # refused by the schema too
        modes.setdefault(lock[0], set()).add(lock[1])
    return (
        ("unique_window" in body and "unique_key" not in body)
        or ("order_on_failure" in body and "order_key" not in body)
        or bool(body.get("limits"))
        or "rate_key" in body
        or any(not m <= {"exclusive", "shared"} or len(m) > 1 for m in modes.values())
    )


@schema.parametrize()
@settings(suppress_health_check=list(HealthCheck), deadline=None)
@pytest.mark.timeout(900)  # a bulk operation's examples take minutes on a busy MariaDB
def test_every_operation_conforms(case, auth):
    # A bulk submission reports an invalid item in its outcome (200) instead of refusing the
    # whole request: the items' schema says what is valid, not what is refused.
    bulk = case.operation.path.endswith("/bulk/tasks/")
    if case.operation.path.endswith("/health/"):
        # A failing check is a documented 503; any other server error is still a failure.
        response = case.call(headers=auth)
        assert response.status_code not in (500, 502, 504), response.text
        case.validate_response(response, excluded_checks=[not_a_server_error])
        return
    body = case.body if isinstance(case.body, dict) else {}
    if case.operation.path.endswith("/tasks/") and refused_dependency(body):
        # A dependency that OpenAPI 3.0 cannot state: refused (400), whatever else the body
        # holds (or 415, when the body is sent as another media type; or a 409
        # `not_supported` for keys or a fair key on a database that cannot keep them, MySQL,
        # which is judged first).
        response = case.call(headers=auth)
        refused = response.status_code in (400, 415) or (
            response.status_code == 409 and "not_supported" in response.text
        )
        assert refused, response.text
        return
    batch = case.operation.path.endswith("/batches/") and case.method.upper() == "POST"
    if batch:
        # A task breaking a rule between fields (as above), and a callback on a queue that
        # nothing serves: refused (400) by checks that OpenAPI 3.0 cannot state.
        items = body.get("tasks") if isinstance(body.get("tasks"), list) else []
        response = case.call(headers=auth)
        if any(isinstance(t, dict) and refused_dependency(t) for t in items):
            # Or a 409 `not_supported`: keys on a database that cannot keep them (MySQL).
            refused = response.status_code in (400, 415) or "not_supported" in response.text
            assert refused, response.text
            return
        if response.status_code == 400 and "unknown_queue" in response.text:
            return
        expiring = any(isinstance(t, dict) and {"expires_in", "expires_at"} & set(t) for t in items)
        if response.status_code == 400 and expiring and "expires_" in response.text:
            return  # an expiry the clock or another field refuses, as for `POST /tasks/`
        notifying = any(isinstance(t, dict) and "notify" in t for t in items)
        if response.status_code == 400 and notifying and "notify" in response.text:
            return  # a notify URL refused by its rules or the settings, as for `POST /tasks/`
    # A batch's tasks are a bulk submission's items: the same leniency as `bulk`.
    excluded = [negative_data_rejection] if bulk or batch else []
    if case.operation.path.endswith("/tasks/") and {"expires_in", "expires_at", "notify"} & set(
        body
    ):
        # An expiry is refused when it is past, not after `not_before`, or given twice: what
        # the clock and another field decide, which OpenAPI cannot state; a notify URL when
        # it is not https:// or no secret signs it (the settings). Such a refusal is a 400
        # naming the field; the rest of the checks hold.
        response = case.call(headers=auth)
        if response.status_code == 400 and {"expires_in", "expires_at", "notify"} & set(
            response.json().get("errors", {})
        ):
            excluded.append(positive_data_acceptance)
        case.validate_response(response, excluded_checks=excluded, headers=auth)
        return
    if case.operation.path.endswith("/wait/"):
        # What a wait needs depends on its kind (a sleep its timeout, an event wait its
        # event_kind, a signal wait its signal), and a match's values are scalars: rules
        # OpenAPI 3.0 cannot state, refused with a 400 naming them.
        response = case.call(headers=auth)
        if response.status_code == 400 and {"match", "non_field_errors"} & set(
            response.json().get("errors", {})
        ):
            excluded.append(positive_data_acceptance)
        case.validate_response(response, excluded_checks=excluded, headers=auth)
        return
    if case.operation.path.endswith("/complete/") and body.get("children"):
        # A child is a submission: the rules between its fields, its expiry and its notify URL
        # (see above) refuse it with a 400 naming `children`, which OpenAPI cannot state.
        response = case.call(headers=auth)
        if response.status_code == 400 and "children" in response.json().get("errors", {}):
            excluded.append(positive_data_acceptance)
        case.validate_response(response, excluded_checks=excluded, headers=auth)
        return
    case.call_and_validate(headers=auth, excluded_checks=excluded)
