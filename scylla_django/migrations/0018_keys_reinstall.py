"""The take trigger of keys made again from `db.keys`: a rate's starts are the tasks' lease
times (their `updated`), the times History records."""

from typing import Any

from django.db import migrations

from scylla_django.db.keys import install_key_triggers, remove_key_triggers


def reinstall(apps: Any, schema_editor: Any) -> None:
    """Drop the take trigger and make it again as `db.keys` says."""
    remove_key_triggers(apps, schema_editor)
    install_key_triggers(apps, schema_editor)


class Migration(migrations.Migration):
    dependencies = [
        ("scylla_django", "0017_one_word_per_concept"),
    ]

    operations = [
        migrations.RunPython(reinstall, reinstall),
    ]
