"""Lease reservations: whether the database knows that the current lease's handler has started
(`handler_started`; true on the rows there are, whose leases were full leases), and how many
of a task's leases expired before their handler was known to have started (`unstarted`, not
counted toward `MAX_LEASES`). On SQLite the columns' defaults rebuild the task table, which
drops the key triggers and their index and the fair-share trigger: they are installed again."""

from django.db import migrations, models

from scylla_django.db.fairness import restore_fair_triggers
from scylla_django.db.keys import restore_key_triggers


class Migration(migrations.Migration):
    dependencies = [
        ("scylla_django", "0040_durable_execution"),
    ]

    operations = [
        migrations.AddField(
            model_name="task",
            name="handler_started",
            field=models.BooleanField(db_default=True, default=True, editable=False),
        ),
        migrations.AddField(
            model_name="task",
            name="unstarted",
            field=models.PositiveIntegerField(
                db_default=0, default=0, editable=False, verbose_name="unstarted leases"
            ),
        ),
        migrations.RunPython(restore_key_triggers, migrations.RunPython.noop),
        migrations.RunPython(restore_fair_triggers, migrations.RunPython.noop),
    ]
