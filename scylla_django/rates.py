"""Rates outside tasks: `consume("openai", n)` spends `n` starts of a rate from code that is not
a task (a web request, a script), on the same window the lease stamps the starts of the
rate's tasks on (`rate_key=`), so tasks and callers share one budget: in any period of the
rate, the starts of tasks and the units consumed together never exceed its count.

    from scylla_django import rates

    rates.consume("openai", tokens, wait=5)  # RateExceeded if no room within 5 seconds
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

from django.core.exceptions import ValidationError
from django.db import connections

from . import db
from .exceptions import RateExceeded
from .models.keys import MAX_RATE_COST, Rate, ensure_keys, unsupported, validate_rate


def consume(rate: object, n: int = 1, *, wait: float = 0.0, using: str | None = None) -> datetime:
    """Spend `n` units of rate `rate` (a name, or a key family's member `("api", 7)`) now;
    returns when they were spent, on the database clock.

    If the rate's window has no room for `n`, tries again as room frees (when the starts in
    its way age out of the window) for up to `wait` seconds, then raises RateExceeded, whose
    `retry_after` says when room is expected. ValidationError for an unknown rate (code
    `unknown_rate`) or a bad `n` (`invalid_cost`: an integer from 1 to the rate's count, which
    no window could ever hold more than); NotSupportedError on MySQL/MariaDB."""
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_RATE_COST:
        raise ValidationError(f"n is an integer from 1 to {MAX_RATE_COST}.", code="invalid_cost")
    if isinstance(wait, bool) or not isinstance(wait, (int, float)) or wait < 0:
        raise ValidationError("wait is a number of seconds, 0 or more.", code="invalid_wait")
    alias = using or "default"
    connection = connections[alias]
    if not db.keys.takes_keys(connection):
        raise unsupported()
    element = validate_rate(rate, alias)
    name = element[2:]
    ensure_keys([element], alias)
    count = Rate.objects.using(alias).filter(name=name).values_list("count", flat=True).first()
    if count is not None and n > count:
        raise ValidationError(
            f"n ({n}) is more than rate {name!r} allows in any period ({count}).",
            code="invalid_cost",
        )
    deadline = time.monotonic() + wait
    while True:
        with db.write_atomic(alias):
            stamp, retry_after = db.keys.consume_rate(connection, name, n)
        if stamp is not None:
            return datetime.fromtimestamp(stamp, UTC)
        left = deadline - time.monotonic()
        if left <= 0:
            raise RateExceeded(
                f"Rate {name!r} has no room for {n} now.", rate=name, retry_after=retry_after
            )
        # Sleep until the room is expected (not past the deadline), at least a little.
        time.sleep(min(left, max(retry_after, 0.01)))
