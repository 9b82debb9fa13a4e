"""Demo handlers, discovered by scylla_worker like every app's handlers.py."""

from __future__ import annotations

import random
import time
from typing import Any

from scylla_django import Abort, handler
from scylla_django.handlers import TaskContext


@handler("reports")
def build_report(ctx: TaskContext) -> dict[str, Any]:
    """Render a report in parts, reporting progress and stopping if cancelled."""
    parts = int(ctx.spec.get("parts", 5))
    for part in range(parts):
        ctx.check()  # raises if the task was cancelled or the lease was lost
        time.sleep(1)
        ctx.set_progress((part + 1) / parts)
    return {"report": ctx.spec.get("report"), "parts": parts}


@handler("emails")
def send_email(ctx: TaskContext) -> dict[str, Any]:
    """Pretend to send an email; addresses on example.org bounce (a deliberate abort)."""
    to = str(ctx.spec.get("to", ""))
    time.sleep(0.2)
    if to.endswith("@example.org"):
        raise Abort("bounced", f"{to} does not accept mail", args={"to": to})
    return {"sent": 1, "to": to}


@handler("flaky")
def flaky(ctx: TaskContext) -> dict[str, Any]:
    """Fail at random: the exception is recorded on the task as an `exception` error."""
    time.sleep(0.5)
    if random.random() < float(ctx.spec.get("fail_ratio", 0.3)):
        raise RuntimeError("the flaky service timed out")
    return {"ok": True}
