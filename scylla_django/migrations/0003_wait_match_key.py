"""An event wait's key (`Wait.match_key`, `models.waits.match_key`): an event reads the open
waits of its kind keyed by one of its payload's pairs, through the index on (event_kind,
match_key), instead of every open wait of its kind. The open event waits are given their
keys; the ended ones are never read by an event again."""

from typing import Any

from django.db import migrations, models

#: Waits given their keys per statement.
BATCH = 2000


def key_open_waits(apps: Any, schema_editor: Any) -> None:
    from scylla_django.models.waits import match_key

    Wait = apps.get_model("scylla_django", "Wait")
    waits = Wait.objects.using(schema_editor.connection.alias)
    open_waits = waits.filter(kind="event", outcome__isnull=True).only("id", "match")
    batch = []
    for wait in open_waits.iterator(chunk_size=BATCH):
        wait.match_key = match_key(wait.match)
        batch.append(wait)
        if len(batch) == BATCH:
            waits.bulk_update(batch, ["match_key"])
            batch = []
    waits.bulk_update(batch, ["match_key"])


class Migration(migrations.Migration):
    dependencies = [
        ("scylla_django", "0002_lease_floors"),
    ]

    operations = [
        migrations.AddField(
            model_name="wait",
            name="match_key",
            field=models.CharField(blank=True, max_length=32, null=True),
        ),
        migrations.RunPython(key_open_waits, migrations.RunPython.noop),
        migrations.RemoveIndex(
            model_name="wait",
            name="scylla_wait_open_event_idx",
        ),
        migrations.AddIndex(
            model_name="wait",
            index=models.Index(
                condition=models.Q(("kind", "event"), ("outcome__isnull", True)),
                fields=["event_kind", "match_key"],
                name="scylla_wait_open_key_idx",
            ),
        ),
    ]
