"""The take trigger of SQLite made again from `db.keys`: a rate's start is stamped and judged at
the task's lease time (its `updated`, the time History records), as on PostgreSQL, not at the
trigger's own reading of the clock. PostgreSQL's trigger is unchanged."""

from django.db import migrations

from scylla_django.db.keys import restore_key_triggers


class Migration(migrations.Migration):
    dependencies = [
        ("scylla_django", "0030_firing_outcome"),
    ]

    operations = [
        migrations.RunPython(restore_key_triggers, migrations.RunPython.noop),
    ]
