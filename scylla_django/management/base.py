"""What the scylla_* commands share: argument types, logging from --verbosity."""

from __future__ import annotations

import argparse
import logging
import math
import os
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta

from django.conf import settings
from django.core.checks import Tags
from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.core.management.base import CommandError, CommandParser
from django.db import DEFAULT_DB_ALIAS

from .. import checks
from ..conf import LEASE_MIN, scylla_settings
from ..durations import short
from ..text import DurationError, positive_duration
from ..validation import validate_queue

logger = logging.getLogger("scylla_django")

#: The system checks the app's commands run before they start (`requires_system_checks`):
#: this app's own (`checks.TAG`: its settings, handlers and schedules), Django's checks of the
#: models and of the `django.tasks` backends. Not the web's (templates, URLs, the admin,
#: static files): a worker, a monitor or a command line serves no page, and those checks
#: import the whole web stack, a third of a second of every start. A check of the project's
#: own runs there if it has one of these tags. `manage.py check` runs them all.
COMMAND_CHECKS = [Tags.models, checks.TAG, checks.TASKS_TAG]

DURATION_MAX = timedelta(days=100 * 365)
_ZERO = re.compile(r"\A\s*[+]?0+(?:\.0*)?\s*(?:ms|s|m|h|d|w)?\s*\Z")


def duration(text: str, *, minimum: timedelta | None = None) -> timedelta:
    """argparse type: a positive duration such as `30`, `30s`, `5m`, `12h`, `7d`, `2w`.

    A bare number is seconds (the grammar of `text.positive_duration`, as in settings).
    """
    try:
        return positive_duration(text, minimum=minimum, maximum=DURATION_MAX)
    except DurationError as exc:
        if exc.reason == "type":
            message = f"{text!r} is not a duration; use a number with a unit, e.g. 30s, 5m, 12h, 7d"
        elif exc.reason == "positive":
            message = f"{text!r} must be positive"
        elif exc.reason == "short":
            message = f"{text!r} is too short: the least is {short(minimum or LEASE_MIN)}"
        else:
            message = f"{text!r} is too long: the most is 100 years"
        raise argparse.ArgumentTypeError(message) from None


def lease_length(text: str) -> timedelta:
    """argparse type: a duration (as `duration` reads it) of at least `conf.LEASE_MIN`, 1 s."""
    return duration(text, minimum=LEASE_MIN)


def age(text: str) -> timedelta:
    """argparse type: a duration, or zero (`0`, `0s`: any age at all)."""
    if _ZERO.match(text):
        return timedelta(0)
    return duration(text)


def seconds(text: str) -> float:
    """argparse type: a positive number of seconds (a duration with a unit is accepted too)."""
    return duration(text).total_seconds()


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be 0 or more")
    return value


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def positive_float(text: str) -> float:
    """argparse type: a finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive number")
    return value


def queue_name(text: str) -> str:
    """argparse type: a valid queue name."""
    try:
        return validate_queue(text)
    except ValidationError as exc:
        raise argparse.ArgumentTypeError(" ".join(exc.messages)) from None


def add_database_option(parser: CommandParser, what: str) -> None:
    """Add `--database ALIAS`: the database this command's `what` runs against."""
    parser.add_argument(
        "--database",
        default=DEFAULT_DB_ALIAS,
        metavar="ALIAS",
        help=f"the alias in settings.DATABASES that the {what} runs against: one per database "
        "when queues are routed to several (SCYLLA['QUEUE_DATABASES']) (default 'default')",
    )


def database_alias(alias: str) -> str:
    """`alias` if settings.DATABASES has it and it is not the read replica, else
    CommandError."""
    if alias not in settings.DATABASES:
        raise CommandError(
            f"--database {alias!r} is not an alias of settings.DATABASES "
            f"({', '.join(map(repr, settings.DATABASES))})"
        )
    try:
        replica = scylla_settings.READ_DATABASE
    except ImproperlyConfigured as exc:
        raise CommandError(str(exc)) from exc
    if alias == replica:
        raise CommandError(
            f"--database {alias!r} is SCYLLA['READ_DATABASE'], a read-only replica: workers "
            "and monitors write, so they run against a primary"
        )
    return alias


def add_setting_option(
    parser: CommandParser,
    flag: str,
    *,
    setting: str,
    type: Callable[[str], object],
    metavar: str,
    help: str,
    read: str = "",
) -> None:
    """Add `flag`, whose default (None) means the SCYLLA `setting`, read when the command runs.

    Its --help ends with "Default: the <setting> setting<read> (now <its current value>)."
    """
    parser.add_argument(
        flag,
        type=type,
        default=None,
        metavar=metavar,
        help=f"{help} Default: the {setting} setting{read} (now {current_setting(setting)}).",
    )


def current_setting(name: str) -> str:
    """The current value of SCYLLA setting `name` in words, for --help; "invalid" if it is."""
    try:
        value = getattr(scylla_settings, name)
    except ImproperlyConfigured:
        return "invalid"
    return short(value) if isinstance(value, timedelta) else str(value)


def configure_logging(verbosity: int) -> None:
    """Send the `scylla_django` logger to stderr at a level chosen by --verbosity.

    0 → warnings, 1 (the default) → info, 2 and 3 → debug. A logger the project already
    configured (it has handlers) is left alone apart from its level.
    """
    level = {0: logging.WARNING, 1: logging.INFO}.get(verbosity, logging.DEBUG)
    logger.setLevel(level)
    if not logger.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
        logger.addHandler(handler)


@contextmanager
def reader_may_leave() -> Iterator[None]:
    """Around a command's output: when its reader stops reading (`scylla_tasks show RN | head`
    closes the pipe), end quietly with status 1, as a Unix tool does, not with a traceback.

    What is left to print goes to /dev/null, so the flush at exit cannot fail again.
    """
    try:
        yield
        sys.stdout.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        raise SystemExit(1) from None
