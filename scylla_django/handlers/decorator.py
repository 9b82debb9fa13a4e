"""`@handler`: registers a queue's handler with its task options, and `@handler.migrates`
a migration of its spec."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from django.core.exceptions import ValidationError

from .. import queue_keys, retries, spec_versions
from ..notify import register_notify
from ..validation import validate_delay, validate_timeout

if TYPE_CHECKING:
    pass

from .handler_registry import Bundling, Handler, HandlerRegistry, registry

H = TypeVar("H", bound=Handler)
M = TypeVar("M", bound=Callable[[Any], Any])


class HandlerDecorator:
    """`@handler(...)` registers a queue's handler; `@handler.migrates(...)` a migration of
    its spec (see each)."""

    def __call__(
        self,
        *queues: str,
        registry: HandlerRegistry = registry,
        retry: retries.Retry | None = None,
        unique_key: Callable[[Any], str] | None = None,
        locks: Any = None,
        limits: Any = None,
        order_key: Any = None,
        order_on_failure: Any = None,
        rate_key: Any = None,
        timeout: timedelta | float | str | None = None,
        bundle_size: int | None = None,
        bundle_wait: timedelta | float | str | None = None,
        notify: str | None = None,
        snooze: retries.Backoff | None = None,
        version: int | None = None,
        schema: Mapping[str, Any] | None = None,
        cpu_limit: timedelta | float | str | None = None,
    ) -> Callable[[H], H]:
        """Register the decorated function as the handler of `queues`.

        The function gets a `TaskContext`; its return value (JSON) becomes the task's result.
        `retry` is the queues' retry policy for tasks that have none of their own: an abort it
        covers is followed by a new task (see `scylla_django.retries`).

        `unique_key(spec)` is the unique key of a task submitted to the queues without one;
        `locks`, `limits`, `order_key`, `order_on_failure` and `rate_key` are the keys of a task
        submitted without them, each a value or a function of the spec (docs/howto/keys.md,
        "Locks, limits and order keys"). They apply in every process that imports the handler.
        A value that no submission could take is a TypeError here; a limit or rate that is not
        configured is reported by `manage.py check` (`scylla_django.W020`).
        `timeout` is the run-time limit of the queues' tasks that set none
        (docs/howto/timeouts.md); ValidationError if it is not positive.

        `bundle_size` makes it a bundle handler (docs/howto/bundle-handlers.md): it is called
        with a list of up to `bundle_size` contexts, leased in one statement once one task is
        ready and `bundle_wait` (default 0) has passed or the bundle is full.
        `notify` is the URL that the outcome of the queues' tasks submitted without one is POSTed
        to once final (docs/howto/notifications.md); it is checked at submission.
        `snooze` (`Exponential(...)` or `Fixed(seconds)`) is how long a snooze without a delay
        (`raise Snooze()`, `ctx.snooze()`) waits, by the task's snooze count: its first snooze
        waits `backoff.delay(1)`, its nth `backoff.delay(n)`. TypeError if it is not a backoff,
        ValidationError (`invalid_delay`) if a wait it gives is not a positive delay.
        `cpu_limit` is the CPU time (user and system) one run of the handler may use under
        `scylla_worker --isolation process`: past it the kernel stops its child process
        (`RLIMIT_CPU`, in whole seconds, rounded up) and the task is aborted with the code
        `cpu_limit`; the worker goes on. Ignored by a worker without process isolation (its
        handlers share one process); ValidationError if it is not positive.

        `version` (an integer from 1; none declared is 1) is the version of the spec the
        function reads: every task submitted to the queues is stamped with it, and a task
        stored at an older version has its spec upgraded by the queues' migrations
        (`handler.migrates`) when it is leased, before the function runs (docs/howto/deploy.md).
        `schema` is a JSON Schema of the spec it reads: `manage.py check --deploy` reports the
        stored tasks whose spec (upgraded, if older) no longer validates (the `jsonschema`
        package: the `schema` extra).
        """
        if retry is not None and not isinstance(retry, retries.Retry):
            raise TypeError(f"retry must be a Retry(...), not {retry!r}")
        if not queues:
            raise TypeError("@handler needs at least one queue name: @handler('reports')")
        check_snooze_policy(snooze)
        defaults = queue_keys.check_defaults(
            {
                "unique_key": unique_key,
                "locks": locks,
                "limits": limits,
                "order_key": order_key,
                "order_on_failure": order_on_failure,
                "rate_key": rate_key,
            }
        )
        limit = None if timeout is None else validate_timeout(timeout)
        cpu = None if cpu_limit is None else validate_timeout(cpu_limit)
        bundling = Bundling.of(bundle_size, bundle_wait)
        if notify is not None and not isinstance(notify, str):
            raise TypeError(f"notify must be a URL string, not {notify!r}")
        if version is not None:
            spec_versions.validate_version(version)

        def decorate(func: H) -> H:
            for queue in queues:
                spec_versions.register_spec(queue, version, schema)
                registry.register(queue, func)
                registry.set_timeout(queue, limit)
                registry.set_bundling(queue, bundling)
                retries.register_policy(queue, retry)
                queue_keys.register_keys(queue, **defaults)
                register_notify(queue, notify)
                registry.set_snooze(queue, snooze)
                registry.set_cpu_limit(queue, cpu)
            return func

        return decorate

    def migrates(self, *queues: str, from_version: int) -> Callable[[M], M]:
        """Register the decorated function as the migration of the `queues`' specs from
        `from_version` to the next version: it takes a spec of `from_version` and returns one
        of `from_version + 1`.

        ```python
        @handler("reports", version=2)
        def build_report(ctx): ...

        @handler.migrates("reports", from_version=1)
        def name_the_day(spec):
            return {**spec, "day": spec.pop("date")}
        ```

        A worker runs the chain of migrations from a task's stored version to its handler's
        when it leases the task, and writes the upgraded spec and version fenced on the lease
        before the handler runs (see `worker/execution.py`). A migration should be a pure
        function of the spec: it may run again if the lease is lost before the write. What it
        raises aborts the task (`spec_migration_failed`). TypeError for a `from_version` that
        is not an integer from 1; ValueError for a second, different function of one step.
        """
        if not queues:
            raise TypeError(
                "@handler.migrates needs at least one queue name: "
                "@handler.migrates('reports', from_version=1)"
            )
        spec_versions.validate_version(from_version, "from_version")

        def decorate(func: M) -> M:
            for queue in queues:
                spec_versions.register_migration(queue, from_version, func)
            return func

        return decorate


handler = HandlerDecorator()


def check_snooze_policy(backoff: object) -> None:
    """A snooze policy is `Exponential(...)` or `Fixed(...)` (TypeError otherwise) whose waits
    are all positive delays (ValidationError `invalid_delay` otherwise): `Fixed.seconds`,
    and `Exponential`'s `initial` and `cap`, the shortest and longest of its waits."""
    if backoff is None:
        return
    if not isinstance(backoff, retries.Fixed | retries.Exponential):
        raise TypeError(f"snooze must be Exponential(...) or Fixed(seconds), not {backoff!r}")
    bounds = (
        [backoff.seconds] if isinstance(backoff, retries.Fixed) else [backoff.initial, backoff.cap]
    )
    for seconds in bounds:
        try:
            validate_delay(seconds)
        except ValidationError:
            raise ValidationError(
                f"snooze={backoff!r} would wait {seconds!r} s: every wait of a snooze policy "
                "must be a positive delay.",
                code="invalid_delay",
            ) from None
