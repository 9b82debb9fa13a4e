"""Spec versions: which version of its spec a queue's handler reads (`@handler("q", version=2)`),
the migrations that upgrade a stored spec from an older version
(`@handler.migrates("q", from_version=1)`), and the JSON Schema a handler may declare for the
spec it reads (`@handler("q", schema={...})`). Registered per process, as the queues' default
keys are (`queue_keys`), by every process that imports the handlers: a submission stamps its
task with its queue's version, a worker upgrades an older spec when it leases the task (see
`worker/execution.py`), and `manage.py check --deploy` reports the stored specs that no
longer validate (`checks.py`).

A handler that declares no version reads version 1, and a task stored without one (submitted
before its handler declared a version) holds a version 1 spec.

Schemas are JSON Schema documents, checked with the `jsonschema` package (the `schema`
extra; the `api` extra brings it too): imported only when a schema is used, so a project
without schemas never needs it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from .validation import validate_queue

Migration = Callable[[Any], Any]

#: The version of a spec whose handler, or whose task, names none.
FIRST_VERSION = 1

#: The highest version (the column is a small integer).
MAX_VERSION = 32767

#: How long a task whose spec is newer than its handler here reads (an older worker beside
#: newer ones, in a rolling deploy) is given back for, so that a newer worker takes it.
NEWER_SPEC_SNOOZE = timedelta(seconds=10)

#: The error code of a task whose spec could not be upgraded to its handler's version.
MIGRATION_FAILED = "spec_migration_failed"


class MigrationMissing(LookupError):
    """No chain of migrations leads from a stored spec's version to its handler's."""

    def __init__(self, queue: str, from_version: int, to_version: int) -> None:
        super().__init__(
            f"Queue {queue!r}: no migration from spec version {from_version} "
            f"(its handler reads version {to_version}); declare "
            f"@handler.migrates({queue!r}, from_version={from_version})."
        )
        self.queue = queue
        self.from_version = from_version
        self.to_version = to_version


class SchemaUnavailable(RuntimeError):
    """A handler declares a spec schema, but the `jsonschema` package is not installed."""


@dataclass
class QueueSpec:
    """What one queue's handler says of its spec."""

    version: int | None = None
    schema: Mapping[str, Any] | None = None
    migrations: dict[int, Migration] = field(default_factory=dict)
    validator: Any = None  # made on first use


_queues: dict[str, QueueSpec] = {}


def validate_version(version: object, name: str = "version") -> int:
    """A spec version: an integer 1..MAX_VERSION (TypeError otherwise)."""
    if isinstance(version, bool) or not isinstance(version, int):
        raise TypeError(f"{name} must be an integer 1..{MAX_VERSION}, not {version!r}")
    if not FIRST_VERSION <= version <= MAX_VERSION:
        raise TypeError(f"{name} must be an integer 1..{MAX_VERSION}, not {version!r}")
    return version


def register_spec(queue: str, version: int | None, schema: Mapping[str, Any] | None) -> None:
    """Record the spec version and schema `queue`'s handler declares (None: none)."""
    queue = validate_queue(queue)
    if version is not None:
        validate_version(version)
    if schema is not None and not isinstance(schema, Mapping):
        raise TypeError(f"schema must be a JSON Schema (a dict), not {schema!r}")
    entry = _queues.setdefault(queue, QueueSpec())
    entry.version, entry.schema, entry.validator = version, schema, None


def register_migration(queue: str, from_version: int, migration: Migration) -> None:
    """Record `migration`, which turns a `queue` spec of `from_version` into one of
    `from_version + 1`. A second, different function for the same step is a ValueError."""
    queue = validate_queue(queue)
    validate_version(from_version, "from_version")
    if not callable(migration):
        raise TypeError(f"a spec migration is a function of the spec, not {migration!r}")
    entry = _queues.setdefault(queue, QueueSpec())
    existing = entry.migrations.get(from_version)
    if existing is not None and _name(existing) != _name(migration):
        raise ValueError(
            f"Queue {queue!r} already migrates from version {from_version} with "
            f"{_name(existing)}; cannot add {_name(migration)}."
        )
    entry.migrations[from_version] = migration


def unregister(queue: str) -> None:
    """Forget what `queue`'s handler said of its spec (a test's registry)."""
    _queues.pop(queue, None)


def declared_version(queue: str) -> int | None:
    """The version `queue`'s handler declares, or None (it declares none)."""
    entry = _queues.get(queue)
    return None if entry is None else entry.version


def handler_version(queue: str) -> int:
    """The version of spec `queue`'s handler reads (1 when it declares none)."""
    return declared_version(queue) or FIRST_VERSION


def stored_version(version: int | None) -> int:
    """The version of a stored spec (1 for a task stored without one)."""
    return FIRST_VERSION if version is None else version


def queues() -> dict[str, QueueSpec]:
    """Every queue with a declared version, schema or migration (a copy)."""
    return dict(_queues)


def needs_upgrade(queue: str, version: int | None) -> bool:
    """Whether a `queue` task stored at `version` holds an older spec than its handler reads."""
    return stored_version(version) < handler_version(queue)


def upgrade(queue: str, spec: Any, version: int | None) -> tuple[Any, int]:
    """`spec`, stored at `version`, upgraded by `queue`'s migrations, one version at a time,
    to the version its handler reads; returns (the spec, its version). MigrationMissing if a
    step has no migration; whatever a migration raises propagates."""
    entry = _queues.get(queue)
    current = stored_version(version)
    target = handler_version(queue)
    while current < target:
        migration = None if entry is None else entry.migrations.get(current)
        if migration is None:
            raise MigrationMissing(queue, current, target)
        spec = migration(spec)
        current += 1
    return spec, current


def schema_errors(queue: str, spec: Any) -> list[str]:
    """What is wrong with `spec` under the JSON Schema of `queue`'s handler (none declared:
    nothing), one message per error, each naming where in the spec it is. SchemaUnavailable
    when the `jsonschema` package is missing."""
    entry = _queues.get(queue)
    if entry is None or entry.schema is None:
        return []
    if entry.validator is None:
        entry.validator = _validator(entry.schema)
    errors = sorted(entry.validator.iter_errors(spec), key=lambda e: list(e.absolute_path))
    return [f"{_where(error.absolute_path)}: {error.message}" for error in errors]


def schema_problem(schema: Mapping[str, Any]) -> str | None:
    """Why `schema` is not a valid JSON Schema (or cannot be checked), or None."""
    try:
        _validator(schema)
    except SchemaUnavailable as exc:
        return str(exc)
    except Exception as exc:  # jsonschema's SchemaError, and what a broken $schema raises
        return f"the schema is not a valid JSON Schema: {getattr(exc, 'message', exc)}"
    return None


def _validator(schema: Mapping[str, Any]) -> Any:
    try:
        import jsonschema
    except ImportError:
        raise SchemaUnavailable(
            "A handler declares a spec schema, which needs the jsonschema package: "
            'pip install "scylla-django[schema]".'
        ) from None
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def _where(path: Any) -> str:
    """`spec`, `spec.items[2]`: where an error is, as a path from the spec."""
    text = "spec"
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else f".{part}"
    return text


def _name(func: Callable[..., Any]) -> str:
    return f"{getattr(func, '__module__', '?')}.{getattr(func, '__qualname__', repr(func))}"
