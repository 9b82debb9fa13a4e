"""Retry policies: when an aborted task is followed by a new task, and after how long.

A retry never changes the aborted task: it stays aborted, a permanent record. The retry is a new
`ready` task with the same queue, spec and priority, `not_before = abort time + backoff`, linked
to the task it follows (`retry_of`) and to the first task of the chain (`root`), and numbered
(`attempt`). Its rn is derived from the root and the attempt number, so a chain can never fork:
a second successor for the same attempt is refused by the unique rn.

```python
@handler("emails", retry=Retry(max_attempts=5, backoff=Exponential(base=2, cap=600),
                               jitter=True, on=(SMTPException, TimeoutError)))
def send(ctx): ...

Task.objects.submit("emails", spec, retry=Retry(max_attempts=3))   # overrides the handler's

# settings.py: without a deploy, per queue, and a default ("*") for queues with no policy
SCYLLA = {"RETRY": {"emails": {"max_attempts": 8, "backoff": "fixed", "delay": 60},
                    "*": {"max_attempts": 2}}}
```

A task's policy is its own (given at submit), else its queue's entry in `SCYLLA["RETRY"]`, else
its handler's, else the `"*"` entry of `SCYLLA["RETRY"]`, else none.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.core.exceptions import ValidationError
from django.utils.module_loading import import_string

from .conf import scylla_settings
from .exceptions import TaskTimedOut
from .validation import RN_MAX_LENGTH, validate_queue

#: The error code of a task aborted at its run-time limit, by its worker or by the monitor
#: (its lease expired at the limit).
TIMEOUT_CODE = TaskTimedOut.code
#: The error code written when a lease expired `MAX_LEASES` times (see `reset_expired`).
MAX_LEASES_CODE = "max_leases_exceeded"
#: The error code a worker writes when a handler raises (the exception's type is in `args`).
EXCEPTION_CODE = "exception"
#: The error code a worker under process isolation writes when the kernel stopped the child
#: process running a handler at its CPU limit (`@handler(cpu_limit=...)`, SIGXCPU).
CPU_LIMIT_CODE = "cpu_limit"
#: The codes `Retry(timeouts=True)` retries: the run-time limit's.
TIMEOUT_CODES = (TIMEOUT_CODE,)
#: The codes `Retry(crashes=True)` retries: a run that ended with no outcome from its handler
#: again and again (the worker, or the child process running the handler under `--isolation
#: process`, died, froze or lost its lease: each such run is a lost lease, and the monitor
#: aborts the task at `MAX_LEASES`).
CRASH_CODES = (MAX_LEASES_CODE,)
MAX_DELAY = 365 * 86400.0


def _number(value: object, name: str, *, minimum: float, strict: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValidationError(f"{name} must be a number, not {value!r}.", code="invalid_retry")
    if value < minimum or (strict and value == minimum) or value > MAX_DELAY:
        bound = f"greater than {minimum:g}" if strict else f"at least {minimum:g}"
        raise ValidationError(
            f"{name} must be {bound} and at most {MAX_DELAY:.0f} (365 days), not {value!r}.",
            code="invalid_retry",
        )
    return float(value)


def exponential_delay(attempt: int, *, initial: float, base: float = 2.0, cap: float) -> float:
    """The backoff after failure number `attempt` (1 for the first): `initial * base **
    (attempt - 1)` seconds, at most `cap`.

    The one exponential backoff: a task's retry policy (`Exponential`), the worker's and its
    listener's retries of a database call, and the monitor's retries of a pass all wait this.
    """
    exponent = max(0, attempt - 1)
    if initial <= 0:
        return 0.0
    if cap <= initial:
        return float(cap)
    # Compare logarithms rather than computing base ** exponent, which overflows.
    if base > 1 and exponent * math.log(base) > math.log(cap / initial):
        return float(cap)
    return float(min(cap, initial * base**exponent))


#: The wait before retrying a failed database call, by consecutive failure: 0.1 s, doubling, up
#: to 1 s. A worker (and its LISTEN connection) is back within about a second of the database
#: accepting connections again, and a refused connection costs next to nothing.
DATABASE_RETRY_INITIAL = 0.1
DATABASE_RETRY_MAX = 1.0


def database_retry_delay(failures: int) -> float:
    """Seconds to wait after `failures` consecutive failed database calls (see above)."""
    return exponential_delay(failures, initial=DATABASE_RETRY_INITIAL, cap=DATABASE_RETRY_MAX)


@dataclass(frozen=True)
class Fixed:
    """The same delay, `seconds`, before every retry."""

    seconds: float = 10.0

    def __post_init__(self) -> None:
        _number(self.seconds, "Fixed.seconds", minimum=0)

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number `attempt` (1 for the first task)."""
        return float(self.seconds)

    def as_json(self) -> dict[str, Any]:
        return {"backoff": "fixed", "delay": self.seconds}


@dataclass(frozen=True)
class Exponential:
    """`initial * base ** (attempt - 1)` seconds, at most `cap`: 1, 2, 4, 8, … by default."""

    base: float = 2.0
    initial: float = 1.0
    cap: float = 600.0

    def __post_init__(self) -> None:
        _number(self.base, "Exponential.base", minimum=1)
        _number(self.initial, "Exponential.initial", minimum=0)
        _number(self.cap, "Exponential.cap", minimum=0)

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number `attempt` (1 for the first task)."""
        return exponential_delay(attempt, initial=self.initial, base=self.base, cap=self.cap)

    def as_json(self) -> dict[str, Any]:
        return {"backoff": "exponential", "delay": self.initial, "base": self.base, "cap": self.cap}


Backoff = Fixed | Exponential


def _type_name(cls: type[BaseException]) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


@dataclass(frozen=True)
class Retry:
    """A retry policy.

    - `max_attempts`: tasks in the chain at most, the first included (3: two retries).
    - `backoff`: `Exponential()` (default) or `Fixed(seconds)`, in seconds after the abort.
    - `jitter`: wait a uniformly random time between half the backoff and the full backoff, so
      that tasks failing together do not all come back together.
    - `on`: exception classes (or their dotted names) whose handler errors are retried;
      subclasses match. Default: any exception.
    - `codes`: `Abort` codes that are retried too (a handler may also `raise Abort(...,
      retry=True)`).
    - `timeouts`: retry a task aborted at its run-time limit (the code `timeout`, written by
      its worker or, for a lease that expired at the limit, by the monitor).
    - `crashes`: retry a task whose runs ended with no outcome from its handler `MAX_LEASES`
      times (the code `max_leases_exceeded`): its worker, or under `--isolation process` the
      child process running its handler, died, froze or lost its lease each time.
    - `resume`: a retry resumes where the task it follows stopped: it is given that task's
      completed steps, cursor and ended waits (`docs/howto/durable.md`). Without it a retry
      starts over.
    """

    max_attempts: int = 3
    backoff: Backoff = field(default_factory=Exponential)
    jitter: bool = False
    on: tuple[type[BaseException] | str, ...] = (Exception,)
    codes: tuple[str, ...] = ()
    timeouts: bool = True
    crashes: bool = True
    resume: bool = False

    def __post_init__(self) -> None:
        if (
            isinstance(self.max_attempts, bool)
            or not isinstance(self.max_attempts, int)
            or not 1 <= self.max_attempts <= 1000
        ):
            raise ValidationError(
                f"max_attempts must be an integer 1..1000, not {self.max_attempts!r}.",
                code="invalid_retry",
            )
        if not isinstance(self.backoff, Fixed | Exponential):
            raise ValidationError(
                "backoff must be Fixed(...) or Exponential(...).", code="invalid_retry"
            )
        for name in ("jitter", "timeouts", "crashes", "resume"):
            if not isinstance(getattr(self, name), bool):
                raise ValidationError(f"{name} must be a boolean.", code="invalid_retry")
        object.__setattr__(self, "on", tuple(self.on))
        object.__setattr__(self, "codes", tuple(self.codes))
        for item in self.on:
            ok = (isinstance(item, str) and item.strip()) or (
                isinstance(item, type) and issubclass(item, BaseException)
            )
            if not ok:
                raise ValidationError(
                    f"on must hold exception classes or dotted names, not {item!r}.",
                    code="invalid_retry",
                )
        if not all(isinstance(code, str) and code for code in self.codes):
            raise ValidationError("codes must be non-empty strings.", code="invalid_retry")

    # -- timing -------------------------------------------------------------------------------

    def bounds(self, attempt: int) -> tuple[timedelta, timedelta]:
        """The shortest and longest wait after failed attempt `attempt` (equal without jitter)."""
        delay = self.backoff.delay(attempt)
        low = delay / 2 if self.jitter else delay
        return timedelta(seconds=low), timedelta(seconds=delay)

    def delay(self, attempt: int, rng: random.Random | None = None) -> timedelta:
        """The wait after failed attempt `attempt`: the backoff, jittered if asked."""
        low, high = self.bounds(attempt)
        if low == high:
            return high
        pick = (rng or random).uniform(low.total_seconds(), high.total_seconds())
        return timedelta(seconds=pick)

    def allows(self, attempt: int) -> bool:
        """Whether a task with this attempt number may be followed by another."""
        return attempt < self.max_attempts

    # -- matching -----------------------------------------------------------------------------

    def covers(self, errors: Sequence[Mapping[str, Any]]) -> bool:
        """Whether an abort with `errors` is one this policy retries.

        An error asks for a retry itself with `"retry": true` (what `Abort(..., retry=True)`
        writes). A handler exception (code `exception`, its type in `args.type`) matches `on`
        when its class is one of them or a subclass; a class that cannot be imported again by
        its dotted name matches by name only. Other codes match `codes`; the run-time
        limit's (`TIMEOUT_CODES`) match when `timeouts` is set, and those of a run that ended
        with no outcome (`CRASH_CODES`) when `crashes` is.
        """
        return any(self._covers(error) for error in errors)

    def _covers(self, error: Mapping[str, Any]) -> bool:
        code = error.get("code")
        if error.get("retry") is True or code in self.codes:
            return True
        if code in TIMEOUT_CODES:
            return self.timeouts
        if code in CRASH_CODES:
            return self.crashes
        if code != EXCEPTION_CODE:
            return False
        args = error.get("args")
        name = args.get("type") if isinstance(args, Mapping) else None
        if not isinstance(name, str):
            return False
        wanted = self._classes()
        if Exception in wanted or name in self._names():
            return True
        try:
            raised = import_string(name)
        except ImportError:
            return False
        return isinstance(raised, type) and issubclass(raised, tuple(wanted))

    def _names(self) -> set[str]:
        return {item if isinstance(item, str) else _type_name(item) for item in self.on}

    def _classes(self) -> list[type[BaseException]]:
        classes: list[type[BaseException]] = []
        for item in self.on:
            if isinstance(item, type):
                classes.append(item)
                continue
            try:
                found = import_string(item)
            except ImportError:
                continue
            if isinstance(found, type) and issubclass(found, BaseException):
                classes.append(found)
        return classes

    # -- storage ------------------------------------------------------------------------------

    def as_json(self) -> dict[str, Any]:
        """The policy as JSON, as stored on a task (`Task.retry_policy`)."""
        return {
            "max_attempts": self.max_attempts,
            **self.backoff.as_json(),
            "jitter": self.jitter,
            "on": sorted(self._names()),
            "codes": list(self.codes),
            "timeouts": self.timeouts,
            "crashes": self.crashes,
            # Only when set: the policies stored before it read the same.
            **({"resume": True} if self.resume else {}),
        }

    @classmethod
    def from_json(cls, data: object) -> Retry:
        """The policy `as_json()` wrote (or a client sent); ValidationError if it is malformed.

        `{"max_attempts", "backoff": "exponential" | "fixed", "delay", "base", "cap", "jitter",
        "on", "codes", "timeouts", "crashes", "resume"}`, every key optional. `delay` is the
        first wait (exponential) or every wait (fixed); `base` and `cap` apply to exponential
        backoff only.
        """
        if not isinstance(data, Mapping):
            raise ValidationError("A retry policy is an object.", code="invalid_retry")
        unknown = set(data) - {"max_attempts", *BACKOFF_KEYS, "jitter", *FLAGS, "on", "codes"}
        if unknown:
            raise ValidationError(
                f"Unknown retry policy keys: {', '.join(sorted(unknown))}.", code="invalid_retry"
            )
        kwargs: dict[str, Any] = {}
        for key in ("max_attempts", "jitter", *FLAGS):
            if key in data:
                kwargs[key] = data[key]
        for key in ("on", "codes"):
            if key in data:
                value = data[key]
                if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                    raise ValidationError(f"{key} is a list of strings.", code="invalid_retry")
                kwargs[key] = tuple(value)
        kwargs["backoff"] = _backoff_from_json({k: v for k, v in data.items() if k in BACKOFF_KEYS})
        try:
            return cls(**kwargs)
        except TypeError as exc:
            raise ValidationError(str(exc), code="invalid_retry") from exc


def resumes(policy: Retry | None, stored: object) -> bool:
    """Whether a retry resumes where the task it follows stopped: its policy's `resume`
    (`policy`, else the policy stored on the task, `stored`)."""
    if policy is not None:
        return policy.resume
    return isinstance(stored, Mapping) and stored.get("resume") is True


BACKOFF_KEYS = ("backoff", "delay", "base", "cap")
#: The policy's switches for the aborts no handler raised, by the name they go by in JSON.
FLAGS = ("timeouts", "crashes", "resume")


def _backoff_from_json(data: Mapping[str, Any]) -> Backoff:
    kind = data.get("backoff", "exponential")
    if kind not in ("exponential", "fixed"):
        raise ValidationError(
            f'backoff is "exponential" or "fixed", not {kind!r}.', code="invalid_retry"
        )
    if kind == "fixed":
        return Fixed(data.get("delay", Fixed.seconds))
    return Exponential(
        base=data.get("base", Exponential.base),
        initial=data.get("delay", Exponential.initial),
        cap=data.get("cap", Exponential.cap),
    )


# -- handler-level and configured policies ------------------------------------------------------

_queue_policies: dict[str, Retry] = {}

#: The key of `SCYLLA["RETRY"]` whose policy is the project's default: it applies to the tasks
#: of every queue with no policy of their own, of their queue's entry or of their handler's.
DEFAULT_KEY = "*"


def register_policy(queue: str, policy: Retry | None) -> None:
    """Make `policy` the default of `queue` (what `@handler(queue, retry=...)` does)."""
    queue = validate_queue(queue)
    if policy is None:
        _queue_policies.pop(queue, None)
    elif not isinstance(policy, Retry):
        raise TypeError(f"retry must be a Retry(...), not {policy!r}")
    else:
        _queue_policies[queue] = policy


def configured_problems() -> dict[str, str]:
    """What is wrong with `SCYLLA["RETRY"]`, by the key of each bad entry (a queue name or
    `DEFAULT_KEY`; `""` for the setting itself). Each entry is read by `Retry.from_json`, the
    parser of a policy sent over HTTP; the system check `scylla_django.E030` reports these."""
    return _read_configured()[1]


def configured_policies() -> dict[str, Retry]:
    """The valid policies of `SCYLLA["RETRY"]` by queue name (and `DEFAULT_KEY`), read from
    the settings on every call; a bad entry is left out (and reported by `manage.py check`)."""
    return _read_configured()[0]


def _read_configured() -> tuple[dict[str, Retry], dict[str, str]]:
    value = scylla_settings.RETRY
    if not isinstance(value, Mapping):
        return {}, {"": f"must be a dict of retry policies by queue name, got {value!r}"}
    policies: dict[str, Retry] = {}
    problems: dict[str, str] = {}
    for key, data in value.items():
        try:
            if key != DEFAULT_KEY:
                validate_queue(key)
            policies[key] = Retry.from_json(data)
        except ValidationError as exc:
            problems[str(key)] = "; ".join(exc.messages)
    return policies, problems


def queue_policy(queue: str) -> Retry | None:
    """The policy of `queue`'s tasks that have none of their own: its entry in
    `SCYLLA["RETRY"]`, else its handler's (registered in this process), else the
    `SCYLLA["RETRY"]` default (`"*"`), else None."""
    configured = configured_policies()
    for policy in (configured.get(queue), _queue_policies.get(queue)):
        if policy is not None:
            return policy
    return configured.get(DEFAULT_KEY)


def policy_for(queue: str, stored: object) -> Retry | None:
    """A task's policy: its own (`Task.retry_policy`) if it has one, else its queue's
    (`queue_policy`)."""
    if stored is not None:
        try:
            return Retry.from_json(stored)
        except ValidationError:
            return None
    return queue_policy(queue)


# -- chains -------------------------------------------------------------------------------------


def successor_rn(root: str, attempt: int) -> str:
    """The rn of attempt number `attempt` of the chain started by `root`.

    Derived from the root and the number only, so that two writers who both try to add the
    same attempt collide on the unique rn instead of forking the chain.
    """
    suffix = f":retry-{attempt}"
    if len(root) + len(suffix) <= RN_MAX_LENGTH:
        return root + suffix
    digest = hashlib.sha256(root.encode()).hexdigest()[:16]
    return f"{root[: RN_MAX_LENGTH - len(suffix) - 17]}~{digest}{suffix}"


def retry_requested(errors: Iterable[Mapping[str, Any]]) -> bool:
    """Whether one of `errors` asks for a retry itself (`"retry": true`)."""
    return any(error.get("retry") is True for error in errors)


def policy_queues() -> list[str] | None:
    """The queues with a policy for the tasks that have none of their own: those whose
    handlers registered one in this process and those of `SCYLLA["RETRY"]`; None when the
    setting has a default (`"*"`), which covers every queue."""
    configured = configured_policies()
    if DEFAULT_KEY in configured:
        return None
    return sorted(set(_queue_policies) | set(configured))
