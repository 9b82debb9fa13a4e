"""The distinct errors of the state machine (docs/discussions/correctness.md).

Each carries a machine-readable `code`; an HTTP API returns `{"code": ..., "detail": ...}`.
"""

from __future__ import annotations

import traceback
from datetime import timedelta
from typing import Any

from django.core.exceptions import ValidationError

from .text import TIMEOUT_MAX, DurationError, positive_duration


class ScyllaError(Exception):
    """Base class of every scylla_django error.

    A subclass names its code in its header: `class TaskNotFound(ScyllaError, code="...")`.
    """

    code = "scylla_error"

    def __init_subclass__(cls, *, code: str | None = None, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if code is not None:
            cls.code = code

    def __init__(self, detail: str, *, rn: str | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.rn = rn


class TaskNotFound(ScyllaError, code="task_not_found"):
    """No task has this rn (it never existed, or it was purged)."""


class WorkerNotFound(ScyllaError, code="worker_not_found"):
    """No registered worker has this name."""


class DuplicateTask(ScyllaError, code="duplicate_task"):
    """A task with this rn already exists; submission is idempotent per rn."""


class DuplicateKey(DuplicateTask, code="duplicate"):
    """An active task (or a finished one inside its window) holds this unique key.

    `key` is the key; `rn` names the task that holds it.
    """

    def __init__(self, detail: str, *, key: str, rn: str) -> None:
        super().__init__(detail, rn=rn)
        self.key = key


class QueueFull(ScyllaError, code="queue_full"):
    """A submission found its queue (or its admission key) at its `max_ready` cap and was
    refused (`on_full="reject"`, or `"wait"` past its timeout); nothing was written.

    `scope` names the cap ("queue emails", "key tenant:42"), `max_ready` its size and
    `retry_after` the seconds after which a place is likely to be free (the forecast of the
    queue's next start; at least 1).
    """

    def __init__(self, detail: str, *, scope: str, max_ready: int, retry_after: int) -> None:
        super().__init__(detail)
        self.scope = scope
        self.max_ready = max_ready
        self.retry_after = retry_after


class InvalidTransition(ScyllaError, code="invalid_transition"):
    """The task's current status does not allow the operation."""

    def __init__(self, detail: str, *, rn: str | None = None, status: str | None = None) -> None:
        super().__init__(detail, rn=rn)
        self.status = status


class LeaseLost(InvalidTransition, code="lease_lost"):
    """The worker no longer holds the task's lease (it was reset, or another worker holds it).

    The worker must stop working on the task and write nothing more for it.
    """


class TaskCancelled(InvalidTransition, code="task_cancelled"):
    """The task was cancelled by a client; the worker should stop working on it."""


class OwnerAlive(InvalidTransition, code="owner_alive"):
    """The worker holding the lease is still alive: an operator may not take the lease away."""


class TaskPaused(InvalidTransition, code="task_paused"):
    """An operator paused the task (`Task.pause()`): it is not leased, nor paused again,
    until it is resumed."""


class NotPaused(InvalidTransition, code="not_paused"):
    """The task is not paused: there is nothing to resume."""


class TaskStarted(InvalidTransition, code="task_started"):
    """The task has started (it is running, or finished): it cannot be deleted; cancel it."""


class TaskTimedOut(ScyllaError, code="timeout"):
    """The task ran past its run-time limit: the handler should return (the task is aborted
    with the error `timeout` whatever it returns)."""

    def __init__(self, detail: str, *, rn: str | None = None, timeout: float = 0.0) -> None:
        super().__init__(detail, rn=rn)
        self.timeout = timeout

    def as_error(self) -> dict[str, Any]:
        """The error recorded on the task: `{"code": "timeout", "args": {"timeout": s}}`."""
        return error_record(self.code, self.detail, {"timeout": self.timeout})


class RateExceeded(ScyllaError, code="rate_exceeded"):
    """`rates.consume()` found no room in the rate's window within its wait; `retry_after`
    is the seconds until room is expected (an estimate)."""

    def __init__(self, detail: str, *, rate: str, retry_after: float) -> None:
        super().__init__(detail)
        self.rate = rate
        self.retry_after = retry_after


class WorkerStopping(ScyllaError, code="worker_stopping"):
    """The worker is shutting down and has yielded the task; the handler should return."""


class Parked(ScyllaError, code="parked"):
    """The handler parked its task in a durable sleep or wait (`ctx.durable_sleep()`,
    `ctx.wait_for()`): the task is ready again when the wait ends, and this run writes nothing
    more. Raised out of the handler, as a stop is."""


class TaskFinished(InvalidTransition, code="task_finished"):
    """The task is completed, aborted or cancelled: a signal to it is refused."""


class StepAlreadyRecorded(InvalidTransition, code="step_already_recorded"):
    """The task has recorded a step of this name already: a step is recorded once."""


class SignalAlreadySent(InvalidTransition, code="signal_already_sent"):
    """A signal of this name was sent to the task already: a signal is delivered once."""


#: What `ctx.wait_for()` returns when its wait timed out (with `on_timeout="return"`, the
#: default): false in a test, so `if not decision:` reads as "no answer came".
class TimedOut:
    """The type of `TIMED_OUT`, the value of a wait that timed out."""

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "TIMED_OUT"

    def __reduce__(self) -> str:
        return "TIMED_OUT"  # one value, in a child process too


TIMED_OUT = TimedOut()


class WaitTimedOut(Exception):
    """A durable wait asked to raise on its timeout (`ctx.wait_for(..., on_timeout="raise")`)
    timed out before its event or signal came."""

    def __init__(self, name: str) -> None:
        super().__init__(f"the wait {name!r} timed out")
        self.name = name


def error_record(code: str, description: str = "", args: object = None) -> dict[str, Any]:
    """One error of an aborted task, as stored: `{"code": ..., "args": ..., "description": ...}`.

    `args` is any JSON value, `{}` when omitted.
    """
    return {"code": code, "args": {} if args is None else args, "description": description}


def exception_error(exc: BaseException) -> dict[str, Any]:
    """The error recorded when a handler raises: code `exception`, with type, message, trace."""
    message = str(exc).replace("\x00", "\\0")  # NUL cannot be stored in JSON columns
    trace = "".join(traceback.format_exception(exc)).replace("\x00", "\\0")
    return error_record(
        "exception",
        f"{type(exc).__name__}: {message}"[:500],
        {
            "type": f"{type(exc).__module__}.{type(exc).__qualname__}",
            "message": message[:2000],
            "traceback": trace[-8000:],
        },
    )


class Abort(Exception):
    """Raised by a handler to abort its task on purpose, with an error code.

    `raise Abort("empty", "no rows matched", args={"day": 3})` aborts the task with the error
    `{"code": "empty", "args": {"day": 3}, "description": "no rows matched"}`. With
    `retry=True` the error asks for a retry: under the task's retry policy, else its handler's,
    else the default `Retry()`.
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

    def as_error(self) -> dict[str, Any]:
        """The error recorded on the task (see `error_record`); `retry` when it asks for one."""
        error = error_record(self.code, self.description, self.error_args)
        if self.retry:
            error["retry"] = True
        return error


class Snooze(Exception):
    """Raised by a handler to put its task back to ready for `delay` (seconds or a timedelta).

    `raise Snooze(30)` (or `ctx.snooze(30)`) ends this run: the task is ready again 30 s later
    on the database clock, its attempt and lease count unspent; a History `TaskSnooze` row says
    so. A task that would snooze more than `SCYLLA["MAX_SNOOZES"]` times is aborted with the
    error `too_many_snoozes` instead.

    `raise Snooze()` (no delay) waits what the handler's snooze policy says for the task's
    next snooze (`@handler(queue, snooze=Exponential(...))`: its first waits `initial`, the
    nth `initial * base ** (n - 1)`, at most `cap`); under a handler without one the task is
    aborted with the error `invalid_delay`, as for a bad delay.
    """

    def __init__(self, delay: timedelta | float | str | None = None) -> None:
        # A bad delay fails where it is written; None is the handler's policy's to choose.
        checked = None if delay is None else validate_delay(delay)
        super().__init__("snooze" if delay is None else f"snooze for {delay}")
        self.delay = checked


def validate_delay(value: object) -> timedelta:
    """A snooze's delay: a positive duration (a timedelta, seconds or text such as "30s"), at
    most `TIMEOUT_MAX`; else ValidationError `invalid_delay`."""
    try:
        return positive_duration(value, maximum=TIMEOUT_MAX)
    except DurationError:
        raise ValidationError(
            f"A delay must be a positive duration, not {value!r}.", code="invalid_delay"
        ) from None
