"""A forgotten `migrate`: the worker and the monitor keep retrying (a `migrate` meanwhile lets
them start), and every warning says what to do, naming `manage.py migrate`."""

from __future__ import annotations

import signal

import pytest
from django.db import DatabaseError, connection

from scylla_django.db import migrate_hint
from tests.processes import finish, start, wait_until

HINT = "the scylla_django tables are missing or out of date: run `python manage.py migrate`"


@pytest.mark.django_db
@pytest.mark.parametrize(
    "query",
    # As the ORM writes them: the column named with its table.
    [
        "SELECT scylla_django_nothing.id FROM scylla_django_nothing",
        "SELECT scylla_django_task.gone FROM scylla_django_task",
    ],
    ids=["table", "column"],
)
def test_this_database_s_words_for_a_missing_table_or_column_get_the_hint(query):
    with pytest.raises(DatabaseError) as raised, connection.cursor() as cursor:
        cursor.execute(query)
    assert migrate_hint(raised.value) == f" ({HINT})"


def test_other_errors_get_no_hint():
    assert migrate_hint(DatabaseError("connection refused")) == ""
    assert migrate_hint(DatabaseError('relation "myapp_order" does not exist')) == ""


def output_of(process) -> str:
    process.output.seek(0)
    return str(process.output.read())


@pytest.mark.parametrize(
    "command",
    [
        ["scylla_worker", "--queue", "t-echo", "--handlers", "tests.worker_handlers"],
        ["scylla_monitor", "--interval", "1"],
    ],
    ids=["worker", "monitor"],
)
def test_a_worker_or_monitor_on_a_database_never_migrated_says_to_migrate(tmp_path, command):
    empty = f"sqlite:///{tmp_path / 'never-migrated.sqlite3'}"
    process = start(*command, env={"DATABASE_URL": empty})
    try:
        wait_until(lambda: HINT in output_of(process), what="the hint in the log")
    finally:
        process.send_signal(signal.SIGINT)
        code, output = finish(process, timeout=60)
    assert "no such table: scylla_django_" in output
    assert code == 0, output
