"""A trigger's watermark on its schedule (`counts_after`, `counts_from`: the rows made before
stay null, counting every unconsumed event as they did), and a firing's delay (`due`, the
`delayed` outcome, its `spec`)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("scylla_django", "0032_settings_synced_by_monitors"),
    ]

    operations = [
        migrations.AddField(
            model_name="firing",
            name="due",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="firing",
            name="spec",
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="schedule",
            name="counts_after",
            field=models.BigIntegerField(blank=True, editable=False, null=True),
        ),
        migrations.AddField(
            model_name="schedule",
            name="counts_from",
            field=models.DateTimeField(blank=True, editable=False, null=True),
        ),
        migrations.AlterField(
            model_name="firing",
            name="outcome",
            field=models.CharField(
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
        migrations.AddIndex(
            model_name="firing",
            index=models.Index(
                condition=models.Q(("outcome", "delayed")),
                fields=["due"],
                name="scylla_firing_delayed_idx",
            ),
        ),
    ]
