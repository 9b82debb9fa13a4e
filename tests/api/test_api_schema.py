"""The OpenAPI schema: generated without a warning, every operation under an id of its own."""

from __future__ import annotations

import pytest
from drf_spectacular.drainage import GENERATOR_STATS

from tests.helpers import API

pytestmark = pytest.mark.django_db

# Each operation's id: what a generated client names its method.
OPERATION_IDS = {
    ("get", "/tasks/"): "list_tasks",
    ("post", "/tasks/"): "submit_task",
    ("post", "/bulk/tasks/"): "submit_tasks",
    ("post", "/bulk/tasks/cancel/"): "cancel_tasks",
    ("get", "/tasks/{rn}/"): "get_task",
    ("get", "/tasks/{rn}/log/"): "get_task_log",
    ("post", "/tasks/{rn}/cancel/"): "cancel_task",
    ("post", "/tasks/{rn}/heartbeat/"): "heartbeat_task",
    ("post", "/tasks/{rn}/complete/"): "complete_task",
    ("post", "/tasks/{rn}/abort/"): "abort_task",
    ("post", "/tasks/{rn}/yield/"): "yield_task",
    ("post", "/tasks/{rn}/snooze/"): "snooze_task",
    ("get", "/tasks/{rn}/steps/"): "get_task_steps",
    ("post", "/tasks/{rn}/step/"): "record_task_step",
    ("post", "/tasks/{rn}/checkpoint/"): "checkpoint_task",
    ("post", "/tasks/{rn}/wait/"): "wait_task",
    ("post", "/tasks/{rn}/signals/{name}/"): "signal_task",
    ("post", "/signals/{token}/"): "signal_by_token",
    ("post", "/tasks/{rn}/retry/"): "retry_task",
    ("post", "/tasks/{rn}/reset/"): "reset_task_lease",
    ("post", "/tasks/{rn}/discard/"): "discard_task",
    ("post", "/batches/"): "submit_batch",
    ("get", "/batches/{id}/"): "get_batch",
    ("get", "/batches/{id}/results/"): "batch_results",
    ("post", "/batches/{id}/cancel/"): "cancel_batch",
    ("get", "/workers/"): "list_workers",
    ("post", "/workers/"): "register_worker",
    ("get", "/workers/{name}/"): "get_worker",
    ("post", "/workers/{name}/lease/"): "lease_tasks",
    ("post", "/workers/{name}/stop/"): "stop_worker",
    ("get", "/queues/"): "list_queues",
    ("get", "/queues/{name}/pause/"): "get_queue_settings",
    ("put", "/queues/{name}/pause/"): "pause_queue",
    ("delete", "/queues/{name}/pause/"): "resume_queue",
    ("put", "/queues/{name}/limit/"): "limit_queue",
    ("put", "/queues/{name}/cap/"): "cap_queue",
    ("get", "/tasks/{rn}/eta/"): "forecast_task",
    ("post", "/tasks/{rn}/eta/"): "forecast_task_what_if",
    ("post", "/tasks/{rn}/release-order/"): "release_task_order_key",
    ("post", "/tasks/{rn}/pause/"): "pause_task",
    ("post", "/tasks/{rn}/resume/"): "resume_task",
    ("delete", "/tasks/{rn}/"): "delete_task",
    ("get", "/locks/"): "list_locks",
    ("get", "/limits/"): "list_limits",
    ("post", "/limits/"): "set_limit",
    ("patch", "/limits/{name}/"): "change_limit",
    ("get", "/rates/"): "list_rates",
    ("post", "/rates/"): "set_rate",
    ("patch", "/rates/{name}/"): "change_rate",
    ("post", "/holds/{token}/release/"): "release_hold",
    ("get", "/schedules/"): "list_schedules",
    ("post", "/schedules/"): "create_schedule",
    ("get", "/schedules/{name}/"): "get_schedule",
    ("patch", "/schedules/{name}/"): "update_schedule",
    ("delete", "/schedules/{name}/"): "delete_schedule",
    ("post", "/schedules/{name}/run/"): "run_schedule",
    ("get", "/schedules/{name}/why/"): "why_schedule",
    ("get", "/schedules/{name}/calendar/"): "schedule_calendar",
    ("get", "/events/"): "list_events",
    ("post", "/events/"): "emit_event",
    ("get", "/health/"): "check_health",
    ("get", "/schema/"): "get_schema",
}


def test_generating_the_schema_emits_no_warning_or_error(api, capsys):
    GENERATOR_STATS.reset()
    response = api.get(f"{API}/schema/?format=json")
    assert response.status_code == 200
    assert dict(GENERATOR_STATS._warn_cache) == {}
    assert dict(GENERATOR_STATS._error_cache) == {}
    assert "Warning" not in capsys.readouterr().err


def test_every_operation_has_its_own_declared_id(api):
    schema = api.get(f"{API}/schema/?format=json").json()
    ids = {
        (method, path.removeprefix(API)): operation["operationId"]
        for path, operations in schema["paths"].items()
        for method, operation in operations.items()
    }
    assert ids == OPERATION_IDS
    assert len(set(ids.values())) == len(ids)
