"""An operator's hold on one ready task (`TaskHold`: the task's own `not_before`, who, since
when), the record of a deleted task (`TaskDeletion`, with its History), and a worker's
`--max-load` with the load that keeps it from leasing (`Worker.max_load`, `Worker.overload`),
the load each worker reports (`Worker.load`) and a schedule's `max_load` run constraint."""

import django.db.models.deletion
from django.db import migrations, models

import scylla_django.db


class Migration(migrations.Migration):
    dependencies = [
        ("scylla_django", "0036_fair_shares"),
    ]

    operations = [
        migrations.CreateModel(
            name="TaskDeletion",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("rn", models.CharField(db_index=True, max_length=128)),
                ("queue", models.CharField(max_length=100)),
                ("spec", models.JSONField()),
                ("priority", models.PositiveSmallIntegerField(default=0)),
                ("created", models.DateTimeField()),
                ("deleted", models.DateTimeField(db_default=scylla_django.db.Now())),
                ("by", models.CharField(blank=True, max_length=150, null=True)),
                ("history", models.JSONField(default=list)),
            ],
            options={
                "verbose_name": "deleted task",
                "ordering": ["id"],
            },
        ),
        migrations.CreateModel(
            name="TaskHold",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("not_before", models.DateTimeField(blank=True, null=True)),
                ("by", models.CharField(blank=True, max_length=150, null=True)),
                ("since", models.DateTimeField(db_default=scylla_django.db.Now())),
                (
                    "task",
                    models.OneToOneField(
                        db_constraint=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="task_hold",
                        to="scylla_django.task",
                    ),
                ),
            ],
            options={
                "verbose_name": "task hold",
            },
        ),
        migrations.AddField(
            model_name="worker",
            name="max_load",
            field=models.FloatField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="worker",
            name="overload",
            field=models.FloatField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="worker",
            name="load",
            field=models.FloatField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="schedule",
            name="max_load",
            field=models.FloatField(blank=True, null=True),
        ),
    ]
