"""The distinct errors of the state machine (SPEC §3).

Each carries a machine-readable `code`; an HTTP API returns `{"code": ..., "detail": ...}`.
"""

from __future__ import annotations


class ScyllaError(Exception):
    """Base class of every scylla_django error."""

    code = "scylla_error"

    def __init__(self, detail: str, *, rn: str | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.rn = rn


class TaskNotFound(ScyllaError):
    """No task has this rn (it never existed, or it was purged)."""

    code = "task_not_found"


class WorkerNotFound(ScyllaError):
    """No registered worker has this name."""

    code = "worker_not_found"


class DuplicateTask(ScyllaError):
    """A task with this rn already exists; submission is idempotent per rn."""

    code = "duplicate_task"


class InvalidTransition(ScyllaError):
    """The task's current status does not allow the operation."""

    code = "invalid_transition"

    def __init__(self, detail: str, *, rn: str | None = None, status: str | None = None) -> None:
        super().__init__(detail, rn=rn)
        self.status = status


class LeaseLost(InvalidTransition):
    """The worker no longer holds the task's lease (it was reset, or another worker holds it).

    The worker must stop working on the task and write nothing more for it.
    """

    code = "lease_lost"


class TaskCancelled(InvalidTransition):
    """The task was cancelled by a client; the worker should stop working on it."""

    code = "task_cancelled"


class WorkerStopping(ScyllaError):
    """The worker is shutting down and has yielded the task; the handler should return."""

    code = "worker_stopping"


class Abort(Exception):
    """Raised by a handler to abort its task on purpose, with an error code.

    `raise Abort("empty", "no rows matched", args={"day": 3})` aborts the task with the error
    `{"code": "empty", "args": {"day": 3}, "description": "no rows matched"}`. With
    `retry=True` the error asks for a retry under the task's retry policy.
    """

    def __init__(
        self,
        code: str,
        description: str = "",
        *,
        args: dict[str, object] | None = None,
        retry: bool = False,
    ) -> None:
        super().__init__(f"{code}: {description}" if description else code)
        self.code = code
        self.description = description
        self.error_args = args or {}
        self.retry = retry

    def as_error(self) -> dict[str, object]:
        error: dict[str, object] = {
            "code": self.code,
            "args": self.error_args,
            "description": self.description,
        }
        if self.retry:
            error["retry"] = True
        return error
