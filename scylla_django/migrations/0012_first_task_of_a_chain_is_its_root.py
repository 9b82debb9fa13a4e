"""The first task of every retry chain names itself in `root`, as its retries name it."""

from __future__ import annotations

from typing import Any

from django.db import migrations
from django.db.models import F


def first_tasks_root_themselves(apps: Any, schema_editor: Any) -> None:
    """Set `root = rn` on each task that starts a chain (some task names it as its root)."""
    task = apps.get_model("scylla_django", "Task")
    using = schema_editor.connection.alias
    tasks = task.objects.using(using)
    # Read first, then written in chunks: MySQL refuses an UPDATE that reads its own table.
    roots = sorted(set(tasks.filter(root__isnull=False).values_list("root", flat=True)))
    for start in range(0, len(roots), 500):
        chunk = roots[start : start + 500]
        tasks.filter(rn__in=chunk, root__isnull=True).update(root=F("rn"))


def first_tasks_root_nothing(apps: Any, schema_editor: Any) -> None:
    """Back to the earlier form: the first task of a chain has no root."""
    task = apps.get_model("scylla_django", "Task")
    using = schema_editor.connection.alias
    task.objects.using(using).filter(retry_of__isnull=True, root__isnull=False).update(root=None)


class Migration(migrations.Migration):
    dependencies = [("scylla_django", "0011_history_typ_time_index")]

    operations = [migrations.RunPython(first_tasks_root_themselves, first_tasks_root_nothing)]
