"""System checks: bad `SCYLLA` settings, SQLite configured in a way that would break leases,
MySQL/MariaDB, where unique keys are refused, task logs kept where they are served or lost,
handlers naming limits or rates that are not configured, handlers' spec schemas and
migrations, and (a database check, run by `migrate` and `check --database`) a PostgreSQL
database that lets a session stay idle in a transaction for ever; with `--deploy`, the stored
tasks a deploy of this code would strand (a queue no handler serves, specs that no longer
validate).

Every check here but the database's carries the tag `TAG`: `manage.py check --tag
scylla_django` runs them alone, and the app's commands run them at start with Django's
model checks and its check of the `django.tasks` backends (`management.base.COMMAND_CHECKS`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.core.exceptions import ImproperlyConfigured
from django.core.files.storage import FileSystemStorage
from django.db import Error as DatabaseError
from django.db.models import Count, Min
from django.utils.module_loading import import_string
from django.utils.translation import gettext as _

from . import db, queue_keys, retries, spec_versions
from .conf import DEFAULTS, RENAMED, scylla_settings
from .routers import databases as task_databases
from .schedules import schedule_errors

Check = Callable[..., list[CheckMessage]]

#: The tag of this app's checks.
TAG = "scylla_django"
#: The tag given to Django's check of the `django.tasks` backends (Django 6), which has none:
#: a worker serving their queues checks them when it starts.
TASKS_TAG = "tasks"

try:
    from django.tasks.checks import check_tasks
except ImportError:  # Django 5.2: no django.tasks
    pass
else:
    register(check_tasks, TASKS_TAG)


def system_check(messages: Callable[[], Iterator[CheckMessage]]) -> Check:
    """Register a check that yields its messages (it looks at the settings, not at apps)."""

    def check(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
        return list(messages())

    # Not functools.wraps: Django reads the signature, which must take **kwargs.
    check.__name__ = check.__qualname__ = messages.__name__
    check.__doc__ = messages.__doc__
    register(TAG)(check)
    return check


@system_check
def check_settings() -> Iterator[CheckMessage]:
    """scylla_django.E001: a SCYLLA value is invalid (each rate of RATES on its own line); W001:
    an unknown SCYLLA key (a typo?)."""
    for message, hint in _setting_errors():
        yield Error(message, hint=hint, id="scylla_django.E001")
    for name in scylla_settings.unknown_keys():
        if name in RENAMED:
            hint = _("It is called %(new)s now.") % {"new": RENAMED[name]}
        else:
            hint = _("Known settings: %(names)s.") % {"names": ", ".join(DEFAULTS)}
        yield Warning(
            _("SCYLLA[%(name)r] is not a scylla_django setting and is ignored.") % {"name": name},
            hint=hint,
            id="scylla_django.W001",
        )


def _setting_errors() -> Iterator[tuple[str, str]]:
    """(message, hint) of each invalid SCYLLA value."""
    for name in DEFAULTS:
        if name in ("SCHEDULES", "RETRY"):  # reported one entry at a time by their checks
            continue
        try:
            getattr(scylla_settings, name)
        except ImproperlyConfigured as exc:
            yield (
                str(exc),
                _("The default is %(default)r; see scylla_django/conf.py.")
                % {"default": DEFAULTS[name]},
            )
    try:
        bad_rates = scylla_settings.rate_problems()
    except ImproperlyConfigured:
        bad_rates = {}  # RATES itself is bad: said above
    for name, problem in bad_rates.items():
        yield (
            f"SCYLLA['RATES'][{name!r}]: {problem}",
            _("Periods: s, m, h, d, with an optional number: 100/m, 5/10s, 1000/d."),
        )


@system_check
def check_sqlite() -> Iterator[CheckMessage]:
    """scylla_django.W002: a SQLite database without IMMEDIATE transactions or a busy timeout.

    Several processes (workers, a monitor, the web server) write the task table at once. SQLite
    serialises them only if each write transaction takes the write lock when it begins and waits
    for it instead of failing with "database is locked".
    """
    for alias, config in settings.DATABASES.items():
        if not db.driver_class(config).locks_whole_database:
            continue
        options = config.get("OPTIONS", {})
        missing = []
        if str(options.get("transaction_mode", "")).upper() != "IMMEDIATE":
            missing.append('"transaction_mode": "IMMEDIATE"')
        if not options.get("timeout"):
            missing.append('"timeout": 20')
        if "journal_mode=wal" not in str(options.get("init_command", "")).lower().replace(" ", ""):
            missing.append('"init_command": "PRAGMA journal_mode=WAL;"')
        if missing:
            yield Warning(
                _("SQLite database %(alias)r is not set up for concurrent workers.")
                % {"alias": alias},
                hint=_("Add %(options)s to DATABASES[%(alias)r]['OPTIONS'].")
                % {"options": ", ".join(missing), "alias": alias},
                id="scylla_django.W002",
            )


@system_check
def check_unique_keys() -> Iterator[CheckMessage]:
    """scylla_django.W003: a MySQL/MariaDB database, which cannot enforce unique keys.

    A unique key is a partial unique index (docs/howto/keys.md); MySQL and MariaDB have no
    partial indexes, so Django does not create it there, and a submission with `unique_key` is
    refused (NotSupportedError) rather than run without its guarantee.
    """
    for alias, config in settings.DATABASES.items():
        if not db.driver_class(config).has_partial_indexes:
            yield Warning(
                _(
                    "Database %(alias)r (MySQL/MariaDB) has no partial indexes: tasks with a "
                    "unique_key are refused there."
                )
                % {"alias": alias},
                hint=_("Submit without unique_key on this database, or use PostgreSQL or SQLite."),
                id="scylla_django.W003",
            )


@system_check
def check_listen_database() -> Iterator[CheckMessage]:
    """scylla_django.W004: a PostgreSQL database behind a transaction-mode pooler whose workers
    would LISTEN through the pooler.

    A worker's LISTEN needs a server session for as long as it runs; a transaction-mode pooler
    (PgBouncer's `pool_mode = transaction`) hands the server connection to another client
    after each transaction, and with it the LISTEN, so the worker's wake-ups are lost (it
    still polls). A database is taken to be pooled so when its settings have
    `DISABLE_SERVER_SIDE_CURSORS = True`, the setting Django asks for there.
    """
    try:
        scylla_settings.LISTEN_DATABASE  # noqa: B018 - validates it
    except ImproperlyConfigured:
        return  # scylla_django.E001 says so
    for alias, config in settings.DATABASES.items():
        if not db.transaction_pooled(config):
            continue
        listen_alias = scylla_settings.listen_alias(alias)
        if db.transaction_pooled(settings.DATABASES[listen_alias]):
            yield Warning(
                _(
                    "Database %(alias)r goes through a transaction-mode pooler "
                    "(DISABLE_SERVER_SIDE_CURSORS), and its workers would LISTEN through "
                    "%(listen)r, which cannot keep a LISTEN."
                )
                % {"alias": alias, "listen": listen_alias},
                hint=_(
                    "Add an alias that reaches the server itself (or a session-mode pool) and "
                    'name it: SCYLLA["LISTEN_DATABASE"] = {"%(alias)s": "<direct alias>"}; or '
                    "start workers with --listen-dsn or --no-listen and silence this check."
                )
                % {"alias": alias},
                id="scylla_django.W004",
            )


@system_check
def check_task_log_storage() -> Iterator[CheckMessage]:
    """scylla_django.W005: task logs go to the storage that serves media (logs hold
    tracebacks, at names made of rns a client may choose); W006: to a folder whose path is
    relative, so each process writes under its own working directory and the web server,
    started elsewhere, finds no log.

    The media storage is the default storage, one configured as it is, or a folder within
    `MEDIA_ROOT`. No storage named (the default) keeps no log and warrants no warning.
    """
    try:
        alias = scylla_settings.TASK_LOG_STORAGE
    except ImproperlyConfigured:
        return  # scylla_django.E001 says so
    if alias is None:
        return
    config = settings.STORAGES[alias]
    folder = _storage_folder(config)
    media = str(settings.MEDIA_ROOT or "")
    public = alias == "default" or config == settings.STORAGES.get("default")
    if folder is not None and media and os.path.isabs(folder) and os.path.isabs(media):
        inside = os.path.commonpath([os.path.realpath(folder), os.path.realpath(media)])
        public = public or inside == os.path.realpath(media)
    if public:
        yield Warning(
            _(
                "Task logs go to storage %(alias)r, the one media files are served from: "
                "anyone who guesses a task's rn could read its log and its tracebacks."
            )
            % {"alias": alias},
            hint=_(
                'Name a private storage for them: STORAGES["scylla_logs"] = {"BACKEND": '
                '"django.core.files.storage.FileSystemStorage", "OPTIONS": {"location": '
                '"/var/lib/<project>/task-logs"}} and SCYLLA["TASK_LOG_STORAGE"] = '
                '"scylla_logs".'
            ),
            id="scylla_django.W005",
        )
    elif folder is not None and not os.path.isabs(folder):
        yield Warning(
            _(
                "Task logs go to storage %(alias)r, a folder at the relative path %(folder)r: "
                "each process writes under its own working directory, and one started "
                "elsewhere (the web server) finds no log."
            )
            % {"alias": alias, "folder": folder},
            hint=_('Give the storage\'s OPTIONS an absolute "location".'),
            id="scylla_django.W006",
        )


def _storage_folder(config: dict[str, Any]) -> str | None:
    """The folder a `STORAGES` entry writes to, as configured (relative or not), if it is a
    `FileSystemStorage`; None for other storages, or one whose backend does not import."""
    try:
        backend = import_string(config.get("BACKEND", ""))
    except ImportError:
        return None
    if not (isinstance(backend, type) and issubclass(backend, FileSystemStorage)):
        return None
    return str(config.get("OPTIONS", {}).get("location") or settings.MEDIA_ROOT or "")


@system_check
def check_handler_keys() -> Iterator[CheckMessage]:
    """scylla_django.W020: a handler's default limit (`@handler(limits=[...])`, a value, not a
    function) is not in `SCYLLA["LIMITS"]`; W021: its default rate (`rate_key=...`) is not in
    `SCYLLA["RATES"]`.

    A warning: an operator may have made the limit or rate at runtime (a `Limit` or `Rate`
    row, in the admin or through the API), which a check does not read; without one, every
    submission to the queue is refused with `unknown_limit`/`unknown_rate`.
    """
    try:
        limits, rates = scylla_settings.LIMITS, scylla_settings.RATES
        families = {**scylla_settings.LIMIT_FAMILIES, **scylla_settings.RATE_FAMILIES}
    except ImproperlyConfigured:
        return  # scylla_django.E001 says so
    for queue, defaults in sorted(queue_keys.registered().items()):
        named = defaults.get("limits")
        for name in [] if callable(named) or named is None else named:
            member = isinstance(name, (tuple, list)) and len(name) == 2
            if member and (name[0] in families or f"{name[0]}:{name[1]}" in limits):
                continue  # a key family's member
            if name not in limits:
                yield Warning(
                    f"The handler of queue {queue!r} names limit {name!r}, which is not in "
                    "SCYLLA['LIMITS'].",
                    hint=f'Add it: SCYLLA["LIMITS"] = {{"{name}": <max running>}}.',
                    id="scylla_django.W020",
                )
        rate = defaults.get("rate_key")
        if isinstance(rate, str) and rate not in rates:
            yield Warning(
                f"The handler of queue {queue!r} names rate {rate!r}, which is not in "
                "SCYLLA['RATES'].",
                hint=f'Add it: SCYLLA["RATES"] = {{"{rate}": "100/m"}}.',
                id="scylla_django.W021",
            )


@system_check
def check_retry_policies() -> Iterator[CheckMessage]:
    """scylla_django.E030: an entry of SCYLLA["RETRY"] is not a retry policy (one error each,
    naming its queue and what is wrong, the bad key included), or the setting is not a dict.

    An error: a bad entry is ignored where policies are looked up, so the queue's tasks would
    fall back on the next policy in line, or on none, without it.
    """
    for key, problem in sorted(retries.configured_problems().items()):
        where = "SCYLLA['RETRY']" + (f"[{key!r}]" if key else "")
        yield Error(
            f"{where}: {problem}",
            hint=(
                'A policy is the JSON a task\'s "retry" takes over HTTP: {"max_attempts": 5, '
                '"backoff": "exponential" | "fixed", "delay": 1, "base": 2, "cap": 600, '
                '"jitter", "on": ["smtplib.SMTPException"], "codes", "timeouts", "crashes"}, '
                f'by queue name, and "{retries.DEFAULT_KEY}" for the default.'
            ),
            id="scylla_django.E030",
        )


@system_check
def check_schedules() -> Iterator[CheckMessage]:
    """scylla_django.W010: a schedule in SCYLLA["SCHEDULES"] is invalid (one warning each).

    A warning, not an error: an error would stop every management command, workers included,
    and workers do not run schedules. The monitor skips an invalid schedule, logs it and ticks
    the others.
    """
    user = getattr(settings, "SCYLLA", None) or {}
    if not isinstance(user, dict):
        return
    try:
        errors = schedule_errors(user.get("SCHEDULES", {}))
    except ImproperlyConfigured:
        return  # a setting a schedule is measured by (SPEC_SIZE_LIMIT): E001 says so
    for name, problem in errors.items():
        yield Warning(
            (
                _("SCYLLA['SCHEDULES'][%(name)r] is invalid: %(problem)s")
                % {"name": name, "problem": problem}
                if name
                else problem
            ),
            hint=_(
                'A schedule is {"cron": "0 3 * * *" or "every": "5m", "queue": ..., "spec": '
                '..., "timezone"?, "priority"?, "enabled"?, "catch_up"?, "skip_if_running"?}.'
            ),
            id="scylla_django.W010",
        )


def _router_installed(name: str) -> bool:
    """Whether `settings.DATABASE_ROUTERS` lists the router `scylla_django.routers.<name>`."""
    for router in getattr(settings, "DATABASE_ROUTERS", []):
        path = (
            router
            if isinstance(router, str)
            else f"{type(router).__module__}.{type(router).__name__}"
        )
        if path == f"scylla_django.routers.{name}":
            return True
    return False


@system_check
def check_routers() -> Iterator[CheckMessage]:
    """scylla_django.E040: READ_DATABASE without `ReadRouter`; E041: QUEUE_DATABASES without
    `QueueRouter` (the setting would be silently ignored)."""
    for setting, name, check_id in (
        ("READ_DATABASE", "ReadRouter", "scylla_django.E040"),
        ("QUEUE_DATABASES", "QueueRouter", "scylla_django.E041"),
    ):
        try:
            given = getattr(scylla_settings, setting)
        except ImproperlyConfigured:
            continue  # reported by check_settings
        if given and not _router_installed(name):
            yield Error(
                _("SCYLLA[%(setting)r] is set but settings.DATABASE_ROUTERS lacks %(router)r.")
                % {"setting": setting, "router": f"scylla_django.routers.{name}"},
                hint=_("Add it to DATABASE_ROUTERS; see docs/howto/databases.md."),
                id=check_id,
            )


@system_check
def check_spec_versions() -> Iterator[CheckMessage]:
    """scylla_django.E050: a handler's spec schema is not a valid JSON Schema, or the
    `jsonschema` package it needs is missing; W051: a spec migration that no handler's version
    reaches (`@handler.migrates(from_version=n)` where the handler's version is n or less)."""
    for queue, declared in sorted(spec_versions.queues().items()):
        if declared.schema is not None:
            problem = spec_versions.schema_problem(declared.schema)
            if problem is not None:
                yield Error(
                    f"The handler of queue {queue!r} declares a spec schema: {problem}",
                    hint=_("A schema is a JSON Schema document (a dict), checked by jsonschema."),
                    id="scylla_django.E050",
                )
        reads = declared.version or spec_versions.FIRST_VERSION
        for from_version in sorted(declared.migrations):
            if from_version >= reads:
                yield Warning(
                    f"Queue {queue!r} has a spec migration from version {from_version}, but "
                    f"its handler reads version {reads}: the migration never runs.",
                    hint=_(
                        "Declare the handler's version, @handler(queue, version=n), above "
                        "every from_version its migrations name."
                    ),
                    id="scylla_django.W051",
                )


def deploy_check(messages: Callable[[list[str]], Iterator[CheckMessage]]) -> Check:
    """Register a check of `manage.py check --deploy` that reads the tasks stored in the
    databases (those given with `--database`, else every database the Task model migrates
    to); a database whose tasks table does not exist yet holds none."""

    def check(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> list[CheckMessage]:
        from django.db import router

        from .models import Task

        aliases = (
            list(databases)
            if databases is not None
            else [alias for alias in settings.DATABASES if router.allow_migrate_model(alias, Task)]
        )
        return list(messages([alias for alias in aliases if db.has_table(alias, Task)]))

    check.__name__ = check.__qualname__ = messages.__name__
    check.__doc__ = messages.__doc__
    register(TAG, deploy=True)(check)
    return check


#: The rns a deploy check names per queue (it counts the others).
EXAMPLES = 3


@deploy_check
def check_stranded_tasks(databases: list[str]) -> Iterator[CheckMessage]:
    """scylla_django.W052 (`check --deploy`): stored ready tasks (due, scheduled or waiting
    for their parents) of a queue that no handler of this code serves: a deploy that removed
    or renamed the handler strands them. A warning: workers of another code base, or speaking
    HTTP, may serve the queue."""
    from .models import Task, serving

    for alias in databases:
        rows = (
            Task.objects.using(alias)
            .filter(status="ready")
            .order_by()
            .values("queue")
            .annotate(count=Count("id"), example=Min("rn"))
        )
        for row in sorted(rows, key=lambda r: r["queue"]):
            if serving.served_here(row["queue"]):
                continue
            yield Warning(
                f"Database {alias!r} holds {row['count']} ready task(s) of queue "
                f"{row['queue']!r}, which no handler serves (task {row['example']}).",
                hint=_(
                    "Keep the queue's handler until its tasks are done (drain it: "
                    "manage.py scylla_queue), or cancel them; ignore this if workers of "
                    "another code base serve the queue (SILENCED_SYSTEM_CHECKS)."
                ),
                id="scylla_django.W052",
            )


@deploy_check
def check_stored_specs(databases: list[str]) -> Iterator[CheckMessage]:
    """scylla_django.E053 (`check --deploy`): stored ready tasks whose spec, upgraded to the
    version its handler reads, does not validate against the handler's schema; E054: stored
    specs of a version no chain of migrations upgrades; W055: stored specs newer than the
    handler reads (a rollback: workers of this code give them back, unrun)."""
    from .models import Task

    declared = spec_versions.queues()
    watched = sorted(q for q, d in declared.items() if d.schema is not None or d.version)
    for alias in databases:
        if not watched:
            return
        stored = (
            Task.objects.using(alias)
            .filter(status="ready", queue__in=watched)
            .order_by("queue", "id")
            .values_list("rn", "queue", "spec", "version")
        )
        problems: dict[tuple[str, str], list[str]] = {}
        for rn, queue, spec, version in stored.iterator(chunk_size=1000):
            for kind, detail in _spec_problems(queue, spec, version):
                problems.setdefault((queue, kind), []).append(f"{rn} ({detail})")
        for (queue, kind), found in sorted(problems.items()):
            yield _spec_message(alias, queue, kind, found)


def _spec_problems(queue: str, spec: Any, version: int | None) -> Iterator[tuple[str, str]]:
    """What is wrong with one stored spec of `queue`: ("newer", …), ("unmigrated", …) or
    ("invalid", …), with a detail each."""
    stored = spec_versions.stored_version(version)
    reads = spec_versions.handler_version(queue)
    if stored > reads:
        yield "newer", f"version {stored}"
        return
    try:
        upgraded, _version = spec_versions.upgrade(queue, spec, version)
    except spec_versions.MigrationMissing:
        yield "unmigrated", f"version {stored}"
        return
    except Exception as exc:  # the migration's own failure: the worker would abort the task
        yield "invalid", f"its migration from version {stored} raised {exc!r}"
        return
    try:
        errors = spec_versions.schema_errors(queue, upgraded)
    except spec_versions.SchemaUnavailable:
        return  # scylla_django.E050 says so
    if errors:
        yield "invalid", "; ".join(errors)


def _spec_message(alias: str, queue: str, kind: str, found: list[str]) -> CheckMessage:
    """The message of `check_stored_specs` for one queue and kind of problem."""
    named = ", ".join(found[:EXAMPLES]) + (
        f" and {len(found) - EXAMPLES} more" if len(found) > EXAMPLES else ""
    )
    reads = spec_versions.handler_version(queue)
    if kind == "newer":
        return Warning(
            f"Database {alias!r} holds ready tasks of queue {queue!r} whose spec is newer "
            f"than its handler here reads (version {reads}): {named}.",
            hint=_("Workers of this code give them back unrun; deploy the newer handler."),
            id="scylla_django.W055",
        )
    if kind == "unmigrated":
        return Error(
            f"Database {alias!r} holds ready tasks of queue {queue!r} whose spec no migration "
            f"upgrades to version {reads}: {named}.",
            hint=_(
                "Declare the missing steps with @handler.migrates(queue, from_version=n); "
                "a worker would abort these tasks with spec_migration_failed."
            ),
            id="scylla_django.E054",
        )
    return Error(
        f"Database {alias!r} holds ready tasks of queue {queue!r} whose spec does not "
        f"validate against its handler's schema: {named}.",
        hint=_(
            "Add a spec migration (@handler.migrates) that upgrades them, keep the handler "
            "reading the old spec, or cancel these tasks."
        ),
        id="scylla_django.E053",
    )


@register(Tags.database)
def check_idle_in_transaction_timeout(
    app_configs: Any = None, databases: Any = None, **kwargs: Any
) -> list[CheckMessage]:
    """scylla_django.W007: a PostgreSQL database holding tasks whose sessions get no
    `idle_in_transaction_session_timeout`.

    A session left idle in a transaction (a shell, a report, a request that hung) holds back
    VACUUM's horizon: the dead rows every transition leaves in the task table pile up and the
    lease slows down until it ends. A timeout ends such a session. A database check: it
    connects, so Django runs it only where the databases are asked for (`migrate`,
    `check --database`); an unreachable database is left to the command that needs it.
    """
    messages: list[CheckMessage] = []
    try:
        holding = task_databases()
    except ImproperlyConfigured:
        return messages  # scylla_django.E001 says so
    for alias in databases or ():
        config = settings.DATABASES.get(alias)
        if alias not in holding or config is None or not db.driver_class(config).has_vacuum_horizon:
            continue
        try:
            timeout = db.idle_in_transaction_timeout(alias)
        except DatabaseError:
            continue
        if timeout is None:
            messages.append(
                Warning(
                    _(
                        "Database %(alias)r (PostgreSQL) has no "
                        "idle_in_transaction_session_timeout: a session left idle in a "
                        "transaction holds VACUUM back from the task table for as long as it "
                        "stays open."
                    )
                    % {"alias": alias},
                    hint=_(
                        "Set one for the database: ALTER DATABASE <name> SET "
                        "idle_in_transaction_session_timeout = '5min'; (or for the roles that "
                        "run reports: ALTER ROLE <role> SET ...). See docs/howto/health.md."
                    ),
                    id="scylla_django.W007",
                )
            )
    return messages
