from django.apps import AppConfig


class ScyllaConfig(AppConfig):
    """The scylla_django application; its label never changes (migrations depend on it)."""

    name = "scylla_django"
    label = "scylla_django"
    verbose_name = "Scylla tasks"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import checks  # noqa: F401  (registers the system checks)

        try:
            from . import metrics
        except ImportError:  # the metrics extra is not installed
            return
        metrics.connect_signals()
