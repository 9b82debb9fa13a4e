"""What holds VACUUM back, on every health surface: `scylla_health --vacuum`, `/metrics`, the
dashboard and `GET /health/?vacuum=true` name a real session left idle in a transaction (a
second connection, with its own application_name); the tables' dead rows and bloat are read
from PostgreSQL's statistics; the system check W007 warns when sessions get no
`idle_in_transaction_session_timeout`. Elsewhere each surface says "not applicable"."""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from django.core import checks
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.urls import reverse
from prometheus_client.parser import text_string_to_metric_families
from rest_framework.test import APIClient

from scylla_django import db
from scylla_django import health as health_module
from scylla_django.checks import check_idle_in_transaction_timeout
from scylla_django.db import vacuum as db_vacuum
from scylla_django.models import Task, queue_tables
from tests.factories import TaskFactory
from tests.helpers import API, staff

REPORT = "analytics-report"
DASHBOARD = reverse("admin:scylla_django_task_dashboard")


def health(*args: str) -> tuple[int, str]:
    """`scylla_health` in-process: (exit status, stdout + stderr)."""
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command("scylla_health", *args, stdout=out, stderr=err)
    except CommandError as exc:
        return exc.returncode, out.getvalue() + err.getvalue() + str(exc)
    return 0, out.getvalue() + err.getvalue()


def scrape(client) -> dict[str, list]:
    """The samples of `/metrics`, by metric family."""
    body = client.get("/metrics").content.decode()
    return {family.name: family.samples for family in text_string_to_metric_families(body)}


def connect(name: str) -> psycopg.Connection:
    """Another connection to the test database, its application name `name`."""
    settings = connection.settings_dict
    return psycopg.connect(
        host=settings["HOST"] or None,
        port=settings["PORT"] or None,
        user=settings["USER"] or None,
        password=settings["PASSWORD"] or None,
        dbname=settings["NAME"],
        application_name=name,
    )


@pytest.fixture
def idle_session(db) -> Iterator[int]:
    """A second connection to the test database, named REPORT, idle in a REPEATABLE READ
    transaction that holds a transaction id: what an analytics report left open does. Its pid."""
    held = connect(REPORT)
    try:
        held.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        held.execute("SELECT count(*) FROM scylla_django_task").fetchone()
        held.execute("SELECT txid_current()").fetchone()
        yield held.info.backend_pid
    finally:
        held.close()


@pytest.mark.postgres
def test_scylla_health_names_the_session_that_holds_vacuum_back(idle_session):
    code, output = health("--vacuum")
    assert code == 0, output
    horizon = next(line for line in output.splitlines() if "horizon:" in line)
    assert f"session {idle_session} ({REPORT}, idle in transaction)" in horizon
    assert horizon.startswith("ok horizon: the oldest transaction holding back vacuum is")
    idle = next(line for line in output.splitlines() if "idle_in_transaction:" in line)
    assert f"session {idle_session} ({REPORT})" in idle and "holding back vacuum" in idle


@pytest.mark.postgres
def test_the_holder_named_is_the_transaction_the_others_snapshots_wait_on(db):
    """Every snapshot taken while a transaction holds its id has that id as its xmin: a
    session that began later, with a lower pid, is as old by that measure. The report names
    the one whose transaction began first, the one to end."""
    later = connect("later-reader")  # connected first: the lower pid, as a rule
    pin = connect(REPORT)
    try:
        pin.execute("BEGIN")
        pin.execute("SELECT txid_current()").fetchone()
        later.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        later.execute("SELECT count(*) FROM scylla_django_task").fetchone()
        report = db_vacuum.vacuum_report("default", [Task._meta.db_table])
        assert report is not None and report.oldest is not None
        ages = {h.pid: h.transactions for h in report.holders}
        pin_pid, later_pid = pin.info.backend_pid, later.info.backend_pid
        assert pin_pid in ages and later_pid in ages, report.holders
        if ages[later_pid] == ages[pin_pid]:  # the reader's xmin is the pin's id: a tie
            assert report.oldest.pid == pin_pid, report.holders
        else:
            # A transaction of another database on the server (another test's) was older
            # than the pin when the reader took its snapshot: the reader's xmin is that one,
            # and the reader is the older holder indeed.
            assert ages[later_pid] > ages[pin_pid]
            assert report.oldest.pid == later_pid, report.holders
    finally:
        later.close()
        pin.close()


@pytest.mark.postgres
def test_a_maximum_horizon_age_makes_it_a_failure(idle_session):
    code, output = health("--max-horizon-age", "0.001s")
    assert code == 1
    failed = f"FAIL horizon: the oldest transaction holding back vacuum is session {idle_session}"
    assert failed in output
    assert "unhealthy: horizon" in output
    # Nothing older than a day holds it: the same check passes.
    assert health("--max-horizon-age", "1d")[0] == 0


@pytest.mark.postgres
def test_the_metrics_name_the_session_in_one_scrape(client, idle_session):
    samples = scrape(client)
    [oldest] = samples["scylla_vacuum_horizon_age_seconds"]
    assert oldest.labels == {
        "kind": "session",
        "pid": str(idle_session),
        "application_name": REPORT,
        "state": "idle in transaction",
    }
    assert oldest.value >= 0
    [behind] = samples["scylla_vacuum_horizon_transactions"]
    assert behind.labels == oldest.labels and behind.value >= 0
    [count] = samples["scylla_idle_in_transaction_sessions"]
    assert count.value == 1
    [idle] = samples["scylla_idle_in_transaction_seconds"]
    assert idle.labels == {
        "pid": str(idle_session),
        "application_name": REPORT,
        "holds_horizon": "1",
    }
    tables = {s.labels["table"] for s in samples["scylla_table_dead_rows"]}
    assert Task._meta.db_table in tables and set(queue_tables()) >= tables


@pytest.mark.postgres
def test_the_dashboard_names_the_session(idle_session):
    html = staff("view_task").get(DASHBOARD).content.decode()
    assert 'id="scylla-vacuum"' in html
    assert f"session {idle_session} ({REPORT}, idle in transaction)" in html
    assert f'<th scope="row">{idle_session}</th>\n          <td>{REPORT}</td>' in html


@pytest.mark.postgres
def test_the_health_route_names_it_too(idle_session):
    response = APIClient().get(f"{API}/health/", {"vacuum": "true"})
    assert response.status_code == 200, response.content
    checks_by_name = {check["name"]: check for check in response.json()["checks"]}
    assert REPORT in checks_by_name["horizon"]["detail"]
    assert REPORT in checks_by_name["idle_in_transaction"]["detail"]


@pytest.mark.postgres
def test_nothing_holds_vacuum_back_without_the_session(db):
    report = db_report()
    assert report.oldest is None and report.idle == [] and report.idle_count == 0
    code, output = health("--vacuum")
    assert code == 0
    assert "ok horizon: nothing holds VACUUM back" in output
    assert "ok idle_in_transaction: no session is idle in a transaction" in output


def db_report() -> db.VacuumReport:
    report = db.vacuum_report("default", queue_tables())
    assert report is not None
    return report


def flush_statistics() -> None:
    """Send this session's table statistics now (they are sent when it goes idle, at most once
    a second otherwise)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")


@pytest.fixture
def no_autovacuum(transactional_db) -> Iterator[None]:
    """Autovacuum kept off the task table, whose dead rows a test counts, and the table emptied
    of the dead rows earlier tests left (a rolled-back insert leaves one)."""
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE scylla_django_task SET (autovacuum_enabled = false)")
        cursor.execute("TRUNCATE scylla_django_task CASCADE")
    yield
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE scylla_django_task RESET (autovacuum_enabled)")


@pytest.mark.postgres
def test_dead_rows_and_bloat_of_the_task_table(no_autovacuum):
    TaskFactory.create_batch(2000, queue="bloat")
    flush_statistics()  # before ANALYZE, which sets the live count: nothing is added later
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE scylla_django_task")
    flush_statistics()
    [fresh] = [t for t in db_report().tables if t.table == Task._meta.db_table]
    assert fresh.live == 2000 and fresh.dead == 0 and fresh.dead_ratio == 0.0
    assert fresh.size > 0 and fresh.index_size > 0
    assert fresh.bloat_ratio is not None and fresh.bloat_ratio < 0.3

    kept = set(Task.objects.order_by("pk").values_list("pk", flat=True)[::10])
    Task.objects.exclude(pk__in=kept).delete()
    flush_statistics()
    [deleted] = [t for t in db_report().tables if t.table == Task._meta.db_table]
    assert (deleted.live, deleted.dead) == (200, 1800)
    assert deleted.dead_ratio == pytest.approx(0.9)
    code, output = health("--vacuum")
    assert code == 0
    assert "scylla_django_task 90% dead (1,800 of 2,000 rows)" in output

    # VACUUM reclaims the dead rows but gives the space back to the table, not the disk: the
    # heap is as big as before for a tenth of the rows, which is bloat.
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE scylla_django_task")
    flush_statistics()
    [vacuumed] = [t for t in db_report().tables if t.table == Task._meta.db_table]
    assert vacuumed.dead == 0 and vacuumed.last_vacuum is not None
    assert vacuumed.bloat_ratio is not None and vacuumed.bloat_ratio > 0.6


@pytest.mark.postgres
def test_a_table_autovacuum_leaves_alone_is_a_warning(no_autovacuum, client):
    report = db_report()
    assert Task._meta.db_table in report.unvacuumed
    check = health_module.tables_check(report)
    assert check.ok and check.warning
    where = "on the server" if not report.autovacuum else f"for {Task._meta.db_table}"
    assert check.detail.startswith(f"autovacuum is off {where}: nothing reclaims")
    enabled = {s.labels["table"]: s.value for s in scrape(client)["scylla_table_autovacuum"]}
    assert enabled[Task._meta.db_table] == 0


@pytest.mark.postgres
def test_the_system_check_warns_without_an_idle_in_transaction_timeout(db):
    with connection.cursor() as cursor:
        cursor.execute("SET idle_in_transaction_session_timeout = 0")
    [warning] = check_idle_in_transaction_timeout(databases=["default"])
    assert warning.id == "scylla_django.W007"
    assert "idle_in_transaction_session_timeout" in warning.msg
    found = checks.run_checks(databases=["default"], tags=[checks.Tags.database])
    assert "scylla_django.W007" in [message.id for message in found]
    with connection.cursor() as cursor:
        cursor.execute("SET idle_in_transaction_session_timeout = '5min'")
    assert check_idle_in_transaction_timeout(databases=["default"]) == []
    assert db_report().idle_timeout is not None


def test_the_system_check_needs_the_databases_asked_for():
    """Django runs database checks only with `databases` (migrate, check --database): without
    them the check asks nothing (a query would fail here: this test has no database)."""
    assert check_idle_in_transaction_timeout() == []
    assert check_idle_in_transaction_timeout(databases=None) == []


@pytest.mark.django_db
def test_elsewhere_every_surface_says_not_applicable(client):
    if connection.vendor == "postgresql":
        pytest.skip("PostgreSQL has a VACUUM horizon")
    assert db.vacuum_report("default", queue_tables()) is None
    assert check_idle_in_transaction_timeout(databases=["default"]) == []
    code, output = health("--vacuum")
    assert code == 0
    vendor = connection.display_name
    for name in ("horizon", "idle_in_transaction", "tables"):
        assert f"ok {name}: not applicable: {vendor} has no VACUUM horizon to watch" in output
    assert not any(name.startswith("scylla_vacuum") for name in scrape(client))
    html = staff("view_task").get(DASHBOARD).content.decode()
    assert 'id="scylla-vacuum-not-applicable"' in html and vendor in html


HOWTO = Path(__file__).resolve().parents[2] / "docs" / "howto" / "health.md"
BLOCK = re.compile(r"```python\n(# health: what holds VACUUM back\n.*?)```", re.DOTALL)


@pytest.mark.django_db
def test_the_howto_s_python_block_runs_as_written(capsys):
    match = BLOCK.search(HOWTO.read_text())
    assert match is not None, "docs/howto/health.md has no 'what holds VACUUM back' block"
    exec(compile(match.group(1), str(HOWTO), "exec"), {})
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[1] for line in lines] == ["horizon", "idle_in_transaction", "tables"]
    if connection.vendor == "postgresql":
        assert lines[0] == "ok horizon nothing holds VACUUM back"
    else:
        assert all("not applicable" in line for line in lines)


@pytest.mark.postgres
def test_the_task_table_has_its_own_autovacuum_settings(db):
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT reloptions FROM pg_class WHERE oid = %s::regclass", [Task._meta.db_table]
        )
        (options,) = cursor.fetchone()
    assert {f"{name}={value}" for name, value in db_vacuum.TASK_TABLE_STORAGE.items()} <= set(
        options
    )
