"""No index of its own on a task's batch or on a History row's task: the partial batch index and
(task, id) serve those lookups. The key triggers again on SQLite, whose table rebuild (any
altered field) drops them."""

import django.db.models.deletion
from django.db import migrations, models

from scylla_django.db.keys import restore_key_triggers


class Migration(migrations.Migration):
    dependencies = [
        ("scylla_django", "0024_task_log"),
    ]

    operations = [
        migrations.AlterField(
            model_name="history",
            name="task",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="history",
                to="scylla_django.task",
            ),
        ),
        migrations.AlterField(
            model_name="task",
            name="batch",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
                db_index=False,
                editable=False,
                null=True,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="tasks",
                to="scylla_django.batch",
            ),
        ),
        migrations.RunPython(restore_key_triggers, migrations.RunPython.noop),
    ]
