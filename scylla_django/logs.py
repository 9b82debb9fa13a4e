"""Task logs in storage: what a handler logged while it ran (captured by `worker.capture`),
kept per task through Django's storage API and deleted with the task.

The storage is `settings.STORAGES[SCYLLA["TASK_LOG_STORAGE"]]` ("default" unless the project
names another, e.g. an S3 bucket through django-storages). A task's log is named after its rn,
under `LOG_DIRECTORY`; a task leased again keeps the log of its last run. This module imports
nothing of the package but `conf`.
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


def log_storage() -> Storage:
    """The storage task logs are kept in (`SCYLLA["TASK_LOG_STORAGE"]`)."""
    alias = scylla_settings.TASK_LOG_STORAGE
    try:
        return storages[alias]
    except InvalidStorageError:
        raise ImproperlyConfigured(
            f"SCYLLA['TASK_LOG_STORAGE'] names {alias!r}, which settings.STORAGES does not have."
        ) from None


def log_name(rn: str) -> str:
    """Where the log of the task `rn` is kept: `scylla_django/logs/<rn>.log`, the rn quoted
    (an rn may hold `:`, which some storages refuse in a name)."""
    return f"{LOG_DIRECTORY}/{quote(rn, safe='')}.log"


def save_log(rn: str, text: str) -> str:
    """Store `text` as the log of the task `rn`, replacing the one it had; return its name."""
    storage = log_storage()
    name = log_name(rn)
    storage.delete(name)  # else the storage would keep both, the new one under another name
    saved: str = storage.save(name, ContentFile(text.encode("utf-8")))
    return saved


def read_log(name: str) -> str | None:
    """The text of the log stored as `name`, or None if it is gone."""
    try:
        with log_storage().open(name, "rb") as file:
            data: bytes = file.read()
    except FileNotFoundError:
        return None
    return data.decode("utf-8", errors="replace")


def delete_logs(names: Iterable[str]) -> None:
    """Delete these stored logs. A failure is logged, never raised: the tasks are gone."""
    storage = log_storage()
    for name in names:
        try:
            storage.delete(name)
        except Exception:
            logger.exception("could not delete the task log %s", name)
