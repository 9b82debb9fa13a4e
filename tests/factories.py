"""factory-boy factories. Tasks in later states are made with the real transitions."""

from __future__ import annotations

from datetime import timedelta

import factory

from scylla_django.models import Task, Worker


class WorkerFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Worker

    hostname = "factory-host"
    pid = factory.Sequence(lambda n: 1000 + n)
    queues = factory.LazyFunction(lambda: ["default"])
    capacity = 4


class TaskFactory(factory.django.DjangoModelFactory):
    """A ready task, inserted through `Task.objects.submit()` (so it is validated)."""

    class Meta:
        model = Task

    rn = factory.Sequence(lambda n: f"task-{n:06d}")
    queue = "default"
    spec = factory.Sequence(lambda n: {"n": n})
    priority = 0

    @classmethod
    def _create(cls, model_class, *args, **kwargs):
        return model_class.objects.submit(
            kwargs.pop("queue"), kwargs.pop("spec"), rn=kwargs.pop("rn"), **kwargs
        )


def running_task(worker: Worker, lease_length: float = 30, **kwargs) -> Task:
    """A task leased by `worker`."""
    task = TaskFactory(**kwargs)
    [leased] = Task.objects.lease(
        worker, [task.queue], lease_length=timedelta(seconds=lease_length)
    )
    assert leased.pk == task.pk, "another ready task was leased first"
    return leased
