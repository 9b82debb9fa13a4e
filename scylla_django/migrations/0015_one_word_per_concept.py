"""One word per concept: a task's count of leases is `leases` (it was `attempts`); the
`attempt` of a retry chain keeps its name."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("scylla_django", "0012_first_task_of_a_chain_is_its_root"),
    ]

    operations = [
        migrations.RenameField(model_name="task", old_name="attempts", new_name="leases"),
    ]
