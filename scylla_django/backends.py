"""A backend for Django's Tasks framework (`django.tasks`, Django 6.0+): `@task` functions run on
Scylla.

```python
TASKS = {
    "default": {
        "BACKEND": "scylla_django.backends.ScyllaBackend",
        "QUEUES": ["default", "emails"],      # the queues scylla_worker serves for Django tasks
    }
}
```

`my_task.enqueue(*args, **kwargs)` submits a Scylla task on the queue `queue_name`, with
`run_after` as `not_before` and Django's priority (-100..100) mapped linearly onto Scylla's
0..255 (`django_priority()`: -100 → 0, 0 → 128, 100 → 255). The Scylla task's spec is
`{"django_task": "<module path>", "args": [...], "kwargs": {...}}`, its rn is the TaskResult id.
`manage.py scylla_worker --queue default` runs them: every queue in QUEUES gets a handler that
calls the function. `get_result(id)` reads the Scylla task back: ready → READY,
running → RUNNING, completed → SUCCESSFUL (the return value is the task's result), aborted or
cancelled → FAILED (with the recorded error).
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.utils.module_loading import import_string

from .enums import EventType, Status
from .exceptions import Abort
from .handlers import registry

if TYPE_CHECKING:
    from .handlers import TaskContext as ScyllaContext
    from .models import Task as ScyllaTask

try:
    from django.tasks import TaskResultStatus
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import Task as DjangoTask
    from django.tasks.base import TaskContext, TaskError, TaskResult
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.json import normalize_json
except ImportError:  # Django < 6.0: no Tasks framework
    HAS_DJANGO_TASKS = False
else:
    HAS_DJANGO_TASKS = True

SPEC_KEY = "django_task"
STATUSES = {
    Status.READY: "READY",
    Status.RUNNING: "RUNNING",
    Status.COMPLETED: "SUCCESSFUL",
    Status.ABORTED: "FAILED",
    Status.CANCELLED: "FAILED",
}


def django_priority(priority: int) -> int:
    """Django's task priority (-100..100, default 0) as a Scylla priority (0..255).

    Linear, rounding halves up: -100 → 0, -1 → 126, 0 → 128, 1 → 129, 100 → 255.
    """
    return math.floor((priority + 100) * 255 / 200 + 0.5)


def register_handlers() -> None:
    """Register the Django-task handler for the QUEUES of every ScyllaBackend in TASKS."""
    if not HAS_DJANGO_TASKS:
        return
    for params in getattr(settings, "TASKS", {}).values():
        if params.get("BACKEND") == f"{__name__}.ScyllaBackend":
            for queue in params.get("QUEUES", ["default"]):
                registry.register(queue, run_django_task)


def run_django_task(ctx: ScyllaContext) -> Any:
    """The handler of Django tasks: import the task, call it, return its (JSON) result."""
    spec = ctx.spec
    if not isinstance(spec, dict) or SPEC_KEY not in spec:
        raise Abort("not_a_django_task", "This task was not enqueued through django.tasks.")
    try:
        task = import_string(spec[SPEC_KEY])
    except ImportError as exc:
        raise Abort("unknown_task", str(exc), args={"task": spec[SPEC_KEY]}) from exc
    backend = task.get_backend()
    result = backend.get_result(ctx.task.rn)
    task_started.send(type(backend), task_result=result)
    try:
        if task.takes_context:
            value = task.call(TaskContext(task_result=result), *spec["args"], **spec["kwargs"])
        else:
            value = task.call(*spec["args"], **spec["kwargs"])
        return normalize_json(value)
    finally:
        task_finished.send(type(backend), task_result=backend.get_result(ctx.task.rn))


if HAS_DJANGO_TASKS:

    class ScyllaBackend(BaseTaskBackend):
        """Runs `django.tasks` tasks as Scylla tasks (see the module docstring)."""

        supports_defer = True
        supports_async_task = True
        supports_get_result = True
        supports_priority = True

        def enqueue(
            self,
            task: DjangoTask[Any, Any],
            args: tuple[Any, ...] | list[Any],
            kwargs: dict[str, Any],
        ) -> TaskResult[Any, Any]:
            from .models import Task

            self.validate_task(task)
            try:
                scylla_task = Task.objects.submit(
                    task.queue_name,
                    {
                        SPEC_KEY: task.module_path,
                        "args": normalize_json(list(args)),
                        "kwargs": normalize_json(dict(kwargs)),
                    },
                    priority=django_priority(task.priority),
                    not_before=task.run_after,
                    # OPTIONS["RETRY"]: a Retry (or its JSON) for every task of this backend.
                    retry=self.options.get("RETRY"),
                )
            except ValidationError as exc:
                raise InvalidTask(" ".join(exc.messages)) from exc
            result = self._result(task, scylla_task)
            task_enqueued.send(type(self), task_result=result)
            return result

        def get_result(self, result_id: str) -> TaskResult[Any, Any]:
            from .models import Task

            try:
                scylla_task = Task.objects.get(rn=result_id)
            except Task.DoesNotExist:
                raise TaskResultDoesNotExist(result_id) from None
            spec = scylla_task.spec
            if not isinstance(spec, dict) or SPEC_KEY not in spec:
                raise TaskResultDoesNotExist(result_id)
            task = import_string(spec[SPEC_KEY])
            return self._result(task, scylla_task)

        def _result(
            self, task: DjangoTask[Any, Any], scylla_task: ScyllaTask
        ) -> TaskResult[Any, Any]:
            assignments = list(
                scylla_task.history.filter(typ=EventType.ASSIGNMENT).values_list("time", "worker")
            )
            times: list[datetime] = [time for time, _ in assignments]
            status = Status(scylla_task.status)
            result: TaskResult[Any, Any] = TaskResult(
                task=task,
                id=scylla_task.rn,
                status=TaskResultStatus[STATUSES[status]],
                enqueued_at=scylla_task.created,
                started_at=times[0] if times else None,
                last_attempted_at=times[-1] if times else None,
                finished_at=scylla_task.updated if status.is_terminal else None,
                args=scylla_task.spec["args"],
                kwargs=scylla_task.spec["kwargs"],
                backend=self.alias,
                errors=[_task_error(error) for error in scylla_task.errors],
                worker_ids=[worker or "" for _, worker in assignments],
            )
            if status == Status.COMPLETED:
                object.__setattr__(result, "_return_value", scylla_task.result)
            return result

    def _task_error(error: dict[str, Any]) -> TaskError:
        """A Scylla error as Django's TaskError (the exception class and traceback)."""
        args = error.get("args") or {}
        if error.get("code") == "exception" and isinstance(args, dict) and "type" in args:
            return TaskError(exception_class_path=args["type"], traceback=args.get("traceback", ""))
        description = f"{error.get('code')}: {error.get('description', '')}"
        return TaskError(exception_class_path=f"{Abort.__module__}.Abort", traceback=description)
