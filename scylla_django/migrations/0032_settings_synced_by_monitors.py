"""Limits and rates remember the value the settings last gave them (`setting`), so that the
monitor sets them again when `SCYLLA["LIMITS"]`/`SCYLLA["RATES"]` change; monitors say which
settings names they define (`configured`), so that monitors with different settings (a rolling
deploy) leave each other's schedules alone.

A limit or rate that exists already is taken to hold what the settings last gave it: where the
settings now give another value, the monitor's next pass sets it."""

from typing import Any

from django.db import migrations, models


def remember_values(apps: Any, schema_editor: Any) -> None:
    alias = schema_editor.connection.alias
    limits = apps.get_model("scylla_django", "Limit").objects.using(alias)
    limits.update(setting=models.F("max_running"))
    rates = apps.get_model("scylla_django", "Rate").objects.using(alias)
    for rate in rates.all():
        # A rate's period is a whole number of seconds ("100/m" is 60 s).
        rates.filter(pk=rate.pk).update(setting=f"{rate.count}/{int(rate.seconds)}s")


class Migration(migrations.Migration):
    dependencies = [
        ("scylla_django", "0031_rate_starts_at_lease_time_on_sqlite"),
    ]

    operations = [
        migrations.AddField(
            model_name="limit",
            name="setting",
            field=models.PositiveIntegerField(blank=True, editable=False, null=True),
        ),
        migrations.AddField(
            model_name="monitor",
            name="configured",
            field=models.JSONField(blank=True, editable=False, null=True),
        ),
        migrations.AddField(
            model_name="rate",
            name="setting",
            field=models.CharField(blank=True, editable=False, max_length=40, null=True),
        ),
        migrations.RunPython(remember_values, migrations.RunPython.noop),
    ]
