"""Retrying a database call that failed: the one helper of every loop that outlives an outage.

A loop (the monitor's passes, the listener's connection, a worker's calls) that meets a
database error counts it, drops its connection, waits, and tries again; a success resets the
count. `DatabaseRetry` holds that count and does all but the waiting and the logging, which
each loop words and times its own way:

```python
retry = DatabaseRetry(using)
while not stop.is_set():
    try:
        work()
    except DatabaseError as exc:
        wait = retry.failed()
        logger.warning("… failed (%s); retrying in %gs", exc, wait)
        stop.wait(wait)
        continue
    if retry.succeeded():
        logger.info("the database is back")
```
"""

from __future__ import annotations

from collections.abc import Callable

from ..retries import database_retry_delay
from .connections import discard_connection

#: What the databases say of a table or column that is not there (SQLite, PostgreSQL, MariaDB).
_MISSING = ("no such table", "no such column", "does not exist", "doesn't exist", "unknown column")


def migrate_hint(exc: BaseException) -> str:
    """What to do when `exc` says a table or column of scylla_django is missing (`migrate` was
    forgotten, or not run after an upgrade): a hint naming `manage.py migrate`, to append to
    the loop's warning; "" for any other error."""
    text = str(exc).lower()
    if "scylla_django_" in text and any(words in text for words in _MISSING):
        return (
            " (the scylla_django tables are missing or out of date: run `python manage.py migrate`)"
        )
    return ""


class DatabaseRetry:
    """The consecutive failures of one loop's database call, and the wait before the next try.

    - `using`: the database alias whose connection (this thread's) a failure drops; None for a
      loop that holds no Django connection (the listener's own).
    - `delay`: seconds to wait after n failures in a row; `retries.database_retry_delay` (0.1 s
      doubling to 1 s) unless the loop has a backoff of its own.
    """

    def __init__(
        self, using: str | None = None, delay: Callable[[int], float] = database_retry_delay
    ) -> None:
        self.using = using
        self.delay = delay
        self.failures = 0
        """Failures in a row, since the last success."""

    def failed(self) -> float:
        """Count a failure, drop the broken connection of `using`, and return the seconds to
        wait before trying again."""
        self.failures += 1
        if self.using is not None:
            discard_connection(self.using)
        return self.delay(self.failures)

    def succeeded(self) -> int:
        """Reset the count after a success; return the failures in a row it ended (0: none)."""
        failures, self.failures = self.failures, 0
        return failures
