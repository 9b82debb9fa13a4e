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
`{"django_task": "<module path>", "args": [...], "kwargs": {...}, "priority": <Django's>,
"backend": "<alias>"}`, its rn is the TaskResult id. `manage.py scylla_worker --queue default`
runs them: every queue in QUEUES gets a handler that calls the function. `get_result(id)` reads
the Scylla task back, with the task as it was enqueued (`.using()` overrides included):
ready → READY, running → RUNNING, completed → SUCCESSFUL (the return value is the task's
result), aborted or cancelled → FAILED (with the recorded error).

Django's `task_started` is sent before the function runs, and `task_finished` once the outcome
is committed (completed, aborted, cancelled, or aborted by the monitor), with the final result,
in any process that has loaded this backend: the worker (which registers its handlers), and any
process that enqueued, read a result or ran the system checks.

`OPTIONS["KEYS"]` gives a task function's Scylla tasks keys, by the function's module path:
`{"myapp.tasks.send_invoice": {"locks": lambda spec: [f"invoice:{spec['args'][0]}"],
"limits": ["smtp"]}}`, each a value or a function of the spec (as `@handler(...)` takes them).

`manage.py check` reports (through `django.tasks`' own check of every backend):
`scylla_django.E013` scylla_django is not in INSTALLED_APPS, `E014` QUEUES is a string (not a
list: the backend then serves no queue), `E011` a queue in QUEUES is not a valid queue name,
`E012` a queue in QUEUES already has a `@handler` of its own, `E020` a bad `OPTIONS["KEYS"]`
entry.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from contextlib import suppress
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.apps import apps
from django.core import checks
from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.utils.module_loading import import_string

from . import queue_keys, signals
from .enums import EventType, Status
from .exceptions import Abort
from .handlers import autodiscover, qualname, registry
from .validation import validate_queue

if TYPE_CHECKING:
    from .handlers import TaskContext as ScyllaContext
    from .models import Task as ScyllaTask

try:
    from django.tasks import TaskResultStatus, task_backends
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
#: A Scylla task's attribute that holds its (time, worker) assignments once they are known.
ASSIGNMENTS = "_django_task_assignments"
#: A Scylla task's attribute that holds the Django task as it was enqueued, set by the worker.
ENQUEUED = "_django_task_enqueued"
#: A Scylla task's attribute that holds what its Django task raised, set by the worker, until
#: Django's `task_finished` is sent with it.
RAISED = "_django_task_raised"
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


def scylla_backends() -> Iterator[ScyllaBackend]:
    """Every configured `django.tasks` backend that is a ScyllaBackend (or a subclass)."""
    if not HAS_DJANGO_TASKS:
        return
    for backend in task_backends.all():
        if isinstance(backend, ScyllaBackend):
            yield backend


def register_handlers() -> None:
    """Register the Django-task handler for the QUEUES of every ScyllaBackend in TASKS."""
    for backend in scylla_backends():
        for queue in sorted(backend.queues):
            registry.register(queue, run_django_task)


def serves_django_tasks(queue: str) -> bool:
    """Whether `queue` is a queue of a configured ScyllaBackend (its handler is
    `run_django_task`, registered by `scylla_worker`)."""
    return any(queue in backend.queues for backend in scylla_backends())


def run_django_task(ctx: ScyllaContext) -> Any:
    """The handler of Django tasks: import the task, call it, return its (JSON) result.

    A task function that cannot be imported fails like any other exception (its ImportError
    is recorded with its traceback). Django's `task_finished` is sent by `send_task_finished`
    once the outcome is committed, with what the task raised as the exception being handled.
    """
    spec = ctx.spec
    if not isinstance(spec, dict) or SPEC_KEY not in spec:
        raise Abort("not_a_django_task", "This task was not enqueued through django.tasks.")
    scylla_task = ctx.task
    if scylla_task.leases == 1:
        # The first lease, just taken: its TaskAssignment is this row's time and owner, so the
        # result is built without reading the History (kept for `task_finished`, too).
        setattr(scylla_task, ASSIGNMENTS, [(scylla_task.updated, scylla_task.owner)])
    backend = _backend_for(spec)
    result = backend.result_of(scylla_task)
    # Kept for `task_finished`, sent with this instance once the outcome is written: the
    # fields the Django task is built from do not change while it runs.
    setattr(scylla_task, ENQUEUED, result.task)
    task_started.send(type(backend), task_result=result)
    task = result.task
    try:
        if task.takes_context:
            value = task.call(TaskContext(task_result=result), *spec["args"], **spec["kwargs"])
        else:
            value = task.call(*spec["args"], **spec["kwargs"])
    except BaseException as exc:
        setattr(scylla_task, RAISED, exc)  # for Django's log of `task_finished`
        raise
    return normalize_json(value)


def send_task_finished(sender: Any, task: ScyllaTask, **kwargs: Any) -> None:
    """Django's `task_finished`, with the final result, for a Django task that finished.

    Connected to Scylla's `task_finished`, which is sent after the outcome is committed. A task
    the worker ran arrives as written, with its assignments; any other is read back. A task
    that failed with an exception of its own is sent while that exception is handled: Django's
    receiver logs the failure with `sys.exc_info()`, its type and traceback.
    """
    spec = task.spec
    if not isinstance(spec, dict) or SPEC_KEY not in spec:
        return
    try:
        backend = _backend_for(spec)
        if hasattr(task, ASSIGNMENTS):
            result = backend.result_of(task)
        else:
            result = backend.get_result(task.rn)
    except (ImportError, TaskResultDoesNotExist, InvalidTask):
        return  # the function is gone or the backend was reconfigured: nothing to describe
    raised: BaseException | None = task.__dict__.pop(RAISED, None)
    if raised is None or result.status != TaskResultStatus.FAILED:
        task_finished.send(type(backend), task_result=result)
        return
    try:
        raise raised
    except BaseException:  # the exception being handled while the receivers run
        task_finished.send(type(backend), task_result=result)


def enqueued_task(task: DjangoTask[Any, Any], scylla_task: ScyllaTask, alias: str) -> Any:
    """`task` (a module's Django task) as it was enqueued as `scylla_task`: `.using()` may
    have changed its priority, queue, run_after or backend. The module's own task when none
    differs (a copy would validate the task again)."""
    spec = scylla_task.spec
    changed = {
        "priority": spec.get("priority", task.priority),
        "queue_name": scylla_task.queue,
        "run_after": scylla_task.not_before,
        "backend": spec.get("backend", alias),
    }
    if all(getattr(task, name) == value for name, value in changed.items()):
        return task
    return dataclasses.replace(task, **changed)


def _backend_for(spec: dict[str, Any]) -> ScyllaBackend:
    """The backend a Django task was enqueued through (its task's default for older specs)."""
    alias = spec.get("backend")
    if not isinstance(alias, str) or alias not in task_backends.settings:
        alias = import_string(spec[SPEC_KEY]).backend
    backend = task_backends[alias]
    if not isinstance(backend, ScyllaBackend):
        raise InvalidTask(f"The backend {alias!r} is not a ScyllaBackend.")
    return backend


if HAS_DJANGO_TASKS:

    class ScyllaBackend(BaseTaskBackend):
        """Runs `django.tasks` tasks as Scylla tasks (see the module docstring)."""

        supports_defer = True
        supports_async_task = True
        supports_get_result = True
        supports_priority = True

        def __init__(self, alias: str, params: dict[str, Any]) -> None:
            queues = params.get("QUEUES")
            # Django's base takes set(QUEUES): a string would give its letters as queues
            # ("default": d, e, f, a, u, l, t). Such a backend serves no queue; E014 says why.
            self.queues_text = queues if isinstance(queues, str | bytes) else None
            if self.queues_text is not None:
                params = {**params, "QUEUES": []}
            super().__init__(alias, params)

        def enqueue(
            self,
            task: DjangoTask[Any, Any],
            args: tuple[Any, ...] | list[Any],
            kwargs: dict[str, Any],
        ) -> TaskResult[Any, Any]:
            from .models import Task

            self.validate_task(task)
            spec = {
                SPEC_KEY: task.module_path,
                "args": normalize_json(list(args)),
                "kwargs": normalize_json(dict(kwargs)),
                "priority": task.priority,
                "backend": self.alias,
            }
            try:
                scylla_task = Task.objects.submit(
                    task.queue_name,
                    spec,
                    priority=django_priority(task.priority),
                    not_before=task.run_after,
                    # OPTIONS["RETRY"]: a Retry (or its JSON) for every task of this backend.
                    retry=self.options.get("RETRY"),
                    **self.task_keys(task.module_path, spec),
                )
            except ValidationError as exc:
                raise InvalidTask(" ".join(exc.messages)) from exc
            result = self._result(task, scylla_task, assignments=[])
            task_enqueued.send(type(self), task_result=result)
            return result

        def task_keys(self, module_path: str, spec: dict[str, Any]) -> dict[str, Any]:
            """OPTIONS["KEYS"][module_path]: the keys of the function's Scylla tasks
            (`unique_key`, `locks`, `limits`, `order_key`, `order_on_failure`, `rate_key`),
            each a value or a function of the spec (whose `args` and `kwargs` are the call's)."""
            defaults = (self.options.get("KEYS") or {}).get(module_path)
            if not defaults:
                return {}
            try:
                checked = queue_keys.check_defaults(defaults)
            except TypeError as exc:  # scylla_django.E020 says so too
                raise InvalidTask(f"OPTIONS['KEYS'][{module_path!r}]: {exc}") from None
            return queue_keys.resolve(checked, spec, {}, f"task {module_path!r}")

        def get_result(self, result_id: str) -> TaskResult[Any, Any]:
            from .models import Task

            try:
                scylla_task = Task.objects.get(rn=result_id)
            except Task.DoesNotExist:
                raise TaskResultDoesNotExist(result_id) from None
            return self.result_of(scylla_task)

        def result_of(self, scylla_task: ScyllaTask) -> TaskResult[Any, Any]:
            """The TaskResult of a Scylla task that was enqueued as a Django task."""
            spec = scylla_task.spec
            if not isinstance(spec, dict) or SPEC_KEY not in spec:
                raise TaskResultDoesNotExist(scylla_task.rn)
            task = getattr(scylla_task, ENQUEUED, None)
            if task is None:
                task = enqueued_task(import_string(spec[SPEC_KEY]), scylla_task, self.alias)
            return self._result(task, scylla_task, getattr(scylla_task, ASSIGNMENTS, None))

        def check(self, **kwargs: Any) -> list[Any]:
            """E013: scylla_django not installed; E014: QUEUES is a string, not a list; E011:
            a bad queue name in QUEUES; E012: a queue in QUEUES that already has a `@handler`
            (the worker could not serve both)."""
            return [*super().check(**kwargs), *self._problems()]

        def _problems(self) -> Iterator[checks.CheckMessage]:
            if not apps.is_installed("scylla_django"):
                yield checks.Error(
                    f"TASKS[{self.alias!r}] uses ScyllaBackend, but scylla_django is not "
                    "installed.",
                    hint='Add "scylla_django" to INSTALLED_APPS and run migrate.',
                    id="scylla_django.E013",
                )
                return
            # The @handler queues, as the worker will see them (a bad HANDLER_MODULES setting
            # is scylla_django.E001).
            with suppress(ImproperlyConfigured):
                autodiscover()
            task_keys = self.options.get("KEYS") or {}
            if not isinstance(task_keys, dict):
                task_keys = {"": task_keys}
            for module_path, defaults in sorted(task_keys.items()):
                try:
                    if not isinstance(defaults, dict):
                        raise TypeError("give the keys as a dict: {'locks': [...], ...}")
                    queue_keys.check_defaults(defaults)
                except TypeError as exc:
                    yield checks.Error(
                        f"TASKS[{self.alias!r}]['OPTIONS']['KEYS'][{module_path!r}]: {exc}",
                        hint="Map a task function's module path to its keys, each a value or "
                        "a function of the spec.",
                        id="scylla_django.E020",
                    )
            if self.queues_text is not None:
                yield checks.Error(
                    f"TASKS[{self.alias!r}]['QUEUES'] is the string {self.queues_text!r}, not "
                    "a list of queue names: this backend serves no queue.",
                    hint=f"Write a list: 'QUEUES': [{self.queues_text!r}].",
                    id="scylla_django.E014",
                )
            for queue in sorted(self.queues):
                try:
                    validate_queue(queue)
                except ValidationError as exc:
                    yield checks.Error(
                        f"TASKS[{self.alias!r}]['QUEUES'] holds {queue!r}: "
                        + " ".join(exc.messages),
                        id="scylla_django.E011",
                    )
                    continue
                existing = registry.get(queue)
                if existing is not None and qualname(existing) != qualname(run_django_task):
                    yield checks.Error(
                        f"Queue {queue!r} is in TASKS[{self.alias!r}]['QUEUES'] and also has "
                        f"the handler {qualname(existing)}; a worker cannot serve it for both.",
                        hint="Use different queues for django.tasks and for @handler functions.",
                        id="scylla_django.E012",
                    )

        def _result(
            self,
            task: DjangoTask[Any, Any],
            scylla_task: ScyllaTask,
            assignments: list[tuple[datetime, str | None]] | None = None,
        ) -> TaskResult[Any, Any]:
            """The TaskResult of `scylla_task`; `assignments` (time, worker) are read from its
            History unless given or the task was never leased."""
            if assignments is None and scylla_task.leases == 0:
                assignments = []
            elif assignments is None:
                assignments = list(
                    scylla_task.history.filter(typ=EventType.ASSIGNMENT).values_list(
                        "time", "worker"
                    )
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
                backend=task.backend,
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

    # Connected when django.tasks loads this backend (the module is imported then).
    signals.task_finished.connect(send_task_finished, dispatch_uid="scylla_django.backends")
