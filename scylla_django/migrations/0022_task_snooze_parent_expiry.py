"""Task lifecycles: a task's `snoozes`, a child's `parent`, a follow-up's `after` (the rns
whose results it reads) and `expires_at`; the key triggers again on SQLite, whose table
rebuild (a column with a default) drops them."""

from django.db import migrations, models

from scylla_django.db.keys import restore_key_triggers


class Migration(migrations.Migration):
    dependencies = [
        ("scylla_django", "0021_task_timeout"),
    ]

    operations = [
        migrations.AddField(
            model_name="task",
            name="after",
            field=models.JSONField(blank=True, editable=False, null=True),
        ),
        migrations.AddField(
            model_name="task",
            name="expires_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="task",
            name="parent",
            field=models.CharField(blank=True, max_length=128, null=True),
        ),
        migrations.AddField(
            model_name="task",
            name="snoozes",
            field=models.PositiveIntegerField(default=0),
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
                    ("TaskSnooze", "Snooze"),
                ],
                max_length=32,
            ),
        ),
        migrations.AddIndex(
            model_name="task",
            index=models.Index(
                condition=models.Q(("parent__isnull", False)),
                fields=["parent", "-id"],
                name="scylla_task_parent_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="task",
            index=models.Index(
                condition=models.Q(("expires_at__isnull", False), ("status", "ready")),
                fields=["expires_at"],
                name="scylla_task_expiry_idx",
            ),
        ),
        migrations.RunPython(restore_key_triggers, migrations.RunPython.noop),
    ]
