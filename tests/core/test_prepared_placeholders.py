"""The hot statements reach PostgreSQL with its own placeholders, split once per process."""

from __future__ import annotations

import pytest
from django.db import connection

from scylla_django.db import prepared
from scylla_django.models import Outcome, Task


def test_named_placeholders_become_numbers_and_a_repeated_name_one_number():
    written, params = prepared.native(
        "SELECT %(a)s, %(b)s, %(a)s WHERE x LIKE 'p%%'", {"b": 2, "a": 1, "unused": 3}
    )
    assert written == "SELECT $1, $2, $1 WHERE x LIKE 'p%'"
    assert params == [1, 2]


def test_positional_placeholders_keep_their_values():
    assert prepared.native("SELECT %s, %s", [1, None]) == ("SELECT $1, $2", [1, None])
    assert prepared.native("SELECT 1", None) == ("SELECT 1", None)
    # Without values nothing is a placeholder, as psycopg has it.
    assert prepared.native("SELECT '%%s'", None) == ("SELECT '%%s'", None)


@pytest.mark.parametrize(
    ("statement", "params", "error"),
    [
        ("SELECT %(a)s, %s", {"a": 1}, ValueError),  # both kinds
        ("SELECT %b", [1], ValueError),  # a binary placeholder: not ours
        ("SELECT %(a)s", [1], TypeError),  # named, given a list
        ("SELECT %s, %s", [1], TypeError),  # a value missing
        ("SELECT %(a)s", {"b": 1}, KeyError),
    ],
)
def test_a_statement_that_does_not_fit_its_values_is_refused(statement, params, error):
    with pytest.raises(error):
        prepared.native(statement, params)


def test_each_statement_is_split_once():
    prepared._native_query.cache_clear()
    for n in range(3):
        prepared.native("SELECT %(n)s AS split_once", {"n": n})
    info = prepared._native_query.cache_info()
    assert (info.misses, info.hits) == (1, 2)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_the_worker_s_statements_are_split_once_per_process_not_per_call(worker):
    connection.close()  # a new session: nothing prepared yet
    prepared._native_query.cache_clear()
    for n in range(3):
        Task.objects.submit("native", {"n": n}, rn=f"native-{n}")
    [first] = Task.objects.lease(worker, ["native"])
    _, [second] = Task.objects.finish_and_lease(
        worker, [Outcome(first.pk, first.leases, result={"ok": True})], ["native"]
    )
    _, [third] = Task.objects.finish_and_lease(
        worker, [Outcome(second.pk, second.leases, result=2)], ["native"]
    )
    info = prepared._native_query.cache_info()
    # submit, lease, finish-and-lease: each split on its first call only
    assert (info.misses, info.hits) == (3, 3)
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        hot = [row[0] for row in cursor.fetchall() if "scylla_django_task" in row[0]]
    assert len(hot) == 3 and all("$1" in s and "%(" not in s for s in hot)
    assert Task.objects.get(pk=first.pk).result == {"ok": True}
    assert Task.objects.get(pk=third.pk).status == "running"
