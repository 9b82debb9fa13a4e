"""The task page's layout: which fields stand on which line, the payload apart; all read-only.
`TaskAdmin.fieldsets` and `readonly_fields` are these."""

from __future__ import annotations

from typing import Any

from django.contrib.admin.utils import flatten_fieldsets
from django.utils.translation import gettext_lazy

from ... import followups
from ...models import Task
from .. import task_columns
from ..databases import replica_lag, replica_note
from ..schedules import chain
from . import durable, family, history, keys, origin, payload, times, usage, waiting

FIELDSETS: Any = (
    (
        None,
        {
            "fields": (
                ("rn", "queue"),
                (task_columns.status_badge, "priority", task_columns.progress_bar),
                (task_columns.owner_link, "leases", "unstarted", times.deadline_time),
                (times.created_time, times.updated_time, times.not_before_at),
                (usage.cpu_time_text, usage.peak_memory_text),
                (chain, "snoozes", times.expires_time),
                (family.parent_link, family.children_list),
                (family.batch_link, times.dead_at),
                ("notify", "notified"),
                (keys.unique_key_link, keys.unique_window_text),
                (keys.keys_list, waiting.waiting_line),
                ("version", origin.trace),
                (origin.submitter_text, waiting.starts_line),
                (durable.durable_table,),
            )
        },
    ),
    (
        gettext_lazy("Payload"),
        {
            "fields": (
                payload.spec_json,
                payload.result_json,
                payload.errors_table,
                payload.log_text,
                history.history_note,
            )
        },
    ),
)
"""The fields of every task's page."""

SOMETIMES = (family.parents_list, replica_lag)
"""The fields added on some pages only (`with_extras`)."""

READ_ONLY: Any = (*flatten_fieldsets(FIELDSETS), *SOMETIMES)
"""Every field the page may show: all are read-only (tasks change through their operations)."""


def with_extras(fieldsets: Any, task: Task | None) -> Any:
    """`fieldsets`, with a waiting follow-up's parents, and with how far behind the replica is
    when the page is read from one (`SCYLLA["READ_DATABASE"]`)."""
    extra: list[tuple[Any, ...]] = []
    if task is not None and followups.waits_for_parents(task):
        extra.append((family.parents_list,))
    if task is not None and replica_note() is not None:
        extra.append((replica_lag,))
    if not extra:
        return fieldsets
    (name, options), *rest = fieldsets
    return [(name, {**options, "fields": (*options["fields"], *extra)}), *rest]
