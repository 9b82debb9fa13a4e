"""Task logs in storage: what a handler logged while it ran (captured by `capture`),
kept per task through Django's storage API and deleted with the task.

The storage is `settings.STORAGES[SCYLLA["TASK_LOG_STORAGE"]]`, an alias the project names
for them: a folder of its own at an absolute path, or a private bucket through
django-storages. Until one is named no log is kept, for there is no safe guess: logs hold
tracebacks, the default storage is usually served to the public, and a relative folder would
be each process's own working directory (where the web server does not look). A task's log is
named after its rn, under `LOG_DIRECTORY`; a task leased again keeps the log of its last run.
This module imports nothing of the package but `conf`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from urllib.parse import quote

from django.core.exceptions import ImproperlyConfigured
from django.core.files.base import ContentFile
from django.core.files.storage import Storage, storages
from django.core.files.storage.handler import InvalidStorageError

from .conf import scylla_settings

logger = logging.getLogger("scylla_django")

LOG_DIRECTORY = "scylla_django/logs"


def log_storage() -> Storage | None:
    """The storage task logs are kept in (`SCYLLA["TASK_LOG_STORAGE"]`), or None if the
    project names none (then no log is kept)."""
    alias = scylla_settings.TASK_LOG_STORAGE
    if alias is None:
        return None
    try:
        return storages[alias]
    except InvalidStorageError:
        raise ImproperlyConfigured(
            f"SCYLLA['TASK_LOG_STORAGE'] names {alias!r}, which settings.STORAGES does not have."
        ) from None


def not_kept() -> str | None:
    """Why no task log is kept now, in words, or None if logs are kept."""
    try:
        named = scylla_settings.TASK_LOG_STORAGE is not None
    except ImproperlyConfigured:
        return None  # kept in intent; saving each fails and says why
    if not named:
        return "SCYLLA['TASK_LOG_STORAGE'] names no storage, so no task log is kept"
    if scylla_settings.TASK_LOG_MAX_BYTES == 0:
        return "SCYLLA['TASK_LOG_MAX_BYTES'] is 0, so no task log is captured"
    return None


def keeps_logs() -> bool:
    """Whether task logs are captured and kept: a storage is named, and the cap is not 0."""
    return not_kept() is None


def log_name(rn: str) -> str:
    """Where the log of the task `rn` is kept: `scylla_django/logs/<rn>.log`, the rn quoted
    (an rn may hold `:`, which some storages refuse in a name)."""
    return f"{LOG_DIRECTORY}/{quote(rn, safe='')}.log"


def save_log(rn: str, text: str) -> str | None:
    """Store `text` as the log of the task `rn`, replacing the one it had; return its name
    (None: no storage is named, nothing is stored)."""
    storage = log_storage()
    if storage is None:
        return None
    name = log_name(rn)
    storage.delete(name)  # else the storage would keep both, the new one under another name
    saved: str = storage.save(name, ContentFile(text.encode("utf-8")))
    return saved


def read_log(name: str) -> str | None:
    """The text of the log stored as `name`, or None if it is gone (or no storage is named)."""
    storage = log_storage()
    if storage is None:
        return None
    try:
        with storage.open(name, "rb") as file:
            data: bytes = file.read()
    except FileNotFoundError:
        return None
    return data.decode("utf-8", errors="replace")


def delete_logs(names: Iterable[str]) -> None:
    """Delete these stored logs. A failure is logged, never raised: the tasks are gone."""
    names = list(names)
    storage = log_storage()
    if storage is None:
        logger.warning(
            "%d task logs left in place: SCYLLA['TASK_LOG_STORAGE'] names no storage now",
            len(names),
        )
        return
    for name in names:
        try:
            storage.delete(name)
        except Exception:
            logger.exception("could not delete the task log %s", name)
