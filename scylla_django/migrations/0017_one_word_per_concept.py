"""One word per concept: a task's count of leases is `leases` (it was `attempts`; the
`attempt` of a retry chain keeps its name), and a worker's lease length is `lease_length`
(it was `lease_timeout`), as a task's is."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("scylla_django", "0016_queue_rollups"),
    ]

    operations = [
        migrations.RenameField(model_name="task", old_name="attempts", new_name="leases"),
        migrations.RenameField(
            model_name="worker", old_name="lease_timeout", new_name="lease_length"
        ),
    ]
