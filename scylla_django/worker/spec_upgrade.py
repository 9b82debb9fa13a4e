"""Before a handler runs: its task's spec, stored at an older version, brought up to the version
its handler reads (`spec_versions`), written fenced on the lease. Every runner calls it (a
worker's handler threads, its event loop, its bundles, the foreground runs).
"""

from __future__ import annotations

import logging

from django.core.exceptions import ValidationError
from django.db import connections

from .. import spec_versions
from ..exceptions import Abort, LeaseLost, Snooze, TaskCancelled
from ..handlers import TaskContext

logger = logging.getLogger("scylla_django")


def upgrades(ctx: TaskContext) -> bool:
    """Whether `ctx`'s spec is of another version than its handler reads."""
    task = ctx.task
    return spec_versions.stored_version(task.version) != spec_versions.handler_version(task.queue)


def upgrade(ctx: TaskContext, name: str) -> None:
    """Before the handler runs: bring a spec stored at an older version up to its handler's
    with the queue's migrations, written fenced on the lease (`Task.upgrade_spec`); `name` is
    the worker's, for its log line.

    A spec of a newer version than the handler reads (an older worker, beside newer ones in a
    rolling deploy) is given back with a snooze, for a worker that reads it; a migration that
    raises, or that is missing, aborts the task with `spec_migration_failed`; a lease lost
    meanwhile stops it.
    """
    if not upgrades(ctx):
        return
    task = ctx.task
    stored = spec_versions.stored_version(task.version)
    reads = spec_versions.handler_version(task.queue)
    if stored > reads:
        logger.warning(
            "%s: %s holds a spec of version %d, its handler here reads %d: given back",
            name,
            task.rn,
            stored,
            reads,
        )
        raise Snooze(spec_versions.NEWER_SPEC_SNOOZE)
    try:
        spec, version = spec_versions.upgrade(task.queue, task.spec, task.version)
    except Exception as exc:
        raise Abort(
            spec_versions.MIGRATION_FAILED,
            f"the spec of version {stored} could not be upgraded to {reads}: {exc!r}",
            args={"from_version": stored, "to_version": reads},
        ) from exc
    try:
        task.upgrade_spec(ctx.worker, spec, version)
    except ValidationError as exc:
        raise Abort(
            spec_versions.MIGRATION_FAILED,
            f"the spec upgraded to version {reads} is not valid: {'; '.join(exc.messages)}",
            args={"from_version": stored, "to_version": reads},
        ) from exc
    except (LeaseLost, TaskCancelled) as exc:
        ctx.stop(exc)
        raise


def upgrade_apart(ctx: TaskContext, name: str) -> None:
    """`upgrade` off the event loop, on a connection closed after."""
    try:
        upgrade(ctx, name)
    finally:
        connections.close_all()  # this pool thread's own: not kept between tasks
