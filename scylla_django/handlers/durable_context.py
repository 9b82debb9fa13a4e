"""Durable execution as a handler reaches it through its `TaskContext`
(docs/howto/durable.md): steps, the task's cursor, durable sleeps and waits, a signal's token,
and their forms for an `async def` handler. `DurableContext` is a base of `TaskContext`; the
work is done by the `Durable` of `scylla_django.durable`, to which the context is the `Run`.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, cast, overload

from django.db import connections

if TYPE_CHECKING:
    from ..durable import Durable, Run, StepBlock

P = ParamSpec("P")
R = TypeVar("R")


async def apart(func: Callable[..., R], /, *args: Any, **kwargs: Any) -> R:
    """`func(*args, **kwargs)` off the event loop, on a thread of the loop's pool, on a
    connection closed after (a pool thread keeps none between calls)."""

    def call() -> R:
        try:
            return func(*args, **kwargs)
        finally:
            connections.close_all()

    return await asyncio.to_thread(call)


def synchronous(what: str, instead: str) -> None:
    """Refuse `what`, a durable call that talks to the database, on an event loop's thread (an
    `async def` handler): RuntimeError naming its async form `instead` (Django would refuse
    the query itself, with less to go on)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise RuntimeError(
        f"{what} reads and writes the database, which an async def handler does not do on its "
        f"event loop: use await ctx.{instead} instead"
    )


class DurableContext:
    """The durable calls of a handler's context (the base of `TaskContext`), each through
    `durable`; the ones that read or write the database refuse to run on an event loop's
    thread, where their `a`-prefixed forms are awaited instead."""

    # -- durable execution (docs/howto/durable.md) ----------------------------------------

    @functools.cached_property
    def durable(self) -> Durable:
        """This run's durable state: its task's recorded steps, read once when first asked."""
        from ..durable import Durable  # it reads models: imported once Django is set up

        return Durable(cast("Run", self))  # the TaskContext this is a base of

    @overload
    def step(self, name: str, /) -> StepBlock: ...

    @overload
    def step(self, name: str, func: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R: ...

    def step(
        self, name: str, func: Callable[..., Any] | None = None, /, *args: Any, **kwargs: Any
    ) -> Any:
        """A step named `name`, run at most once for this task whatever becomes of its runs:
        its result (JSON) is recorded in the transaction, fenced on the lease, that commits
        the writes made in it; a later run gets the recorded result instead.

        `ctx.step(name, func, *args)` runs `func(*args)` as the step and returns its result;
        `with ctx.step(name) as step:` is a block whose ORM writes and `step.result` commit
        together (it tests `step.done`: a Python block cannot be skipped); `@ctx.step(name)`
        makes a function a step. ValidationError for a bad name or a result that is not JSON
        within the result size limit (nothing is committed)."""
        from ..durable import StepBlock

        synchronous("ctx.step()", "astep(name, func)")
        block = StepBlock(cast("Run", self), name)
        if func is None:
            return block
        return block.run(func, *args, **kwargs)

    @property
    def steps(self) -> dict[str, Any]:
        """The results of the task's completed steps, by name, in the order they completed."""
        synchronous("ctx.steps", "asteps()")
        return self.durable.steps()

    @property
    def cursor(self) -> Any:
        """The task's cursor as last checkpointed (`checkpoint()`), None before the first."""
        synchronous("ctx.cursor", "acursor()")
        return self.durable.last_cursor()

    def checkpoint(self, cursor: Any, *, now: bool = False) -> None:
        """Record `cursor` (JSON: a row id, a page token, ...) as where a later run of this task
        takes up a long loop (`ctx.cursor`).

        Under a worker it is written with the worker's next heartbeat, in the same statement
        on PostgreSQL (fenced on the lease as the heartbeat is), so checkpointing at every row
        costs no statement of its own; a later checkpoint replaces one not written yet. It is
        written before the run ends too: when the worker gives the task back (a shutdown's
        yield), when the task sleeps or waits, and when the handler returns or raises. Only a
        killed worker loses it: the rows of one heartbeat interval are then processed again.
        `now=True` writes it at once, in a transaction of its own fenced on the lease, for a
        cursor that must be committed before the handler goes on (and so does every checkpoint
        outside a worker: `run_task`, a child process).

        ValidationError for a cursor that is not JSON within the result size limit; LeaseLost
        or TaskCancelled (nothing written) when the lease is not held any more."""
        synchronous("ctx.checkpoint()", "acheckpoint(cursor)")
        self.durable.checkpoint(cursor, now=now)

    def durable_sleep(self, duration: timedelta | float | str, *, name: str | None = None) -> None:
        """Sleep `duration` without holding the task: the task gives its lease back (no
        worker slot, no attempt spent; raises `Parked`, which ends this run) and runs again
        once the time has come, its completed steps returning their results at once; that
        run passes this call. A sleep is named by its order in the run (`sleep`, `sleep#2`,
        ...) unless given a `name`."""
        synchronous("ctx.durable_sleep()", "adurable_sleep(duration)")
        self.durable.sleep(duration, name)

    def wait_for(
        self,
        kind: str | None = None,
        *,
        match: Mapping[str, Any] | None = None,
        signal: str | None = None,
        timeout: timedelta | float | str | None = None,
        name: str | None = None,
        on_timeout: str = "return",
    ) -> Any:
        """Wait for an event of `kind` whose payload has every value of `match` (emitted with
        `scylla_django.emit()` once the wait began), or for the signal `signal` (sent before
        or after the wait began: `Task.signal()`, the API): return its payload. The task gives
        its lease back meanwhile (raises `Parked`, which ends this run) and runs again when
        woken or at `timeout`; that run returns here. On timeout: `TIMED_OUT` (false) with
        `on_timeout="return"`, `WaitTimedOut` raised with `"raise"`. A wait is named after
        what it waits for (`event:<kind>`, `signal:<name>`, numbered `#2`, ... when repeated
        in a run) unless given a `name`."""
        synchronous("ctx.wait_for()", "await_for(...)")
        return self.durable.wait_for(kind, match, signal, timeout, name, on_timeout)

    def signal_token(self, name: str) -> str:
        """A token that sends this task the signal `name` without other credentials (`POST
        /api/signals/{token}/`): hand it to an outside system as its completion URL."""
        return self.durable.signal_token(name)

    # -- durable execution in an `async def` handler ----------------------------------------

    async def astep(self, name: str, func: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """`ctx.step(name, func, *args)` for an `async def` handler: `func` may be a plain
        function (run on a thread of its own with the step's fenced transaction, so its ORM
        writes commit with the step) or an `async def` one (awaited here; its result is then
        recorded in a fenced transaction of its own, its writes apart)."""
        if not inspect.iscoroutinefunction(func):
            return await apart(self.step, name, func, *args, **kwargs)
        from ..durable import StepBlock

        block = StepBlock(cast("Run", self), name)
        found = await apart(lambda: self.durable.recorded().get(block.name))
        if found is not None:
            return found.result
        result = await func(*args, **kwargs)

        def record() -> Any:
            with block as step:
                step.result = result
            return step.result

        return await apart(record)

    async def acursor(self) -> Any:
        """`ctx.cursor` for an `async def` handler."""
        return await apart(lambda: self.cursor)

    async def asteps(self) -> dict[str, Any]:
        """`ctx.steps` for an `async def` handler."""
        return await apart(lambda: self.steps)

    async def acheckpoint(self, cursor: Any, *, now: bool = False) -> None:
        """`ctx.checkpoint(cursor)` for an `async def` handler."""
        await apart(self.checkpoint, cursor, now=now)

    async def adurable_sleep(
        self, duration: timedelta | float | str, *, name: str | None = None
    ) -> None:
        """`ctx.durable_sleep(duration)` for an `async def` handler."""
        await apart(self.durable_sleep, duration, name=name)

    async def await_for(
        self,
        kind: str | None = None,
        *,
        match: Mapping[str, Any] | None = None,
        signal: str | None = None,
        timeout: timedelta | float | str | None = None,
        name: str | None = None,
        on_timeout: str = "return",
    ) -> Any:
        """`ctx.wait_for(...)` for an `async def` handler (the `a` of Django's async methods)."""
        return await apart(
            lambda: self.wait_for(
                kind, match=match, signal=signal, timeout=timeout, name=name, on_timeout=on_timeout
            )
        )
