"""The task table's autovacuum settings on PostgreSQL (`db.vacuum.TASK_TABLE_STORAGE`): VACUUM
at 10,000 dead rows whatever the table's size, without cost-based pauses. Other databases are
left as they are."""

from django.db import migrations

from scylla_django.db.vacuum import tune_task_table, untune_task_table


class Migration(migrations.Migration):
    dependencies = [
        ("scylla_django", "0038_admission_submitters"),
    ]

    operations = [
        migrations.RunPython(tune_task_table, untune_task_table),
    ]
