"""The row conditions a lease and its extensions read on a task row, as ORM expressions that
every driver and the models share: due, unexpired, not given back, and the deadline capped at
the run-time limit."""

from __future__ import annotations

from typing import Any

from django.db.models import DateTimeField, F, Q
from django.db.models.functions import Coalesce, Least

from .clock import Now


def due() -> Q:
    """A task whose `not_before` has passed (or that has none): leasable if it is ready."""
    return Q(not_before__isnull=True) | Q(not_before__lte=Now())


def unexpired() -> Q:
    """A task whose `expires_at` has not come (or that has none): a ready task past it is
    never leased, and the monitor cancels it (`TaskQuerySet.expire`)."""
    return Q(expires_at__isnull=True) | Q(expires_at__gt=Now())


# A yield is the only write that sets a task's deadline before its own `updated` time (but
# for a heartbeat capped at a limit already past, whose lease is over anyway), so a running
# task with `deadline >= updated` has not been given back. A heartbeat is fenced on this row
# condition rather than on History: PostgreSQL re-checks a row condition against the version a
# concurrent yield committed, so even a heartbeat already waiting for the row cannot undo a yield.
NOT_YIELDED = Q(deadline__gte=F("updated"))


def capped_deadline(extended: Any) -> Any:
    """The deadline a heartbeat writes: `extended` (a datetime expression), or the row's
    `timeout_at` if that is earlier: the run-time limit its lease was given (null: none), past
    which no heartbeat takes the lease. A lease that expires there ran into its limit: the
    monitor aborts its task with `timeout` (`reset_expired`), never makes it ready again."""
    return Least(extended, Coalesce(F("timeout_at"), extended), output_field=DateTimeField())
