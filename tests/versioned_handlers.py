"""A handler at spec version 2 with its migration from version 1, for the real processes of
tests/runtime/test_spec_versions.py (`--handlers=tests.versioned_handlers`). The test process
does not import it: its submissions are yesterday's code's, at version 1."""

from __future__ import annotations

import os

from scylla_django import handler


@handler("deploy.process", version=2)
def report(ctx):
    return {"days": ctx.spec["days"], "version": ctx.task.version, "pid": os.getpid()}


@handler.migrates("deploy.process", from_version=1)
def weeks_to_days(spec):
    return {"days": spec["weeks"] * 7}
