"""The dashboard's charts read History by event type and time: an index for them.

Database only: `History.Meta.indexes` is to name `scylla_history_typ_time_idx` too, and this
migration's state operation then adds it to the model state (see the admin's `charts.py`).
"""

from django.db import migrations, models

INDEX = models.Index(fields=["typ", "time", "task"], name="scylla_history_typ_time_idx")


class Migration(migrations.Migration):
    dependencies = [("scylla_django", "0010_rn_unique_without_like_index")]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.AddIndex("history", INDEX)], state_operations=[]
        )
    ]
