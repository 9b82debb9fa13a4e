#!/usr/bin/env python3
"""A Scylla worker that talks to the HTTP API alone: Python's standard library, no Django.

It is what a worker in any language does:

1. ``POST workers/`` registers it; the answer's ``name`` (``worker-<n>``) is who it is.
2. ``POST workers/<name>/lease/`` leases as many tasks as it has free slots (pull model).
3. Each task runs in a thread. A heartbeat thread sends ``POST tasks/<rn>/heartbeat/`` for every
   task in flight, with its progress, well before the lease expires. Every call about a task
   names the lease it holds: ``worker`` and ``lease`` (the task's ``leases`` as leased). A
   409 ``task_cancelled`` or ``lease_lost`` means: stop working on that task and write nothing
   more for it.
4. ``POST tasks/<rn>/complete/`` with the handler's result, or ``tasks/<rn>/abort/`` with the
   error it raised.
5. On SIGTERM or SIGINT it stops leasing, gives its tasks back with ``POST tasks/<rn>/yield/``
   (another worker gets them after the monitor's next pass) and exits.

The built-in handler sleeps ``spec["seconds"]`` (reporting progress), fails if ``spec["fail"]``
is set, and returns ``{"echo": spec}``.

Usage (the token of a user with the permission "Can lease and finish tasks as a worker"):

    SCYLLA_TOKEN=<key> python examples/http_worker.py \\
        --url http://127.0.0.1:8000/api/scylla/ --queue emails --concurrency 4

Exit status: 0 after a graceful stop or ``--max-tasks``, 1 if the API refused to register it.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

logger = logging.getLogger("http_worker")

STOP_CODES = frozenset({"task_cancelled", "lease_lost", "invalid_transition", "task_not_found"})


class ApiError(Exception):
    """The API answered with an error: `status` and the `{code, detail}` it sent."""

    def __init__(self, status: int, code: str, detail: str) -> None:
        super().__init__(f"{status} {code}: {detail}")
        self.status = status
        self.code = code


class Api:
    """JSON over HTTP with a token, relative to the API's base URL."""

    def __init__(self, url: str, token: str, timeout: float = 10.0) -> None:
        self.url = url.rstrip("/") + "/"
        self.token = token
        self.timeout = timeout

    def post(self, path: str, body: Any) -> Any:
        request = urllib.request.Request(
            self.url + path,
            data=json.dumps(body).encode(),
            method="POST",
            headers={
                "Authorization": f"Token {self.token}",
                "Content-Type": "application/json",
                "Accept": "application/json",
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return json.load(response)
        except urllib.error.HTTPError as exc:
            try:
                error = json.load(exc)
            except ValueError:
                error = {}
            raise ApiError(
                exc.code, error.get("code", "http_error"), error.get("detail", str(exc))
            ) from None


class Stopped(Exception):
    """Raised in a handler whose task must stop (cancelled, lease lost, or yielded)."""


class Job:
    """A leased task in flight: its progress, and why it must stop, if it must."""

    def __init__(self, task: dict[str, Any]) -> None:
        self.task = task
        self.rn: str = task["rn"]
        self.lease: int = task["leases"]  # which lease of the task this is
        self.progress: float = task.get("progress", 0.0)
        self.stop_reason: str | None = None
        self.failed_heartbeats = 0
        self.thread: threading.Thread | None = None

    def check(self) -> None:
        """Raise Stopped if the task must stop (handlers call this between steps)."""
        if self.stop_reason is not None:
            raise Stopped(self.stop_reason)


def handle(job: Job) -> Any:
    """The built-in handler: sleep `spec["seconds"]`, fail on `spec["fail"]`, echo the spec."""
    spec = job.task["spec"]
    options = spec if isinstance(spec, dict) else {}
    seconds = float(options.get("seconds", 0))
    started = time.monotonic()
    while (elapsed := time.monotonic() - started) < seconds:
        job.check()
        job.progress = round(min(elapsed / seconds, 0.99), 3)
        time.sleep(min(0.1, seconds - elapsed))
    job.check()
    if options.get("fail"):
        raise RuntimeError(str(options["fail"]))
    return {"echo": spec}


class HttpWorker:
    """Lease, run, heartbeat and finish tasks through the API until stopped."""

    def __init__(
        self,
        api: Api,
        queues: Sequence[str],
        *,
        concurrency: int = 1,
        lease_length: float = 30.0,
        heartbeat_interval: float | None = None,
        poll_interval: float = 1.0,
        max_tasks: int | None = None,
        heartbeat_failures: int = 3,
    ) -> None:
        self.api = api
        self.queues = list(queues)
        self.concurrency = concurrency
        self.lease_length = lease_length
        # None: the server's default, a quarter of the lease (read back from registration).
        self.heartbeat_interval = heartbeat_interval
        self.poll_interval = poll_interval
        self.max_tasks = max_tasks
        self.heartbeat_failures = heartbeat_failures
        self.name = ""
        self.jobs: dict[str, Job] = {}
        self.finished = 0
        self.lock = threading.Lock()
        self.stopping = threading.Event()

    def run(self) -> int:
        """Register, then work until a signal or `max_tasks`; return the exit status."""
        try:
            worker = self.api.post(
                "workers/",
                {
                    "queues": self.queues,
                    "capacity": self.concurrency,
                    "hostname": socket.gethostname()[:255],
                    "pid": os.getpid(),
                    "lease_length": self.lease_length,
                    **(
                        {}
                        if self.heartbeat_interval is None
                        else {"heartbeat_interval": self.heartbeat_interval}
                    ),
                },
            )
        except ApiError as exc:
            logger.error("could not register: %s", exc)
            return 1
        self.name = worker["name"]
        self.heartbeat_interval = float(worker["heartbeat_interval"])
        logger.info("%s working on %s", self.name, ", ".join(self.queues))
        beat = threading.Thread(target=self.heartbeat_loop, name="heartbeat", daemon=True)
        beat.start()
        while not self.stopping.is_set():
            self.lease_some()
        self.shut_down()
        beat.join()
        logger.info("%s stopped after %d task(s)", self.name, self.finished)
        return 0

    def lease_some(self) -> None:
        with self.lock:
            free = self.concurrency - len(self.jobs)
        if self.max_tasks is not None:
            free = min(free, self.max_tasks - self.finished - len(self.jobs))
        tasks: list[dict[str, Any]] = []
        if free > 0:
            try:
                answer = self.api.post(
                    f"workers/{self.name}/lease/",
                    {"queues": self.queues, "limit": free, "lease_length": self.lease_length},
                )
                tasks = answer["tasks"]
            except (ApiError, OSError) as exc:
                logger.warning("lease failed: %s", exc)
        for task in tasks:
            job = Job(task)
            job.thread = threading.Thread(target=self.work, args=(job,), name=job.rn)
            with self.lock:
                self.jobs[job.rn] = job
            job.thread.start()
        if not tasks:
            self.stopping.wait(self.poll_interval)

    def work(self, job: Job) -> None:
        logger.info("%s runs %s", self.name, job.rn)
        outcome: tuple[str, dict[str, Any]] | None
        try:
            outcome = ("complete", {"result": handle(job)})
        except Stopped as stop:
            logger.info("%s stops %s: %s", self.name, job.rn, stop)
            outcome = None
        except Exception as exc:
            error = {
                "code": "exception",
                "args": {"type": type(exc).__name__},
                "description": str(exc)[:500],
            }
            outcome = ("abort", {"errors": [error]})
        if outcome is not None and job.stop_reason is None:
            action, body = outcome
            try:
                self.api.post(
                    f"tasks/{job.rn}/{action}/",
                    {"worker": self.name, "lease": job.lease, **body},
                )
                logger.info("%s: %s %s", self.name, action, job.rn)
            except (ApiError, OSError) as exc:
                logger.warning("%s could not %s %s: %s", self.name, action, job.rn, exc)
        with self.lock:
            del self.jobs[job.rn]
            self.finished += 1
            if self.max_tasks is not None and self.finished >= self.max_tasks:
                self.stopping.set()

    def heartbeat_loop(self) -> None:
        while not self.stopping.wait(self.heartbeat_interval):
            with self.lock:
                jobs = [job for job in self.jobs.values() if job.stop_reason is None]
            for job in jobs:
                self.heartbeat(job)

    def heartbeat(self, job: Job) -> None:
        body = {
            "worker": self.name,
            "lease": job.lease,
            "progress": job.progress,
            "lease_length": self.lease_length,
        }
        try:
            self.api.post(f"tasks/{job.rn}/heartbeat/", body)
            job.failed_heartbeats = 0
        except ApiError as exc:
            if exc.code in STOP_CODES:
                job.stop_reason = exc.code
            else:
                self.heartbeat_failed(job, exc)
        except OSError as exc:
            self.heartbeat_failed(job, exc)

    def heartbeat_failed(self, job: Job, exc: Exception) -> None:
        job.failed_heartbeats += 1
        logger.warning("heartbeat of %s failed (%d): %s", job.rn, job.failed_heartbeats, exc)
        if job.failed_heartbeats >= self.heartbeat_failures:
            job.stop_reason = "heartbeat_failed"  # do not run on unsupervised

    def shut_down(self) -> None:
        """Give back the tasks still running, and wait for their threads."""
        with self.lock:
            jobs = list(self.jobs.values())
        for job in jobs:
            if job.stop_reason is not None:
                continue
            job.stop_reason = "yielded"
            try:
                self.api.post(f"tasks/{job.rn}/yield/", {"worker": self.name, "lease": job.lease})
                logger.info("%s yielded %s", self.name, job.rn)
            except (ApiError, OSError) as exc:
                logger.warning("%s could not yield %s: %s", self.name, job.rn, exc)
        for job in jobs:
            if job.thread is not None:
                job.thread.join()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--url", required=True, help="the API's base URL, .../api/scylla/")
    parser.add_argument(
        "--token",
        default=os.environ.get("SCYLLA_TOKEN"),
        help="API token (default: $SCYLLA_TOKEN)",
    )
    parser.add_argument("--queue", action="append", required=True, help="repeat for more")
    parser.add_argument("--concurrency", type=int, default=1, help="tasks at once")
    parser.add_argument("--lease-length", type=float, default=30.0, help="seconds")
    parser.add_argument(
        "--heartbeat-interval",
        type=float,
        default=None,
        help="seconds (default: a quarter of the lease length, as the server says)",
    )
    parser.add_argument("--poll-interval", type=float, default=1.0, help="seconds when idle")
    parser.add_argument("--max-tasks", type=int, default=None, help="exit after this many")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    if not args.token:
        parser.error("give --token or set SCYLLA_TOKEN")
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(message)s",
    )
    worker = HttpWorker(
        Api(args.url, args.token),
        args.queue,
        concurrency=args.concurrency,
        lease_length=args.lease_length,
        heartbeat_interval=args.heartbeat_interval,
        poll_interval=args.poll_interval,
        max_tasks=args.max_tasks,
    )
    # No signal handler: one runs in the main thread wherever that thread is, maybe holding the
    # lock of the very Event it would set. The stop signals are blocked here, before any other
    # thread starts (they inherit it), and one thread waits for them.
    stops = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, stops)

    def stop_on_signal() -> None:
        signal.sigwait(stops)
        worker.stopping.set()

    threading.Thread(target=stop_on_signal, name="stop-signals", daemon=True).start()
    return worker.run()


if __name__ == "__main__":
    sys.exit(main())
