"""The dashboard's charts read History by event type and time: an index for them."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("scylla_django", "0010_rn_unique_without_like_index")]

    operations = [
        migrations.AddIndex(
            model_name="history",
            index=models.Index(fields=["typ", "time", "task"], name="scylla_history_typ_time_idx"),
        )
    ]
