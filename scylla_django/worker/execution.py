"""Running a worker's handlers, from the handler's call to its task's outcome: the worker's face
of the runners, which hands each leased task to the one its handler needs.

- plain handlers run on handler threads (`handler_threads.py`), started as their tasks come
  and no thread is idle, up to `concurrency`, in child processes under `--isolation process`;
- `async def` ones run as coroutines on one event loop thread (`handler_loop.py`), up to
  `concurrency` at once, without a thread each;
- bundle handlers are called once per bundle on the thread of their queue's bundler
  (`bundle_call.py`).

Every runner makes its outcome in the same room (`outcomes.py`): what a handler's return or
raise becomes (an `Outcome`, or none for a task that was stopped), with its log and what the
run used, handed to the worker's outcome writer. A task run in the foreground (`scylla_run`,
the testing helpers, the eager mode) goes through that room too, on the caller's thread
(`foreground_call.py`, and `bundle_call.py` for a bundle handler).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..handlers import HandlerRegistry, TaskContext
from ..models import Outcome
from .bundle_call import BundleCall
from .handler_loop import HandlerLoop
from .handler_threads import HandlerThreads
from .hooks import WorkerHooks
from .isolation import Isolation
from .outcomes import OutcomeSink, RunOutcomes


class Execution:
    """Runs the handlers of `registry` for the tasks handed to `dispatch()`: plain handlers on
    up to `concurrency` threads, one task at a time each (a thread is started when a task
    comes and none is idle), `async def` ones on the event loop (started only when a queue of
    `queues` has an `async def` handler), up to `concurrency` at once, without a thread each.
    `run_bundle()` runs a bundle handler on the calling thread (a bundler's).

    With `isolation`, each thread runs its plain handlers in a child process of its own (see
    `isolation.py`). `after_task` is called on the handler's thread once each handler has
    run, before its outcome is written.
    """

    foreground = False
    """The watchdog gives up a handler that runs on past its stop (see `abandon`)."""

    def __init__(
        self,
        registry: HandlerRegistry,
        queues: Sequence[str],
        concurrency: int,
        using: str,
        name: Callable[[], str],
        *,
        isolation: Isolation | None = None,
        after_task: Callable[[], None] | None = None,
        hooks: WorkerHooks | None = None,
    ) -> None:
        self.outcomes = RunOutcomes(registry, name, hooks=hooks)
        self.hooks = self.outcomes.hooks
        self.isolation = isolation
        self._threads = HandlerThreads(
            self.outcomes, concurrency, using, isolation=isolation, after_task=after_task
        )
        self._loop = HandlerLoop(self.outcomes, queues, concurrency, after_task=after_task)
        self._bundles = BundleCall(self.outcomes)

    def start(self, sink: OutcomeSink) -> None:
        """Get ready to run handlers (start the event loop, if any handler is `async def`),
        sending outcomes to `sink`. Handler threads start as plain handlers' tasks come."""
        self.outcomes.send_to(sink)
        self._loop.start()

    def stop(self) -> None:
        """Let each handler thread end once its task is done (no more tasks come); kill the
        child processes still running a task."""
        self._threads.stop()

    def stop_loop(self) -> None:
        """Stop the event loop, if there is one."""
        self._loop.stop()

    @property
    def sink(self) -> OutcomeSink:
        return self.outcomes.sink

    def runs_on_loop(self, ctx: TaskContext) -> bool:
        """Whether `ctx`'s handler is an `async def` run on the event loop."""
        return self._loop.runs(ctx)

    def dispatch(self, ctx: TaskContext) -> None:
        """Hand a leased task to a handler thread, or to the event loop."""
        if self._loop.runs(ctx):
            self._loop.dispatch(ctx)
        else:
            self._threads.put(ctx)

    def waiting(self) -> int:
        """Tasks dispatched to the handler threads that no thread has taken yet."""
        return self._threads.waiting()

    def abandon(self, ctx: TaskContext) -> None:
        """Leave `ctx`'s handler to itself (the watchdog ended its task): an `async def` one is
        cancelled; a thread cannot be killed, so another handler thread takes its place and it
        ends once its handler returns, if ever."""
        if not self._loop.cancel(ctx):
            self._threads.abandon()

    def run_bundle(self, contexts: Sequence[TaskContext]) -> list[tuple[TaskContext, Outcome]]:
        """Call the bundle handler of the members' queue once, on this thread, and return the
        outcome of each member that gets one (`BundleCall.run`)."""
        return self._bundles.run(contexts)
