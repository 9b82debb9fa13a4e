"""Fair shares: the value of the key a task's queue shares its capacity by (`Task.fair_key`),
given at submit (`fair_key=`) or by a member of the queue's key family the task names
(`limits=[("tenant", 42)]`). The turn the value gives the task is the database's (a trigger,
`db.fairness`); the lease only orders by it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import suppress
from typing import Any

from django.core.exceptions import ValidationError
from django.db import NotSupportedError, connections

from .. import db
from ..validation import key_name
from .keys import rate_parts_of

#: The longest value of a fair key.
FAIR_KEY_MAX_LENGTH = 200


def fair_value(
    queue: str | None,
    fair_key: object,
    limits: object,
    rate_key: object,
    order_key: object,
    using: str | None = None,
) -> str | None:
    """The task's fair key value: `fair_key` (text, an integer, or `(family, value)`), else
    the value of the first member of `queue`'s key family (`QueueSetting.fair_key`) named in
    `limits`, `rate_key` or `order_key`; None if neither. ValidationError naming `fair_key`;
    NotSupportedError on a database without the turn trigger (MySQL/MariaDB)."""
    if fair_key is not None:
        try:
            value = _value(fair_key)
        except ValidationError as exc:
            raise ValidationError({"fair_key": exc}) from None
    else:
        members = list(_members(limits, rate_key, order_key))
        if not members or queue is None:
            return None
        from .queues import QueueSetting

        family = (
            QueueSetting.objects.using(using)
            .filter(queue=queue)
            .values_list("fair_key", flat=True)
            .first()
        )
        found = next((str(m) for f, m in members if f == family), None)
        if found is None:
            return None
        value = found
    if not db.fairness.takes_turns(connections[using or "default"]):
        raise NotSupportedError(
            "Fair shares need the turn trigger of PostgreSQL or SQLite, which this database "
            "(MySQL/MariaDB) lacks; submit without fair_key."
        )
    return value


def _value(fair_key: object) -> str:
    """The value of `fair_key`: text or an integer, or the member of `(family, member)`."""
    if isinstance(fair_key, (tuple, list)) and len(fair_key) == 2:
        key_name(fair_key[0], "fair_key")
        fair_key = fair_key[1]
    if isinstance(fair_key, int) and not isinstance(fair_key, bool):
        fair_key = str(fair_key)
    if not isinstance(fair_key, str):
        raise ValidationError(
            "fair_key is a key value (text or an integer) or (family, value).",
            code="invalid_key",
        )
    return key_name(fair_key, "fair_key")


def _members(limits: object, rate_key: object, order_key: object) -> Iterator[tuple[Any, Any]]:
    """The key family members `(family, member)` named in `limits`, `rate_key` and
    `order_key` (not validated: the keys are, after)."""
    named: list[object] = []
    if isinstance(limits, (list, tuple)):
        named += limits
    if rate_key is not None:
        with suppress(ValidationError):  # a bad rate_key is said by the keys' validation
            named.append(rate_parts_of(rate_key)[0])
    named.append(order_key)
    for item in named:
        if isinstance(item, (tuple, list)) and len(item) == 2:
            yield item[0], item[1]
