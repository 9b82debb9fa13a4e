"""A hold's `since` (for operators) and the History event of an operator's release of an order
key. SQLite rebuilds the hold table to add a column with a database default, and a table named
by a trigger cannot be renamed: the key trigger is taken off around the change."""

from django.db import migrations, models

import scylla_django.db
from scylla_django.db.keys import install_key_triggers, remove_key_triggers


class Migration(migrations.Migration):
    dependencies = [
        ("scylla_django", "0018_keys_reinstall"),
    ]

    operations = [
        migrations.RunPython(remove_key_triggers, install_key_triggers),
        migrations.AddField(
            model_name="hold",
            name="since",
            field=models.DateTimeField(db_default=scylla_django.db.Now(), editable=False),
        ),
        migrations.AlterField(
            model_name="history",
            name="typ",
            field=models.CharField(
                choices=[
                    ("TaskAssignment", "Assignment"),
                    ("TaskTimeout", "Timeout"),
                    ("TaskYield", "Yield"),
                    ("TaskCompletion", "Completion"),
                    ("TaskAbort", "Abort"),
                    ("TaskCancellation", "Cancellation"),
                    ("TaskOrderRelease", "Order key released"),
                ],
                max_length=32,
            ),
        ),
        migrations.RunPython(install_key_triggers, remove_key_triggers),
    ]
