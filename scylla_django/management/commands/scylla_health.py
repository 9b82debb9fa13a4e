"""`manage.py scylla_health`: health checks with an exit status, for probes (Kubernetes)."""

from __future__ import annotations

import socket
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ...health import run_checks
from ..base import duration, queue_name


class Command(BaseCommand):
    help = (
        "Check health and exit 0 when every check passes, 1 when one fails (each check is "
        "printed on its own line), 2 for bad arguments. The database is always checked; "
        "--worker, --monitor, --max-lag, --served and --vacuum add checks (--served and "
        "--vacuum only warn, unless --max-horizon-age is given). For Kubernetes: a worker "
        "pod's liveness probe runs `scylla_health --worker`; an alerting job runs `--monitor "
        "--max-lag 5m --max-horizon-age 10m`."
    )
    # A probe runs often: skip the system checks, which a deployment has already passed.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--worker",
            action="store_true",
            help="a worker registered from this host is heartbeating (seen within two of its "
            "heartbeat intervals)",
        )
        parser.add_argument(
            "--hostname",
            default=None,
            help="with --worker: the host to look for (default: this host's name, "
            f"now {socket.gethostname()!r})",
        )
        parser.add_argument(
            "--monitor",
            action="store_true",
            help="a monitor made a pass within three of its intervals",
        )
        parser.add_argument(
            "--max-lag",
            type=duration,
            default=None,
            metavar="DURATION",
            help="no leasable ready task has waited longer than this (e.g. 30s, 5m)",
        )
        parser.add_argument(
            "--queue",
            dest="queues",
            action="append",
            type=queue_name,
            default=[],
            help="with --max-lag: only this queue (repeatable; default every queue)",
        )
        parser.add_argument(
            "--served",
            action="store_true",
            help="every queue with ready tasks has a live worker; a queue that none serves "
            "is a warning (printed, exit status unchanged), not a failure",
        )
        parser.add_argument(
            "--vacuum",
            action="store_true",
            help="PostgreSQL: name what holds VACUUM back from the queue tables (the oldest "
            "open transaction, its session and application_name), the sessions idle in a "
            "transaction, and the tables' dead rows and bloat; warns past a minute or 20%% dead "
            "rows ('not applicable' on other databases)",
        )
        parser.add_argument(
            "--max-horizon-age",
            type=duration,
            default=None,
            metavar="DURATION",
            help="with the --vacuum checks: fail when a transaction has held VACUUM back "
            "longer than this (e.g. 10m)",
        )
        parser.add_argument(
            "--database", default="default", help="the database alias (default 'default')"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["hostname"] is not None and not options["worker"]:
            raise CommandError("--hostname goes with --worker.", returncode=2)
        if options["queues"] and options["max_lag"] is None:
            raise CommandError("--queue goes with --max-lag.", returncode=2)
        checks = run_checks(
            options["database"],
            worker_host=(options["hostname"] or socket.gethostname())
            if options["worker"]
            else None,
            monitor=options["monitor"],
            max_lag=options["max_lag"],
            queues=options["queues"],
            served=options["served"],
            vacuum=options["vacuum"],
            max_horizon_age=options["max_horizon_age"],
        )
        for check in checks:
            word = "FAIL" if not check.ok else "WARN" if check.warning else "ok"
            line = f"{word} {check.name}: {check.detail}"
            (self.stdout if check.ok else self.stderr).write(line)
        failed = [check.name for check in checks if not check.ok]
        if failed:
            raise CommandError(f"unhealthy: {', '.join(failed)}", returncode=1)
