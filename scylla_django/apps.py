from contextlib import suppress

from django.apps import AppConfig
from django.core.exceptions import ImproperlyConfigured


class ScyllaConfig(AppConfig):
    """The scylla_django application; its label never changes (migrations depend on it)."""

    name = "scylla_django"
    label = "scylla_django"
    verbose_name = "Scylla tasks"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """Register the system checks, import the apps' handler modules, tell submissions which
        queues this process serves, connect metrics."""
        from . import checks  # noqa: F401  (registers the system checks)
        from .handlers import autodiscover, register_builtin, registry
        from .models import serving

        register_builtin(registry)

        # A queue with a handler in this process counts as served: no warning at submit.
        serving.serve_here(registry.serves)
        # So does a queue of a django.tasks ScyllaBackend, whose handler `scylla_worker`
        # registers (`manage.py check --deploy` asks in a process that registered none).
        from .backends import serves_django_tasks

        serving.serve_here(serves_django_tasks)

        # registry.get(queue) then answers in a shell and the web server too. A bad
        # HANDLER_MODULES setting is left to `manage.py check` to report (E001).
        with suppress(ImproperlyConfigured):
            autodiscover()

        from . import eager

        eager.connect()

        try:
            from . import metrics
        except ImportError:  # the metrics extra is not installed
            return
        metrics.connect_signals()
