"""Settings, read live from `settings.SCYLLA` (a dict) so that `override_settings` works.

| key | default | meaning |
|---|---|---|
| `LEASE_LENGTH` | 10 s | lease length given by `lease()` and `heartbeat()` when none is passed |
| `RETENTION` | 10 days | terminal tasks older than this (by `updated`) are purged by the monitor |
| `MAX_LEASES` | `None` (off) | abort a task whose lease expired after this many started leases |
| `MAX_SNOOZES` | 100 | a task that would snooze more often is aborted (`too_many_snoozes`) |
| `SPEC_SIZE_LIMIT` | 1 MiB | largest `spec` (and `result`) accepted, in bytes of compact JSON |
| `TASK_LOG_MAX_BYTES` | 1 MiB | most bytes of a task's log kept (0: no log is captured) |
| `TASK_LOG_STORAGE` | `None` | the alias in `settings.STORAGES` of task logs (None: none kept) |
| `DEFAULT_PRIORITY` | 0 | priority of a submitted task that names none |
| `PURGE_CHUNK_SIZE` | 1000 | rows deleted per transaction by `purge()` |
| `RESET_CHUNK_SIZE` | 5000 | expired leases reset per transaction by `reset_expired()` |
| `HEARTBEAT_FAILURES` | 3 | consecutive failed heartbeats after which a worker gives a task up |
| `SCHEDULES` | `{}` | recurring schedules by name, synced into `Schedule` (see `schedules.py`) |
| `PREPARED_STATEMENTS` | `True` | PostgreSQL: hot statements are prepared (`db.prepared_cursor`) |
| `HANDLER_MODULES` | `["handlers"]` | modules of each app imported at startup (`@handler`s) |
| `LIMITS` | `{}` | limits by name: most running tasks holding a slot (`limits=...`); key families |
| `RATES` | `{}` | rates by name: most starts per period, "100/m" (`rate_key=...`); families |
| `TIMEOUTS` | `{}` | run-time limits by queue, for tasks and handlers that set none |
| `RETRY` | `{}` | retry policies (JSON, as over HTTP) by queue, and `"*"`: the default |
| `TIMEOUT_GRACE` | 10 s | how long a task past its timeout may still return before it is aborted |
| `EAGER` | `False` | run handlers at submit time, on commit, in the submitting process (tests) |
| `LISTEN_DATABASE` | `None` | the alias a worker's LISTEN connection is made from (a pooler) |
| `READ_DATABASE` | `None` | a replica of `default` that the admin and API GETs read |
| `QUEUE_DATABASES` | `{}` | database alias by queue (`routers.QueueRouter`) |
| `NOTIFY_SECRET` | `None` | the key that signs completion notifications (`notify=`) |
| `NOTIFY_ALLOW_HTTP` | `False` | accept `http://` notify URLs, not only `https://` |
| `NOTIFY_TIMEOUT` | 10 s | how long a notification's POST may take |
| `NOTIFY_ATTEMPTS` | 8 | POSTs of one notification at most (the first included) |
| `NOTIFY_BACKOFF` | 5 s | the wait after the first failed POST, doubling (at most an hour) |
| `MAX_READY` | `{}` | caps on ready tasks by admission key, or by key family (`admission_key=`) |
| `THROTTLE_RATES` | `{}` | the API's throttles: `{"user": "1000/hour", "token": "100/min"}` |

Durations may be given as a `timedelta`, a number of seconds or text such as `"30s"`, `"5m"`,
`"12h"`, `"7d"`. A lease lasts at least `LEASE_MIN` (1 second). Sizes (`SPEC_SIZE_LIMIT`,
`TASK_LOG_MAX_BYTES`) as a number of bytes or text such as `"512KB"`, `"1MB"`, `"1 MiB"`.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured

from .durations import short
from .text import DurationError, RateError, SizeError, byte_size, positive_duration, rate_parts

#: The entry of a key family in `LIMITS`/`RATES` that gives the size or rate of its members
#: not named there.
FAMILY_DEFAULT = "default"


def family_member(family: str, member: object) -> str:
    """The key name of member `member` of key family `family` ("tenant", 42: "tenant:42")."""
    return f"{family}:{member}"


# The shortest lease: under it a worker's heartbeat (a quarter of the lease) cannot keep up.
LEASE_MIN = timedelta(seconds=1)

DEFAULTS: dict[str, Any] = {
    "LEASE_LENGTH": timedelta(seconds=10),
    "RETENTION": timedelta(days=10),
    "MAX_LEASES": None,
    "MAX_SNOOZES": 100,
    "SPEC_SIZE_LIMIT": 1024 * 1024,
    "DEFAULT_PRIORITY": 0,
    "PURGE_CHUNK_SIZE": 1000,
    "RESET_CHUNK_SIZE": 5000,
    "HEARTBEAT_FAILURES": 3,
    "SCHEDULES": {},
    "PREPARED_STATEMENTS": True,
    "HANDLER_MODULES": ["handlers"],
    "LIMITS": {},
    "RATES": {},
    "MAX_READY": {},
    "THROTTLE_RATES": {},
    "TIMEOUTS": {},
    "RETRY": {},
    "TIMEOUT_GRACE": timedelta(seconds=10),
    "EAGER": False,
    "TASK_LOG_MAX_BYTES": 1024 * 1024,
    "TASK_LOG_STORAGE": None,
    "LISTEN_DATABASE": None,
    "READ_DATABASE": None,
    "QUEUE_DATABASES": {},
    "NOTIFY_SECRET": None,
    "NOTIFY_ALLOW_HTTP": False,
    "NOTIFY_TIMEOUT": timedelta(seconds=10),
    "NOTIFY_ATTEMPTS": 8,
    "NOTIFY_BACKOFF": timedelta(seconds=5),
}
_MODULE_NAME = re.compile(r"\A[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*\Z")


def as_duration(value: object, name: str, *, minimum: timedelta | None = None) -> timedelta:
    """A `timedelta` from a timedelta, seconds or text ("30s"); else ImproperlyConfigured."""
    try:
        return positive_duration(value, minimum=minimum)
    except DurationError as exc:
        if isinstance(value, bool):
            message = "must be a timedelta or seconds, not a bool"
        elif exc.reason == "type":
            message = (
                "must be a timedelta, a number of seconds or a duration such as '30s', "
                f"'5m', '12h', got {value!r}"
            )
        elif exc.reason == "short":
            message = f"must be at least {short(minimum or timedelta(0))}, got {value!r}"
        else:
            message = f"must be positive, got {value!r}"
        raise ImproperlyConfigured(f"SCYLLA[{name!r}] {message}") from None


def as_int(value: object, name: str, *, minimum: int, maximum: int | None = None) -> int:
    """An int within bounds, else ImproperlyConfigured."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ImproperlyConfigured(f"SCYLLA[{name!r}] must be an integer, got {value!r}")
    if value < minimum or (maximum is not None and value > maximum):
        bounds = f"{minimum}..{maximum}" if maximum is not None else f">= {minimum}"
        raise ImproperlyConfigured(f"SCYLLA[{name!r}] must be {bounds}, got {value}")
    return value


def as_size(value: object, name: str, *, minimum: int) -> int:
    """A number of bytes from bytes or text with a unit ("512KB", "1MB", "1 MiB"; see
    `text.byte_size`), at least `minimum`; else ImproperlyConfigured."""
    try:
        size = byte_size(value)
    except SizeError:
        raise ImproperlyConfigured(
            f"SCYLLA[{name!r}] must be a size in bytes or with a unit, such as 1048576, "
            f"'512KB', '1MB' or '1 MiB', got {value!r}"
        ) from None
    if size < minimum:
        raise ImproperlyConfigured(
            f"SCYLLA[{name!r}] must be at least {minimum} bytes, got {value!r}"
        )
    return size


def heartbeat_interval_for(lease_length: timedelta) -> timedelta:
    """The default heartbeat interval of a lease of `lease_length`: a quarter of it, so that
    three heartbeats fit in a lease with room to spare (one that fails, and two more, before
    the lease could expire). Every worker, in-process or over HTTP, defaults to it."""
    return lease_length / 4


def database_alias(value: object, name: str) -> str:
    """An alias of `settings.DATABASES`, else ImproperlyConfigured."""
    if not isinstance(value, str) or value not in django_settings.DATABASES:
        raise ImproperlyConfigured(
            f"SCYLLA[{name!r}] must be an alias of settings.DATABASES "
            f"({', '.join(map(repr, django_settings.DATABASES))}), got {value!r}"
        )
    return value


#: Settings whose names changed before the first release, old name -> new name (a warning
#: of `check` names the new one).
RENAMED = {"PURGE_BATCH_SIZE": "PURGE_CHUNK_SIZE", "RESET_BATCH_SIZE": "RESET_CHUNK_SIZE"}


class ScyllaSettings:
    """Typed access to the `SCYLLA` setting; every attribute is read from settings on access."""

    def _raw(self, name: str) -> Any:
        user = getattr(django_settings, "SCYLLA", None) or {}
        if not isinstance(user, dict):
            raise ImproperlyConfigured("settings.SCYLLA must be a dict")
        return user.get(name, DEFAULTS[name])

    def unknown_keys(self) -> list[str]:
        user = getattr(django_settings, "SCYLLA", None) or {}
        return sorted(set(user) - set(DEFAULTS)) if isinstance(user, dict) else []

    @property
    def LEASE_LENGTH(self) -> timedelta:
        return as_duration(self._raw("LEASE_LENGTH"), "LEASE_LENGTH", minimum=LEASE_MIN)

    @property
    def RETENTION(self) -> timedelta:
        return as_duration(self._raw("RETENTION"), "RETENTION")

    @property
    def MAX_LEASES(self) -> int | None:
        value = self._raw("MAX_LEASES")
        return None if value is None else as_int(value, "MAX_LEASES", minimum=1)

    @property
    def MAX_SNOOZES(self) -> int:
        return as_int(self._raw("MAX_SNOOZES"), "MAX_SNOOZES", minimum=0)

    @property
    def SPEC_SIZE_LIMIT(self) -> int:
        return as_size(self._raw("SPEC_SIZE_LIMIT"), "SPEC_SIZE_LIMIT", minimum=2)

    @property
    def DEFAULT_PRIORITY(self) -> int:
        return as_int(self._raw("DEFAULT_PRIORITY"), "DEFAULT_PRIORITY", minimum=0, maximum=255)

    @property
    def PURGE_CHUNK_SIZE(self) -> int:
        return as_int(self._raw("PURGE_CHUNK_SIZE"), "PURGE_CHUNK_SIZE", minimum=1)

    @property
    def RESET_CHUNK_SIZE(self) -> int:
        return as_int(self._raw("RESET_CHUNK_SIZE"), "RESET_CHUNK_SIZE", minimum=1)

    @property
    def HEARTBEAT_FAILURES(self) -> int:
        return as_int(self._raw("HEARTBEAT_FAILURES"), "HEARTBEAT_FAILURES", minimum=1)

    @property
    def PREPARED_STATEMENTS(self) -> bool:
        value = self._raw("PREPARED_STATEMENTS")
        if not isinstance(value, bool):
            raise ImproperlyConfigured(
                f"SCYLLA['PREPARED_STATEMENTS'] must be True or False, got {value!r}"
            )
        return value

    @property
    def HANDLER_MODULES(self) -> list[str]:
        """Module names (relative to each installed app) that hold `@handler` functions."""
        value = self._raw("HANDLER_MODULES")
        if (
            isinstance(value, str)
            or not isinstance(value, list | tuple)
            or not all(isinstance(name, str) and _MODULE_NAME.match(name) for name in value)
        ):
            raise ImproperlyConfigured(
                "SCYLLA['HANDLER_MODULES'] must be a list of module names such as "
                f"['handlers', 'tasks'], got {value!r}"
            )
        return list(value)

    @property
    def LIMITS(self) -> dict[str, int]:
        """The limits by name, each a count of running tasks of at least 1. A key family
        (`{"tenant": {"default": 5, "42": 20}}`) gives its members named here by their key
        names ("tenant:42"); its default is in `LIMIT_FAMILIES`."""
        sizes: dict[str, int] = {}
        self.LIMIT_FAMILIES  # noqa: B018  # a bad default is a bad setting too
        for name, value in self._families("LIMITS").items():
            if isinstance(value, dict):
                for member, n in value.items():
                    if member != FAMILY_DEFAULT:
                        label = f"LIMITS[{name!r}][{member!r}]"
                        sizes[family_member(name, member)] = as_int(n, label, minimum=1)
            else:
                sizes[name] = as_int(value, f"LIMITS[{name!r}]", minimum=1)
        return sizes

    @property
    def LIMIT_FAMILIES(self) -> dict[str, int]:
        """The default size of each key family of `LIMITS` that gives one, by family: a member
        (`limits=[("tenant", 42)]`) the settings do not name gets it."""
        return {
            name: as_int(value[FAMILY_DEFAULT], f"LIMITS[{name!r}][{FAMILY_DEFAULT!r}]", minimum=1)
            for name, value in self._families("LIMITS").items()
            if isinstance(value, dict) and FAMILY_DEFAULT in value
        }

    @property
    def RATES(self) -> dict[str, str]:
        """The rates by name, each as written ("100/m", "5/10s"). Each is checked by
        `manage.py check` (`rate_problems`) and where it is used: a bad one refuses the
        submissions that name it (`invalid_rate`), not every keyed submission. A key family's
        members are named by their key names, as in `LIMITS`."""
        rates: dict[str, str] = {}
        for name, value in self._families("RATES").items():
            if isinstance(value, dict):
                rates.update(
                    (family_member(name, member), rate)
                    for member, rate in value.items()
                    if member != FAMILY_DEFAULT
                )
            else:
                rates[name] = value
        return rates

    @property
    def RATE_FAMILIES(self) -> dict[str, str]:
        """The default rate of each key family of `RATES` that gives one, by family."""
        return {
            name: value[FAMILY_DEFAULT]
            for name, value in self._families("RATES").items()
            if isinstance(value, dict) and FAMILY_DEFAULT in value
        }

    def _families(self, setting: str) -> dict[str, Any]:
        """`LIMITS` or `RATES` as given: a dict by name, each value a size or rate, or a key
        family's dict of them by member (text) with an optional `default`."""
        value = self._raw(setting)
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise ImproperlyConfigured(f"SCYLLA[{setting!r}] must be a dict by name, got {value!r}")
        for name, entry in value.items():
            if isinstance(entry, dict) and not all(isinstance(k, str) for k in entry):
                raise ImproperlyConfigured(
                    f"SCYLLA[{setting!r}][{name!r}] (a key family) must be a dict by member "
                    f"(text) with an optional {FAMILY_DEFAULT!r}, got {entry!r}"
                )
        return value

    @property
    def MAX_READY(self) -> dict[str, int]:
        """Caps on ready tasks by admission key ("tenant:42": 100), or by a key's family
        (the part before its first colon: "tenant": 20 caps every "tenant:…" key that has no
        cap of its own), each at least 1."""
        value = self._raw("MAX_READY")
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise ImproperlyConfigured(
                f"SCYLLA['MAX_READY'] must be a dict by admission key, got {value!r}"
            )
        return {name: as_int(n, f"MAX_READY[{name!r}]", minimum=1) for name, n in value.items()}

    @property
    def THROTTLE_RATES(self) -> dict[str, str | None]:
        """The REST API's request rates (DRF's "100/min" form) by scope: "user" (per
        authenticated user) and "token" (per API token); a scope left out is not throttled."""
        value = self._raw("THROTTLE_RATES")
        if not isinstance(value, dict) or not set(value) <= {"user", "token"}:
            raise ImproperlyConfigured(
                "SCYLLA['THROTTLE_RATES'] must be a dict with the scopes 'user' and 'token', "
                f"got {value!r}"
            )
        for scope, rate in value.items():
            if rate is not None and (not isinstance(rate, str) or "/" not in rate):
                raise ImproperlyConfigured(
                    f"SCYLLA['THROTTLE_RATES'][{scope!r}] is a rate such as '100/min' or "
                    f"None, got {rate!r}"
                )
        return dict(value)

    def rate_problems(self) -> dict[str, str]:
        """What is wrong with each bad rate of `RATES`, by name (`text.rate_parts`; a family's
        default as "<family>:*")."""
        problems = {}
        defaults = {f"{name}:*": rate for name, rate in self.RATE_FAMILIES.items()}
        for name, rate in {**self.RATES, **defaults}.items():
            try:
                rate_parts(rate)
            except RateError as exc:
                problems[name] = str(exc)
        return problems

    @property
    def TIMEOUTS(self) -> dict[str, timedelta]:
        """The run-time limits by queue name, each a positive duration."""
        value = self._raw("TIMEOUTS")
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise ImproperlyConfigured(
                f"SCYLLA['TIMEOUTS'] must be a dict of durations by queue, got {value!r}"
            )
        return {queue: as_duration(t, f"TIMEOUTS[{queue!r}]") for queue, t in value.items()}

    @property
    def RETRY(self) -> Any:
        """The `RETRY` setting as given: retry policies by queue (`"*"`: the default), each
        the JSON of a policy; `retries.configured_policies()` reads and checks it."""
        return self._raw("RETRY")

    @property
    def TIMEOUT_GRACE(self) -> timedelta:
        return as_duration(self._raw("TIMEOUT_GRACE"), "TIMEOUT_GRACE")

    @property
    def EAGER(self) -> bool:
        value = self._raw("EAGER")
        if not isinstance(value, bool):
            raise ImproperlyConfigured(f"SCYLLA['EAGER'] must be True or False, got {value!r}")
        return value

    @property
    def TASK_LOG_MAX_BYTES(self) -> int:
        """The most bytes of a task's log that are kept (0: no log is captured)."""
        return as_size(self._raw("TASK_LOG_MAX_BYTES"), "TASK_LOG_MAX_BYTES", minimum=0)

    @property
    def TASK_LOG_STORAGE(self) -> str | None:
        """The alias in `settings.STORAGES` that task logs are saved to; None (the default):
        no log is kept (see `scylla_django.logs`)."""
        value = self._raw("TASK_LOG_STORAGE")
        if value is None:
            return None
        if not isinstance(value, str) or value not in django_settings.STORAGES:
            raise ImproperlyConfigured(
                "SCYLLA['TASK_LOG_STORAGE'] must be an alias of settings.STORAGES "
                f"({', '.join(map(repr, django_settings.STORAGES))}) or None, got {value!r}"
            )
        return value

    @property
    def LISTEN_DATABASE(self) -> str | dict[str, str] | None:
        """The alias a worker's LISTEN connection is made from, or a dict of them by the alias
        the worker runs on (see `listen_alias`); None: the worker's own database."""
        value = self._raw("LISTEN_DATABASE")
        if value is None:
            return None
        aliases = value.values() if isinstance(value, dict) else [value]
        keys = value.keys() if isinstance(value, dict) else []
        known = django_settings.DATABASES
        if not all(isinstance(a, str) and a in known for a in [*aliases, *keys]):
            raise ImproperlyConfigured(
                "SCYLLA['LISTEN_DATABASE'] must be an alias of settings.DATABASES "
                f"({', '.join(map(repr, django_settings.DATABASES))}), or a dict of them by "
                f"the alias a worker runs on, got {value!r}"
            )
        return value if isinstance(value, str) else dict(value)

    def listen_alias(self, using: str) -> str:
        """The alias whose settings the LISTEN connection of a worker on `using` is made from."""
        value = self.LISTEN_DATABASE
        if isinstance(value, dict):
            return value.get(using, using)
        return value or using

    @property
    def READ_DATABASE(self) -> str | None:
        """The alias of a streaming replica of `default` that the admin and the API's GETs
        read from (see `routers.ReadRouter`); None: they read `default`."""
        value = self._raw("READ_DATABASE")
        if value is None:
            return None
        return database_alias(value, "READ_DATABASE")

    @property
    def QUEUE_DATABASES(self) -> dict[str, str]:
        """The database alias of each queue routed off `default` (see `routers.QueueRouter`)."""
        value = self._raw("QUEUE_DATABASES")
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise ImproperlyConfigured(
                "SCYLLA['QUEUE_DATABASES'] must be a dict of database aliases by queue, "
                f"got {value!r}"
            )
        return {
            queue: database_alias(alias, f"QUEUE_DATABASES[{queue!r}]")
            for queue, alias in value.items()
        }

    @property
    def NOTIFY_SECRET(self) -> str | None:
        """The key that signs completion notifications (None: `notify=` is refused)."""
        value = self._raw("NOTIFY_SECRET")
        if value is not None and (not isinstance(value, str) or len(value) < 16):
            raise ImproperlyConfigured(
                "SCYLLA['NOTIFY_SECRET'] must be a string of at least 16 characters "
                "(or None), got a " + type(value).__name__ + (" too short" if value else "")
            )
        return value

    @property
    def NOTIFY_ALLOW_HTTP(self) -> bool:
        value = self._raw("NOTIFY_ALLOW_HTTP")
        if not isinstance(value, bool):
            raise ImproperlyConfigured(
                f"SCYLLA['NOTIFY_ALLOW_HTTP'] must be True or False, got {value!r}"
            )
        return value

    @property
    def NOTIFY_TIMEOUT(self) -> timedelta:
        return as_duration(self._raw("NOTIFY_TIMEOUT"), "NOTIFY_TIMEOUT")

    @property
    def NOTIFY_ATTEMPTS(self) -> int:
        return as_int(self._raw("NOTIFY_ATTEMPTS"), "NOTIFY_ATTEMPTS", minimum=1, maximum=1000)

    @property
    def NOTIFY_BACKOFF(self) -> timedelta:
        value = self._raw("NOTIFY_BACKOFF")
        if value == 0:  # no wait between POSTs (tests)
            return timedelta(0)
        return as_duration(value, "NOTIFY_BACKOFF")

    @property
    def SCHEDULES(self) -> Any:
        """The `SCHEDULES` setting as given; `schedules.configured()` validates it."""
        return self._raw("SCHEDULES")


scylla_settings = ScyllaSettings()
