"""System checks: bad `SCYLLA` settings, SQLite configured in a way that would break leases, and
MySQL/MariaDB, where unique keys are refused."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning, register
from django.core.exceptions import ImproperlyConfigured
from django.utils.translation import gettext as _

from . import db
from .conf import DEFAULTS, scylla_settings
from .schedules import schedule_errors

Check = Callable[..., list[CheckMessage]]


def system_check(messages: Callable[[], Iterator[CheckMessage]]) -> Check:
    """Register a check that yields its messages (it looks at the settings, not at apps)."""

    def check(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
        return list(messages())

    # Not functools.wraps: Django reads the signature, which must take **kwargs.
    check.__name__ = check.__qualname__ = messages.__name__
    check.__doc__ = messages.__doc__
    register()(check)
    return check


@system_check
def check_settings() -> Iterator[CheckMessage]:
    """scylla_django.E001: a SCYLLA value is invalid; W001: an unknown SCYLLA key (a typo?)."""
    for name in DEFAULTS:
        if name == "SCHEDULES":  # reported one schedule at a time by check_schedules
            continue
        try:
            getattr(scylla_settings, name)
        except ImproperlyConfigured as exc:
            yield Error(
                str(exc),
                hint=_("The default is %(default)r; see scylla_django/conf.py.")
                % {"default": DEFAULTS[name]},
                id="scylla_django.E001",
            )
    for name in scylla_settings.unknown_keys():
        yield Warning(
            _("SCYLLA[%(name)r] is not a scylla_django setting and is ignored.") % {"name": name},
            hint=_("Known settings: %(names)s.") % {"names": ", ".join(DEFAULTS)},
            id="scylla_django.W001",
        )


@system_check
def check_sqlite() -> Iterator[CheckMessage]:
    """scylla_django.W002: a SQLite database without IMMEDIATE transactions or a busy timeout.

    Several processes (workers, a monitor, the web server) write the task table at once. SQLite
    serialises them only if each write transaction takes the write lock when it begins and waits
    for it instead of failing with "database is locked".
    """
    for alias, config in settings.DATABASES.items():
        if not db.configures_sqlite(config):
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

    A unique key is a partial unique index (README, "Unique tasks"); MySQL and MariaDB have no
    partial indexes, so Django does not create it there, and a submission with `unique_key` is
    refused (NotSupportedError) rather than run without its guarantee.
    """
    for alias, config in settings.DATABASES.items():
        if db.configures_mysql(config):
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
def check_schedules() -> Iterator[CheckMessage]:
    """scylla_django.W010: a schedule in SCYLLA["SCHEDULES"] is invalid (one warning each).

    A warning, not an error: an error would stop every management command, workers included,
    and workers do not run schedules. The monitor skips an invalid schedule, logs it and ticks
    the others.
    """
    user = getattr(settings, "SCYLLA", None) or {}
    if not isinstance(user, dict):
        return
    for name, problem in schedule_errors(user.get("SCHEDULES", {})).items():
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
