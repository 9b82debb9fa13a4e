"""The lease floors (`db.floors`, PostgreSQL): where each queue's lease starts its walk of the
ready index, and the trigger that lowers them when a task is made ready before them. A no-op
on other databases (their lease walks as before)."""

from django.db import migrations

from scylla_django.db.floors import install_floors, remove_floors


class Migration(migrations.Migration):
    dependencies = [
        ("scylla_django", "0001_initial"),
    ]

    operations = [
        migrations.RunPython(install_floors, remove_floors),
    ]
