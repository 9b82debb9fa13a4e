"""Durable execution, a handler's side (`docs/howto/durable.md`): steps whose results are
recorded with their writes and not run again, a cursor, durable sleeps and waits.

```python
@handler("imports")
def run_import(ctx):
    rows = ctx.step("download", download, ctx.spec["url"])  # once, whatever happens next
    with ctx.step("load") as step:
        if not step.done:  # a Python block always runs: a done step skips its work
            Row.objects.bulk_create(rows)
            step.result = len(rows)
    ctx.durable_sleep("1h")  # the task gives its lease back and comes back in an hour
    approval = ctx.wait_for(signal="approved", timeout="3d")
```

The records are the tables of `models/steps.py` and `models/waits.py`; every write is fenced
on the run's lease (owner and lease number, the task's row locked in the same transaction),
so a run whose lease was reset or taken over records nothing. A handler's run reads its
task's steps once, when it first asks.
"""

from __future__ import annotations

import functools
import logging
from collections import Counter
from collections.abc import Callable, Mapping
from datetime import timedelta
from types import TracebackType
from typing import TYPE_CHECKING, Any, NoReturn, ParamSpec, Protocol, TypeVar

from .exceptions import TIMED_OUT, Parked, ScyllaError, WaitTimedOut
from .models import Step, Wait, WaitKind, WaitOutcome
from .models.steps import (
    CURSOR,
    record_step,
    recorded,
    save_cursor,
    validate_cursor,
    validate_name,
)
from .models.waits import WaitFor, begin_wait, signal_token
from .schedules.events import validate_kind, validate_match
from .validation import validate_delay

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from .models import Task, Worker
    from .pending_checkpoint import PendingCheckpoint


class Run(Protocol):
    """What durable execution needs of a handler's run (`handlers.TaskContext` is one): its
    task and worker, its stop checks, its fenced blocks, and its `Durable` state."""

    task: Task
    worker: Worker
    pending_checkpoint: PendingCheckpoint
    bundled: bool

    @property
    def durable(self) -> Durable: ...

    @property
    def stopped(self) -> bool: ...

    def check(self) -> None: ...

    def stop(self, reason: ScyllaError) -> None: ...

    def fenced(self) -> AbstractContextManager[Any]: ...


logger = logging.getLogger("scylla_django")

P = ParamSpec("P")
R = TypeVar("R")

ON_TIMEOUT = ("return", "raise")


class Durable:
    """The durable state of one run of a handler: its task's recorded steps (read once) and
    the waits it named so far (a wait without a name is named by its order in the run)."""

    def __init__(self, ctx: Run) -> None:
        self.ctx = ctx
        self._steps: dict[str, Step] | None = None
        self._named: Counter[str] = Counter()

    def recorded(self) -> dict[str, Step]:
        if self._steps is None:
            self._steps = recorded(self.ctx.task)
        return self._steps

    def add(self, step: Step) -> None:
        self.recorded()[step.name] = step

    def auto_name(self, base: str) -> str:
        """`base` for the run's first wait so named, `base#2` for its second, and so on."""
        self._named[base] += 1
        count = self._named[base]
        return base if count == 1 else f"{base}#{count}"

    def steps(self) -> dict[str, Any]:
        """The completed steps' results by name, in the order they completed."""
        return {name: s.result for name, s in self.recorded().items() if name != CURSOR}

    def last_cursor(self) -> Any:
        found = self.recorded().get(CURSOR)
        return None if found is None else found.result

    def checkpoint(self, cursor: Any, *, now: bool) -> None:
        ctx = self.ctx
        ctx.check()
        value = validate_cursor(cursor)
        if now or not ctx.pending_checkpoint.rides_heartbeats:
            ctx.pending_checkpoint.take()  # replaced by this one
            self.add(save_cursor(ctx.task, ctx.worker, ctx.task.leases, value))
            return
        if not ctx.pending_checkpoint.keep(value):
            ctx.check()  # stopped meanwhile: raises its reason
        # Read back by `ctx.cursor` at once, written with the next heartbeat.
        self.add(Step(task_id=ctx.task.pk, name=CURSOR, result=value, lease=ctx.task.leases))

    def write_held(self) -> None:
        """Write the checkpoint kept for the heartbeat now, if any (fenced on the lease)."""
        ctx = self.ctx
        held = ctx.pending_checkpoint.take()
        if held is not None:
            save_cursor(ctx.task, ctx.worker, ctx.task.leases, held[0])

    def wait(self, wanted: WaitFor) -> Wait:
        """Begin or take up the wait `wanted`; raise Parked when the task was parked."""
        ctx = self.ctx
        if ctx.bundled:
            raise RuntimeError(
                "a durable sleep or wait parks its task alone, and a bundle handler runs its "
                "members together: wait in a plain handler (steps and checkpoints work in a "
                "bundle)"
            )
        ctx.check()
        self.write_held()  # the cursor the task resumes from, before it gives its lease back
        wait = begin_wait(ctx.task, ctx.worker, ctx.task.leases, wanted)
        if wait.outcome is None:
            self.park(wait)
        return wait

    def park(self, wait: Wait) -> NoReturn:
        stop = Parked(f"parked: {wait.name} waits for {wait.describe()}", rn=self.ctx.task.rn)
        self.ctx.stop(stop)
        raise stop

    def sleep(self, duration: timedelta | float | str, name: str | None) -> None:
        length = validate_delay(duration)
        named = validate_name(name, "sleep") if name is not None else self.auto_name("sleep")
        self.wait(WaitFor(named, WaitKind.SLEEP, duration=length))

    def wait_for(
        self,
        kind: str | None,
        match: Mapping[str, Any] | None,
        signal: str | None,
        timeout: timedelta | float | str | None,
        name: str | None,
        on_timeout: str,
    ) -> Any:
        if (kind is None) == (signal is None):
            raise TypeError("wait_for() waits for an event kind or a signal: name one of them")
        if on_timeout not in ON_TIMEOUT:
            raise ValueError(f"on_timeout is 'return' or 'raise', not {on_timeout!r}")
        duration = None if timeout is None else validate_delay(timeout)
        if kind is not None:
            wanted_match = validate_match(match)
            base = f"event:{validate_kind(kind)}"
            named = validate_name(name, "wait") if name is not None else self.auto_name(base)
            wanted = WaitFor(named, WaitKind.EVENT, duration, validate_kind(kind), wanted_match)
        else:
            if match:
                raise TypeError("match= applies to events; a signal is matched by its name")
            signal = validate_name(signal, "signal")
            base = f"signal:{signal}"
            named = validate_name(name, "wait") if name is not None else self.auto_name(base)
            wanted = WaitFor(named, WaitKind.SIGNAL, duration, signal=signal)
        wait = self.wait(wanted)
        if wait.outcome == WaitOutcome.TIMED_OUT:
            if on_timeout == "raise":
                raise WaitTimedOut(wait.name)
            return TIMED_OUT
        return wait.payload

    def signal_token(self, name: str) -> str:
        return signal_token(self.ctx.task, name)


class StepBlock:
    """A step of a handler (`ctx.step(name)`): a context manager whose block's writes and
    `result` commit together in one transaction fenced on the lease, a decorator, or a call
    (`ctx.step(name, func, *args)`).

    A step that completed in an earlier run is `done` on entry, with its recorded `result`: a
    Python block cannot be skipped, so a block tests `step.done`; the decorator and the call
    form skip the function themselves. A block left by an exception records nothing and
    commits nothing (the exception goes on). The result must be JSON within the result size
    limit (ValidationError, nothing committed).
    """

    def __init__(self, ctx: Run, name: str) -> None:
        self.ctx = ctx
        self.name = validate_name(name)
        self.result: Any = None
        self.done = False
        self._fence: Any = None

    def __enter__(self) -> StepBlock:
        found = self.ctx.durable.recorded().get(self.name)
        if found is not None:
            self.done, self.result = True, found.result
            return self
        self.ctx.check()
        fence = self.ctx.fenced()
        fence.__enter__()
        self._fence = fence
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool:
        fence, self._fence = self._fence, None
        if fence is None:
            return False
        if exc_type is not None:
            return bool(fence.__exit__(exc_type, exc, traceback))
        task = self.ctx.task
        try:
            step = record_step(task, task.leases, self.name, self.result)
        except BaseException as failed:
            fence.__exit__(type(failed), failed, failed.__traceback__)
            raise
        fence.__exit__(None, None, None)
        self.done, self.result = True, step.result
        self.ctx.durable.add(step)
        return False

    def run(self, func: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        """`func(*args, **kwargs)` as this step: its recorded result if it completed before."""
        with self as step:
            if not step.done:
                step.result = func(*args, **kwargs)
        result: R = self.result
        return result

    def __call__(self, func: Callable[P, R]) -> Callable[P, R]:
        """As a decorator: `func` made a step; each call runs it at most once per task."""

        @functools.wraps(func)
        def run(*args: P.args, **kwargs: P.kwargs) -> R:
            return StepBlock(self.ctx, self.name).run(func, *args, **kwargs)

        return run

    def __repr__(self) -> str:
        return f"<StepBlock {self.name}{' done' if self.done else ''}>"


def write_held_checkpoint(ctx: Run) -> None:
    """After a handler's run under a worker: write the checkpoint it kept for the heartbeat,
    if any and if the run was not stopped (a yield wrote it; a lost lease writes nothing), so
    that a snooze, a retry that resumes or a run that raised takes up the loop from it. A
    refusal or a database error is logged, not raised: the run's outcome goes on."""
    if ctx.stopped or not ctx.pending_checkpoint.waiting:
        return
    try:
        ctx.durable.write_held()
    except Exception as exc:  # the lease lost meanwhile, the database: the outcome tells
        logger.warning("%s: its last checkpoint was not written: %r", ctx.task.rn, exc)
