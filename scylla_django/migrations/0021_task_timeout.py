"""A task's run-time limit (`timeout`): null takes its handler's, else its queue's."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("scylla_django", "0020_task_resources"),
    ]

    operations = [
        migrations.AddField(
            model_name="task",
            name="timeout",
            field=models.DurationField(blank=True, null=True),
        ),
    ]
