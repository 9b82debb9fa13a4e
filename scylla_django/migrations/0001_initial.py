"""The schema of scylla_django 0.1.0: its models, then what the models cannot say: the triggers
that take a task's keys with its lease and free them (`db.keys`), the trigger that gives a
task with a fair key its turn (`db.fairness`), and the task table's own autovacuum settings
on PostgreSQL (`db.vacuum`)."""

import django.core.validators
import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

import scylla_django.db
from scylla_django.db.fairness import install_fair_triggers, remove_fair_triggers
from scylla_django.db.keys import install_key_triggers, remove_key_triggers
from scylla_django.db.vacuum import tune_task_table, untune_task_table


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="Batch",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                (
                    "created",
                    models.DateTimeField(db_default=scylla_django.db.Now(), editable=False),
                ),
                ("total", models.PositiveIntegerField(default=0)),
                ("completed", models.PositiveIntegerField(default=0)),
                ("failed", models.PositiveIntegerField(default=0)),
                ("cancelled", models.DateTimeField(blank=True, null=True)),
                ("closed", models.DateTimeField(blank=True, null=True)),
            ],
            options={
                "verbose_name_plural": "batches",
                "ordering": ["-id"],
            },
        ),
        migrations.CreateModel(
            name="Hold",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("key", models.CharField(db_index=True, max_length=202)),
                ("exclusive", models.BooleanField(default=True)),
                ("until", models.FloatField(blank=True, null=True)),
                ("since", models.DateTimeField(db_default=scylla_django.db.Now(), editable=False)),
            ],
            options={
                "db_table": "scylla_django_hold",
            },
        ),
        migrations.CreateModel(
            name="Key",
            fields=[
                ("name", models.CharField(max_length=202, primary_key=True, serialize=False)),
                ("starts", models.JSONField(blank=True, default=list)),
            ],
            options={
                "db_table": "scylla_django_key",
            },
        ),
        migrations.CreateModel(
            name="Limit",
            fields=[
                ("name", models.CharField(max_length=200, primary_key=True, serialize=False)),
                ("max_running", models.PositiveIntegerField()),
                ("setting", models.PositiveIntegerField(blank=True, editable=False, null=True)),
            ],
            options={
                "db_table": "scylla_django_limit",
            },
        ),
        migrations.CreateModel(
            name="Monitor",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("hostname", models.CharField(blank=True, max_length=255)),
                ("pid", models.PositiveIntegerField(blank=True, null=True)),
                (
                    "started",
                    models.DateTimeField(db_default=scylla_django.db.Now(), editable=False),
                ),
                ("last_seen", models.DateTimeField(db_default=scylla_django.db.Now())),
                ("stopped", models.DateTimeField(blank=True, null=True)),
                ("silent_at", models.DateTimeField(blank=True, null=True)),
                ("dead_at", models.DateTimeField(blank=True, null=True)),
                ("interval", models.DurationField()),
                ("last_pass", models.DateTimeField(blank=True, null=True)),
                ("last_reset", models.PositiveIntegerField(default=0)),
                ("last_purged", models.PositiveIntegerField(default=0)),
                ("configured", models.JSONField(blank=True, editable=False, null=True)),
            ],
            options={
                "ordering": ["-id"],
                "abstract": False,
            },
        ),
        migrations.CreateModel(
            name="QueueSetting",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                (
                    "queue",
                    models.CharField(
                        max_length=100,
                        unique=True,
                        validators=[
                            django.core.validators.RegexValidator(
                                "\\A[A-Za-z0-9][A-Za-z0-9._:-]{0,99}\\Z",
                                "A queue name is 1 to 100 characters of letters, digits, '.', '_', ':' and '-', starting with a letter or a digit.",
                                code="invalid_queue",
                            )
                        ],
                    ),
                ),
                ("paused", models.BooleanField(default=False)),
                ("max_running", models.PositiveIntegerField(blank=True, null=True)),
                ("fair_key", models.CharField(blank=True, max_length=200, null=True)),
                ("fair_weights", models.JSONField(blank=True, null=True)),
                ("aging", models.DurationField(blank=True, null=True)),
                ("max_ready", models.PositiveIntegerField(blank=True, null=True)),
                (
                    "on_full",
                    models.CharField(
                        choices=[("reject", "reject"), ("shed_oldest", "shed_oldest")],
                        default="reject",
                        max_length=16,
                    ),
                ),
                ("updated", models.DateTimeField(db_default=scylla_django.db.Now())),
            ],
            options={
                "ordering": ["queue"],
                "permissions": [("control_queue", "Can pause, resume and limit queues")],
            },
        ),
        migrations.CreateModel(
            name="Rate",
            fields=[
                ("name", models.CharField(max_length=200, primary_key=True, serialize=False)),
                ("count", models.PositiveIntegerField()),
                ("seconds", models.FloatField()),
                ("setting", models.CharField(blank=True, editable=False, max_length=40, null=True)),
            ],
            options={
                "db_table": "scylla_django_rate",
            },
        ),
        migrations.CreateModel(
            name="Task",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                (
                    "rn",
                    models.CharField(
                        max_length=128,
                        validators=[
                            django.core.validators.RegexValidator(
                                "\\A(?!\\.\\.?\\Z)[A-Za-z0-9._:-]{1,128}\\Z",
                                "An rn is 1 to 128 characters of letters, digits, '.', '_', ':' and '-', and not '.' or '..'.",
                                code="invalid_rn",
                            )
                        ],
                    ),
                ),
                (
                    "queue",
                    models.CharField(
                        max_length=100,
                        validators=[
                            django.core.validators.RegexValidator(
                                "\\A[A-Za-z0-9][A-Za-z0-9._:-]{0,99}\\Z",
                                "A queue name is 1 to 100 characters of letters, digits, '.', '_', ':' and '-', starting with a letter or a digit.",
                                code="invalid_queue",
                            )
                        ],
                    ),
                ),
                ("spec", models.JSONField()),
                ("priority", models.PositiveSmallIntegerField(default=0)),
                (
                    "status",
                    models.CharField(
                        choices=[
                            ("ready", "Ready"),
                            ("running", "Running"),
                            ("completed", "Completed"),
                            ("aborted", "Aborted"),
                            ("cancelled", "Cancelled"),
                        ],
                        default="ready",
                        max_length=16,
                    ),
                ),
                ("progress", models.FloatField(default=0.0)),
                (
                    "created",
                    models.DateTimeField(db_default=scylla_django.db.Now(), editable=False),
                ),
                (
                    "updated",
                    models.DateTimeField(db_default=scylla_django.db.Now(), editable=False),
                ),
                ("not_before", models.DateTimeField(blank=True, null=True)),
                ("errors", models.JSONField(blank=True, default=list)),
                ("result", models.JSONField(blank=True, null=True)),
                ("owner", models.CharField(blank=True, max_length=64, null=True)),
                ("deadline", models.DateTimeField(blank=True, null=True)),
                ("leases", models.PositiveIntegerField(default=0)),
                ("lease_length", models.DurationField(blank=True, editable=False, null=True)),
                ("timeout", models.DurationField(blank=True, null=True)),
                ("timeout_at", models.DateTimeField(blank=True, editable=False, null=True)),
                ("retry_of", models.CharField(blank=True, max_length=128, null=True)),
                ("root", models.CharField(blank=True, max_length=128, null=True)),
                ("attempt", models.PositiveIntegerField(default=1)),
                ("retry_policy", models.JSONField(blank=True, null=True)),
                ("snoozes", models.PositiveIntegerField(default=0)),
                (
                    "handler_started",
                    models.BooleanField(db_default=True, default=True, editable=False),
                ),
                (
                    "unstarted",
                    models.PositiveIntegerField(
                        db_default=0, default=0, editable=False, verbose_name="unstarted leases"
                    ),
                ),
                ("parent", models.CharField(blank=True, max_length=128, null=True)),
                ("after", models.JSONField(blank=True, editable=False, null=True)),
                ("expires_at", models.DateTimeField(blank=True, null=True)),
                ("unique_key", models.CharField(blank=True, max_length=200, null=True)),
                ("unique_window", models.DurationField(blank=True, null=True)),
                ("unique_held", models.BooleanField(db_default=False, default=False)),
                ("keys", models.JSONField(blank=True, editable=False, null=True)),
                (
                    "order_key",
                    models.CharField(blank=True, editable=False, max_length=200, null=True),
                ),
                ("order_seq", models.BigIntegerField(blank=True, editable=False, null=True)),
                ("order_block", models.BooleanField(blank=True, editable=False, null=True)),
                ("rate_cost", models.PositiveIntegerField(blank=True, editable=False, null=True)),
                (
                    "fair_key",
                    models.CharField(blank=True, editable=False, max_length=200, null=True),
                ),
                ("turn", models.FloatField(db_default=0.0, default=0.0, editable=False)),
                ("cpu_time", models.FloatField(blank=True, editable=False, null=True)),
                ("peak_memory", models.BigIntegerField(blank=True, editable=False, null=True)),
                ("dead", models.DateTimeField(blank=True, editable=False, null=True)),
                ("log", models.CharField(blank=True, editable=False, max_length=255, null=True)),
                (
                    "notify",
                    models.CharField(blank=True, editable=False, max_length=2000, null=True),
                ),
                ("notified", models.DateTimeField(blank=True, editable=False, null=True)),
                (
                    "version",
                    models.PositiveSmallIntegerField(blank=True, editable=False, null=True),
                ),
                (
                    "batch",
                    models.ForeignKey(
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
            ],
            options={
                "permissions": [
                    ("submit_task", "Can submit tasks"),
                    ("cancel_task", "Can cancel tasks"),
                    ("cancel_own_task", "Can cancel the tasks one submitted"),
                    ("work_task", "Can lease and finish tasks as a worker"),
                ],
            },
        ),
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
            name="TaskTrace",
            fields=[
                ("rn", models.CharField(max_length=128, primary_key=True, serialize=False)),
                ("traceparent", models.CharField(max_length=55)),
            ],
            options={
                "verbose_name": "task trace",
            },
        ),
        migrations.CreateModel(
            name="Watermark",
            fields=[
                ("name", models.CharField(max_length=64, primary_key=True, serialize=False)),
                ("position", models.BigIntegerField(default=0)),
                ("updated", models.DateTimeField(db_default=scylla_django.db.Now())),
            ],
        ),
        migrations.CreateModel(
            name="Event",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("kind", models.CharField(max_length=200)),
                ("payload", models.JSONField(blank=True, default=dict)),
                ("time", models.DateTimeField(db_default=scylla_django.db.Now())),
                (
                    "history",
                    models.BigIntegerField(blank=True, editable=False, null=True, unique=True),
                ),
            ],
            options={
                "ordering": ["id"],
                "indexes": [models.Index(fields=["kind", "id"], name="scylla_event_kind_idx")],
            },
        ),
        migrations.CreateModel(
            name="QueueRollup",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("start", models.DateTimeField()),
                ("minutes", models.PositiveSmallIntegerField()),
                ("queue", models.CharField(max_length=100)),
                ("completed", models.PositiveIntegerField(default=0)),
                ("aborted", models.PositiveIntegerField(default=0)),
                ("waits", models.JSONField(default=dict)),
            ],
            options={
                "db_table": "scylla_queue_rollup",
                "constraints": [
                    models.UniqueConstraint(
                        fields=("minutes", "start", "queue"), name="scylla_queue_rollup_uniq"
                    ),
                    models.CheckConstraint(
                        condition=models.Q(("minutes__in", [1, 60])),
                        name="scylla_queue_rollup_minutes",
                    ),
                ],
            },
        ),
        migrations.CreateModel(
            name="Schedule",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                (
                    "name",
                    models.CharField(
                        max_length=100,
                        unique=True,
                        validators=[
                            django.core.validators.RegexValidator(
                                "\\A[A-Za-z0-9][A-Za-z0-9._:-]{0,99}\\Z",
                                "A schedule name is 1 to 100 characters of letters, digits, '.', '_', ':' and '-', starting with a letter or a digit.",
                                code="invalid_schedule_name",
                            )
                        ],
                    ),
                ),
                ("cron", models.CharField(blank=True, max_length=200)),
                ("every", models.DurationField(blank=True, null=True)),
                ("trigger", models.JSONField(blank=True, null=True)),
                ("timezone", models.CharField(default="UTC", max_length=64)),
                (
                    "queue",
                    models.CharField(
                        max_length=100,
                        validators=[
                            django.core.validators.RegexValidator(
                                "\\A[A-Za-z0-9][A-Za-z0-9._:-]{0,99}\\Z",
                                "A queue name is 1 to 100 characters of letters, digits, '.', '_', ':' and '-', starting with a letter or a digit.",
                                code="invalid_queue",
                            )
                        ],
                    ),
                ),
                ("spec", models.JSONField(blank=True, default=dict)),
                ("priority", models.PositiveSmallIntegerField(default=0)),
                ("enabled", models.BooleanField(default=True)),
                (
                    "catch_up",
                    models.CharField(
                        choices=[
                            ("one", "The latest missed tick only"),
                            ("all", "Every missed tick"),
                            ("none", "No missed tick"),
                        ],
                        default="one",
                        max_length=8,
                    ),
                ),
                ("skip_if_running", models.BooleanField(default=False)),
                ("window", models.JSONField(blank=True, default=list)),
                ("min_gap", models.DurationField(blank=True, null=True)),
                ("max_runs", models.CharField(blank=True, max_length=20)),
                ("max_concurrent", models.PositiveIntegerField(blank=True, null=True)),
                ("max_load", models.FloatField(blank=True, null=True)),
                (
                    "when_unmet",
                    models.CharField(
                        choices=[
                            ("wait", "Wait until the constraints are met"),
                            ("skip", "Skip the firing"),
                        ],
                        default="wait",
                        max_length=4,
                    ),
                ),
                ("wait_timeout", models.DurationField(blank=True, null=True)),
                (
                    "on_timeout",
                    models.CharField(
                        choices=[("cancel", "Cancel the firing"), ("force", "Run anyway")],
                        default="cancel",
                        max_length=6,
                    ),
                ),
                ("active", models.JSONField(blank=True, default=list, editable=False)),
                ("launches", models.JSONField(blank=True, default=list, editable=False)),
                ("from_settings", models.BooleanField(default=False, editable=False)),
                ("next_run", models.DateTimeField(blank=True, editable=False, null=True)),
                ("last_run", models.DateTimeField(blank=True, editable=False, null=True)),
                (
                    "last_task",
                    models.CharField(blank=True, editable=False, max_length=128, null=True),
                ),
                ("counts_after", models.BigIntegerField(blank=True, editable=False, null=True)),
                ("counts_from", models.DateTimeField(blank=True, editable=False, null=True)),
                (
                    "created",
                    models.DateTimeField(db_default=scylla_django.db.Now(), editable=False),
                ),
                (
                    "updated",
                    models.DateTimeField(db_default=scylla_django.db.Now(), editable=False),
                ),
            ],
            options={
                "ordering": ["name"],
                "indexes": [
                    models.Index(
                        condition=models.Q(("enabled", True)),
                        fields=["next_run"],
                        name="scylla_schedule_due_idx",
                    )
                ],
                "constraints": [
                    models.CheckConstraint(
                        condition=models.Q(
                            models.Q(
                                ("every__isnull", True),
                                models.Q(("cron", ""), _negated=True),
                                ("trigger__isnull", True),
                            ),
                            models.Q(
                                ("every__isnull", False), ("cron", ""), ("trigger__isnull", True)
                            ),
                            models.Q(
                                ("every__isnull", True), ("cron", ""), ("trigger__isnull", False)
                            ),
                            _connector="OR",
                        ),
                        name="scylla_schedule_cron_every_or_trigger",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(("priority__gte", 0), ("priority__lte", 255)),
                        name="scylla_schedule_priority_range",
                    ),
                ],
            },
        ),
        migrations.CreateModel(
            name="Firing",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("rn", models.CharField(max_length=128, unique=True)),
                (
                    "outcome",
                    models.CharField(
                        choices=[
                            ("submitted", "Submitted"),
                            ("delayed", "Waiting for its trigger's delay"),
                            ("waiting", "Waiting for its run constraints"),
                            ("merged", "Merged into the firing that waits"),
                            ("skipped", "Skipped (a run constraint was unmet)"),
                        ],
                        default="submitted",
                        max_length=9,
                    ),
                ),
                ("time", models.DateTimeField(db_default=scylla_django.db.Now())),
                ("due", models.DateTimeField(blank=True, null=True)),
                ("spec", models.JSONField(blank=True, null=True)),
                (
                    "schedule",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="firings",
                        to="scylla_django.schedule",
                    ),
                ),
            ],
            options={
                "ordering": ["-id"],
            },
        ),
        migrations.CreateModel(
            name="Consumption",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                (
                    "event",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="consumptions",
                        to="scylla_django.event",
                    ),
                ),
                (
                    "firing",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="consumptions",
                        to="scylla_django.firing",
                    ),
                ),
                (
                    "schedule",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="scylla_django.schedule",
                    ),
                ),
            ],
            options={
                "ordering": ["id"],
            },
        ),
        migrations.CreateModel(
            name="TaskOrigin",
            fields=[
                (
                    "task",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        primary_key=True,
                        related_name="origin",
                        serialize=False,
                        to="scylla_django.task",
                    ),
                ),
                (
                    "kind",
                    models.CharField(
                        choices=[("user", "user"), ("token", "token"), ("system", "system")],
                        default="system",
                        max_length=8,
                    ),
                ),
                ("token", models.CharField(blank=True, default="", max_length=16)),
                ("name", models.CharField(blank=True, default="", max_length=150)),
                ("description", models.CharField(blank=True, default="", max_length=1000)),
                ("admission_key", models.CharField(blank=True, max_length=200, null=True)),
            ],
        ),
        migrations.CreateModel(
            name="Step",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("name", models.CharField(max_length=100)),
                ("result", models.JSONField(blank=True, null=True)),
                ("size", models.PositiveIntegerField(default=0)),
                ("lease", models.PositiveIntegerField()),
                ("time", models.DateTimeField(db_default=scylla_django.db.Now())),
                (
                    "task",
                    models.ForeignKey(
                        db_constraint=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="steps",
                        to="scylla_django.task",
                    ),
                ),
            ],
            options={
                "ordering": ["id"],
            },
        ),
        migrations.CreateModel(
            name="History",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                (
                    "typ",
                    models.CharField(
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
                ("worker", models.CharField(blank=True, max_length=64, null=True)),
                ("progress", models.FloatField(blank=True, null=True)),
                ("time", models.DateTimeField(db_default=scylla_django.db.Now())),
                (
                    "task",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="history",
                        to="scylla_django.task",
                    ),
                ),
            ],
            options={
                "verbose_name_plural": "history",
                "ordering": ["id"],
            },
        ),
        migrations.CreateModel(
            name="Dependency",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("parent_rn", models.CharField(max_length=128)),
                ("release_at", models.DateTimeField(blank=True, null=True)),
                (
                    "child",
                    models.ForeignKey(
                        db_constraint=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="dependencies",
                        to="scylla_django.task",
                    ),
                ),
                (
                    "parent",
                    models.ForeignKey(
                        db_constraint=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="dependents",
                        to="scylla_django.task",
                    ),
                ),
            ],
        ),
        migrations.AddField(
            model_name="batch",
            name="on_complete",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
                null=True,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="+",
                to="scylla_django.task",
            ),
        ),
        migrations.AddField(
            model_name="batch",
            name="on_failure",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
                null=True,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="+",
                to="scylla_django.task",
            ),
        ),
        migrations.AddField(
            model_name="batch",
            name="on_success",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
                null=True,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="+",
                to="scylla_django.task",
            ),
        ),
        migrations.CreateModel(
            name="TaskPause",
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
                        related_name="task_pause",
                        to="scylla_django.task",
                    ),
                ),
            ],
            options={
                "verbose_name": "task pause",
            },
        ),
        migrations.CreateModel(
            name="TaskSignal",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("name", models.CharField(max_length=100)),
                ("payload", models.JSONField(blank=True, null=True)),
                ("time", models.DateTimeField(db_default=scylla_django.db.Now())),
                (
                    "task",
                    models.ForeignKey(
                        db_constraint=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="signals",
                        to="scylla_django.task",
                    ),
                ),
            ],
            options={
                "ordering": ["id"],
            },
        ),
        migrations.CreateModel(
            name="Wait",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("name", models.CharField(max_length=100)),
                (
                    "kind",
                    models.CharField(
                        choices=[("sleep", "Time"), ("event", "An event"), ("signal", "A signal")],
                        max_length=6,
                    ),
                ),
                ("event_kind", models.CharField(blank=True, max_length=200, null=True)),
                ("match", models.JSONField(blank=True, null=True)),
                ("signal", models.CharField(blank=True, max_length=100, null=True)),
                ("lease", models.PositiveIntegerField()),
                ("started", models.DateTimeField(db_default=scylla_django.db.Now())),
                ("timeout", models.DateTimeField(blank=True, null=True)),
                (
                    "outcome",
                    models.CharField(
                        blank=True,
                        choices=[("woken", "Woken"), ("timed_out", "Timed out")],
                        max_length=9,
                        null=True,
                    ),
                ),
                ("ended", models.DateTimeField(blank=True, null=True)),
                ("payload", models.JSONField(blank=True, null=True)),
                ("event", models.BigIntegerField(blank=True, null=True)),
                (
                    "task",
                    models.ForeignKey(
                        db_constraint=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="waits",
                        to="scylla_django.task",
                    ),
                ),
            ],
            options={
                "ordering": ["id"],
            },
        ),
        migrations.CreateModel(
            name="WaitingRun",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("rn", models.CharField(max_length=128, unique=True)),
                ("fired", models.DateTimeField(help_text="The tick or firing time.")),
                (
                    "spec",
                    models.JSONField(blank=True, help_text="null: the schedule's spec.", null=True),
                ),
                (
                    "since",
                    models.DateTimeField(
                        help_text="When the firing began to wait (schedules' clock)."
                    ),
                ),
                ("deadline", models.DateTimeField(blank=True, null=True)),
                ("recheck", models.DateTimeField()),
                ("reason", models.TextField(blank=True)),
                ("code", models.CharField(blank=True, max_length=32)),
                ("merged", models.PositiveIntegerField(default=0)),
                (
                    "created",
                    models.DateTimeField(db_default=scylla_django.db.Now(), editable=False),
                ),
                (
                    "schedule",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="waiting",
                        to="scylla_django.schedule",
                    ),
                ),
            ],
        ),
        migrations.CreateModel(
            name="Worker",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("hostname", models.CharField(blank=True, max_length=255)),
                ("pid", models.PositiveIntegerField(blank=True, null=True)),
                (
                    "started",
                    models.DateTimeField(db_default=scylla_django.db.Now(), editable=False),
                ),
                ("last_seen", models.DateTimeField(db_default=scylla_django.db.Now())),
                ("stopped", models.DateTimeField(blank=True, null=True)),
                ("silent_at", models.DateTimeField(blank=True, null=True)),
                ("dead_at", models.DateTimeField(blank=True, null=True)),
                ("queues", models.JSONField(default=list)),
                ("capacity", models.PositiveIntegerField(default=1)),
                ("heartbeat_interval", models.DurationField(blank=True, null=True)),
                ("lease_length", models.DurationField(blank=True, null=True)),
                ("max_load", models.FloatField(blank=True, null=True)),
                ("overload", models.FloatField(blank=True, null=True)),
                ("load", models.FloatField(blank=True, null=True)),
                (
                    "user",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "ordering": ["-id"],
                "abstract": False,
            },
        ),
        migrations.AddIndex(
            model_name="firing",
            index=models.Index(fields=["schedule", "id"], name="scylla_firing_schedule_idx"),
        ),
        migrations.AddIndex(
            model_name="firing",
            index=models.Index(
                condition=models.Q(("outcome", "delayed")),
                fields=["due"],
                name="scylla_firing_delayed_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="consumption",
            index=models.Index(fields=["event"], name="scylla_consumption_event_idx"),
        ),
        migrations.AddConstraint(
            model_name="consumption",
            constraint=models.UniqueConstraint(
                fields=("schedule", "event"), name="scylla_consumption_once_per_schedule"
            ),
        ),
        migrations.AddField(
            model_name="taskorigin",
            name="user",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to=settings.AUTH_USER_MODEL,
            ),
        ),
        migrations.AddIndex(
            model_name="task",
            index=models.Index(
                condition=models.Q(("status", "ready")),
                fields=["queue", "-priority", "turn", "created", "id"],
                name="scylla_task_ready_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="task",
            index=models.Index(
                condition=models.Q(("fair_key__isnull", False), ("status", "ready")),
                fields=["queue", "fair_key", "priority", "turn"],
                name="scylla_task_fair_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="task",
            index=models.Index(
                condition=models.Q(("status", "running")),
                fields=["deadline"],
                name="scylla_task_running_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="task",
            index=models.Index(
                condition=models.Q(("status__in", ["aborted", "cancelled", "completed"])),
                fields=["updated"],
                name="scylla_task_terminal_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="task",
            index=models.Index(
                condition=models.Q(("notified__isnull", True), ("notify__isnull", False)),
                fields=["id"],
                name="scylla_task_notify_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="task",
            index=models.Index(fields=["queue", "status"], name="scylla_task_queue_status_idx"),
        ),
        migrations.AddIndex(
            model_name="task",
            index=models.Index(
                condition=models.Q(("owner__isnull", False)),
                fields=["owner", "-id"],
                name="scylla_task_owner_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="task",
            index=models.Index(
                condition=models.Q(("unique_key__isnull", False)),
                fields=["unique_key", "-id"],
                name="scylla_task_unique_key_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="task",
            index=models.Index(
                condition=models.Q(("order_key__isnull", False)),
                fields=["order_key", "status"],
                name="scylla_task_order_idx",
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
        migrations.AddIndex(
            model_name="task",
            index=models.Index(
                condition=models.Q(("root__isnull", False)),
                fields=["root", "attempt"],
                name="scylla_task_root_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="task",
            index=models.Index(
                condition=models.Q(("batch__isnull", False)),
                fields=["batch", "status", "id"],
                name="scylla_task_batch_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="task",
            index=models.Index(
                condition=models.Q(("dead__isnull", False)),
                fields=["queue", "dead"],
                name="scylla_task_dead_idx",
            ),
        ),
        migrations.AddConstraint(
            model_name="task",
            constraint=models.UniqueConstraint(
                fields=("rn",),
                name="scylla_task_rn_unique",
                violation_error_message="A task with this rn exists.",
            ),
        ),
        migrations.AddConstraint(
            model_name="task",
            constraint=models.CheckConstraint(
                condition=models.Q(("priority__gte", 0), ("priority__lte", 255)),
                name="scylla_task_priority_range",
            ),
        ),
        migrations.AddConstraint(
            model_name="task",
            constraint=models.CheckConstraint(
                condition=models.Q(("progress__gte", 0.0), ("progress__lte", 1.0)),
                name="scylla_task_progress_range",
            ),
        ),
        migrations.AddConstraint(
            model_name="task",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("status__in", ["ready", "running", "completed", "aborted", "cancelled"])
                ),
                name="scylla_task_status_valid",
            ),
        ),
        migrations.AddConstraint(
            model_name="task",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    models.Q(("status", "running"), _negated=True),
                    models.Q(("deadline__isnull", False), ("owner__isnull", False)),
                    _connector="OR",
                ),
                name="scylla_task_running_has_lease",
            ),
        ),
        migrations.AddConstraint(
            model_name="task",
            constraint=models.UniqueConstraint(
                condition=models.Q(
                    ("unique_key__isnull", False),
                    models.Q(
                        ("status__in", ["ready", "running"]), ("unique_held", True), _connector="OR"
                    ),
                ),
                fields=("unique_key",),
                name="scylla_task_unique_key",
                violation_error_message="A task holds this unique key.",
            ),
        ),
        migrations.AddConstraint(
            model_name="task",
            constraint=models.UniqueConstraint(
                condition=models.Q(("retry_of__isnull", False)),
                fields=("retry_of",),
                name="scylla_task_one_retry",
            ),
        ),
        migrations.AddConstraint(
            model_name="step",
            constraint=models.UniqueConstraint(
                fields=("task", "name"), name="scylla_step_once_per_task"
            ),
        ),
        migrations.AddIndex(
            model_name="history",
            index=models.Index(fields=["task", "id"], name="scylla_history_task_idx"),
        ),
        migrations.AddIndex(
            model_name="history",
            index=models.Index(fields=["typ", "time", "task"], name="scylla_history_typ_time_idx"),
        ),
        migrations.AddIndex(
            model_name="dependency",
            index=models.Index(fields=["parent"], name="scylla_dependency_parent_idx"),
        ),
        migrations.AddConstraint(
            model_name="dependency",
            constraint=models.UniqueConstraint(
                fields=("child", "parent"), name="scylla_dependency_unique"
            ),
        ),
        migrations.AddIndex(
            model_name="batch",
            index=models.Index(
                condition=models.Q(("closed", None)), fields=["id"], name="scylla_batch_open_idx"
            ),
        ),
        migrations.AddConstraint(
            model_name="batch",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("completed__lte", models.F("total")), ("failed__lte", models.F("total"))
                ),
                name="scylla_batch_counts",
            ),
        ),
        migrations.AddConstraint(
            model_name="tasksignal",
            constraint=models.UniqueConstraint(
                fields=("task", "name"), name="scylla_signal_once_per_task"
            ),
        ),
        migrations.AddIndex(
            model_name="wait",
            index=models.Index(
                condition=models.Q(("kind", "event"), ("outcome__isnull", True)),
                fields=["event_kind"],
                name="scylla_wait_open_event_idx",
            ),
        ),
        migrations.AddConstraint(
            model_name="wait",
            constraint=models.UniqueConstraint(
                fields=("task", "name"), name="scylla_wait_once_per_task"
            ),
        ),
        migrations.AddIndex(
            model_name="waitingrun",
            index=models.Index(fields=["recheck"], name="scylla_waiting_recheck_idx"),
        ),
        migrations.AddConstraint(
            model_name="waitingrun",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("deadline__isnull", True),
                    ("deadline__gte", models.F("since")),
                    _connector="OR",
                ),
                name="scylla_waiting_deadline_after_since",
            ),
        ),
        migrations.AddIndex(
            model_name="taskorigin",
            index=models.Index(fields=["user"], name="scylla_origin_user_idx"),
        ),
        migrations.AddIndex(
            model_name="taskorigin",
            index=models.Index(
                condition=models.Q(("admission_key__isnull", False)),
                fields=["admission_key"],
                name="scylla_origin_admission_idx",
            ),
        ),
        migrations.RunPython(install_key_triggers, remove_key_triggers),
        migrations.RunPython(install_fair_triggers, remove_fair_triggers),
        migrations.RunPython(tune_task_table, untune_task_table),
    ]
