from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("scylla_django", "0025_fewer_indexes"),
    ]

    operations = [
        migrations.AddField(
            model_name="task",
            name="timeout_at",
            field=models.DateTimeField(blank=True, editable=False, null=True),
        ),
    ]
