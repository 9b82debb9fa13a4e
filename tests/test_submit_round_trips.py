"""Submission on PostgreSQL: one statement in autocommit, duplicates found by the statement."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scylla_django.exceptions import DuplicateTask
from scylla_django.models import Task
from scylla_django.retries import Fixed, Retry

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@contextmanager
def round_trips() -> Iterator[tuple[list[str], list[bool]]]:
    """The statements run, and every autocommit switch (a BEGIN/COMMIT pair), in the block."""
    switches: list[bool] = []
    original = connection.set_autocommit

    def spy(autocommit: bool, *args: object, **kwargs: object) -> None:
        switches.append(autocommit)
        original(autocommit, *args, **kwargs)  # type: ignore[arg-type]

    connection.ensure_connection()
    connection.set_autocommit = spy  # type: ignore[method-assign]
    try:
        with CaptureQueriesContext(connection) as captured:
            statements: list[str] = []
            yield statements, switches
        statements += [q["sql"] for q in captured.captured_queries]
    finally:
        del connection.set_autocommit


def test_submit_is_one_statement_without_a_transaction_block():
    with round_trips() as (statements, switches):
        task = Task.objects.submit("one", {"n": 1}, rn="single")
    assert len(statements) == 1 and switches == []
    assert statements[0].lstrip().upper().startswith("WITH")
    stored = Task.objects.get(rn="single")
    assert (task.pk, task.created, task.updated) == (stored.pk, stored.created, stored.updated)
    assert not task._state.adding and task._state.db == "default"


def test_submit_with_a_retry_policy_is_still_one_statement():
    policy = Retry(max_attempts=3, backoff=Fixed(5))
    with round_trips() as (statements, switches):
        Task.objects.submit("one", {}, rn="with-retry", retry=policy)
    assert len(statements) == 1 and switches == []
    assert Task.objects.get(rn="with-retry").retry_policy == policy.as_json()


def test_a_duplicate_submission_is_detected_by_the_same_statement():
    Task.objects.submit("one", {"n": 1}, rn="twice")
    with round_trips() as (statements, switches), pytest.raises(DuplicateTask):
        Task.objects.submit("one", {"n": 2}, rn="twice")
    assert len(statements) == 1 and switches == []
    assert Task.objects.get(rn="twice").spec == {"n": 1}


def test_submit_many_inserts_thousands_in_one_statement_with_per_item_outcomes():
    Task.objects.submit("bulk", {}, rn="bulk-0007")
    items = [{"queue": "bulk", "spec": {"n": n}, "rn": f"bulk-{n:04d}"} for n in range(2000)]
    items[10] = {"queue": "bad queue", "spec": {}}
    with round_trips() as (statements, switches):
        outcomes = Task.objects.submit_many(items)
    assert len(statements) == 1 and switches == []
    kinds = [o.outcome for o in outcomes]
    assert kinds[7] == "duplicate" and kinds[10] == "invalid"
    assert kinds.count("inserted") == 1998
    assert Task.objects.filter(queue="bulk").count() == 1999
    assert Task.objects.get(rn="bulk-1999").spec == {"n": 1999}
