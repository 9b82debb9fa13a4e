"""The dashboard's numbers (scylla_django.dashboard), without the admin around them."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from django.core.cache import cache
from django.db import connection
from django.db.models.functions import Now
from django.utils import timezone

from scylla_django.admin import charts, dashboard
from scylla_django.enums import Status
from scylla_django.models import History, QueueRollup, Task, Worker
from tests.factories import TaskFactory, running_task
from tests.helpers import Stopwatch, finished, hour_ago

pytestmark = pytest.mark.django_db


def finish(task: Task, worker: Worker, status: str) -> None:
    if status == Status.COMPLETED:
        task.complete(worker)
    elif status == Status.ABORTED:
        task.abort(worker, [{"code": "boom", "args": {}, "description": "it broke"}])
    else:
        task.cancel()


def test_queue_table_counts_every_status_per_queue(worker):
    for n, status in enumerate(["completed", "aborted", "running", "cancelled"]):
        task = running_task(worker, rn=f"a{n}", queue="a")
        if status != "running":
            finish(task, worker, status)
    TaskFactory(rn="b1", queue="b")
    TaskFactory(rn="b2", queue="b")

    rows = dashboard.queue_table()
    assert [row.queue for row in rows] == ["a", "b"]
    a, b = rows
    assert a.cells == [
        ("ready", 0),
        ("running", 1),
        ("completed", 1),
        ("aborted", 1),
        ("cancelled", 1),
    ]
    assert (a.total, b.total) == (4, 2)
    assert dict(b.cells)["ready"] == 2
    total = dashboard.totals(rows)
    assert total.total == 6
    assert dict(total.cells) == {
        "ready": 2,
        "running": 1,
        "completed": 1,
        "aborted": 1,
        "cancelled": 1,
    }


def test_queue_table_measures_the_longest_wait_of_leasable_tasks(worker):
    clock = Stopwatch()
    old = TaskFactory(rn="old", queue="a")
    TaskFactory(rn="new", queue="a")
    Task.objects.filter(pk=old.pk).update(created=Now() - timedelta(hours=2))
    # Created long ago but only leasable since 10 minutes: it has waited 10 minutes.
    delayed = TaskFactory(rn="delayed", queue="b")
    Task.objects.filter(pk=delayed.pk).update(
        created=Now() - timedelta(days=1), not_before=Now() - timedelta(minutes=10)
    )
    # Not leasable yet: not waiting at all.
    TaskFactory(rn="later", queue="c", not_before=timezone.now() + timedelta(hours=1))

    waits = {row.queue: row.waiting_since for row in dashboard.queue_table()}
    now = clock.started + timedelta(seconds=clock.seconds())  # the database clock's now
    assert clock.bounds((now - waits["a"]).total_seconds(), 2 * 3600)
    assert clock.bounds((now - waits["b"]).total_seconds(), 10 * 60)
    assert waits["c"] is None
    assert dashboard.totals(dashboard.queue_table()).waiting_since == waits["a"]


def test_throughput_counts_finished_tasks_per_minute_and_status(worker):
    statuses = ["completed", "completed", "aborted", "cancelled", "completed"]
    for n, status in enumerate(statuses):
        finish(running_task(worker, rn=f"t{n}"), worker, status)
    aged = running_task(worker, rn="aged")
    aged.complete(worker)
    running_task(worker, rn="busy")  # not finished
    # Pin the times, so that no minute ends between finishing and charting.
    now = timezone.now().replace(second=30, microsecond=0)
    Task.objects.filter(rn__startswith="t").update(updated=now - timedelta(seconds=5))
    Task.objects.filter(pk=aged.pk).update(updated=now - timedelta(hours=1))

    chart = dashboard.throughput(now)
    assert len(chart.bars) == dashboard.CHART_MINUTES
    assert chart.total == chart.peak == 5
    assert dict(chart.by_status) == {"completed": 3, "aborted": 1, "cancelled": 1}
    last = chart.bars[-1]
    assert [(s.status, s.count) for s in last.segments] == [
        ("completed", 3),
        ("aborted", 1),
        ("cancelled", 1),
    ]
    # The peak minute fills the chart's height, its segments stacked from the bottom.
    assert last.segments[0].y + last.segments[0].height == dashboard.CHART_HEIGHT
    assert last.segments[-1].y == 0
    assert sum(s.height for s in last.segments) == pytest.approx(dashboard.CHART_HEIGHT)
    assert all(bar.segments == [] for bar in chart.bars[:-2])
    assert [bar.x for bar in chart.bars] == sorted(bar.x for bar in chart.bars)
    assert "3 completed, 1 aborted, 1 cancelled" in last.label
    since = timezone.localtime(chart.since)
    assert chart.ticks == [
        (chart.bars[n].x, f"{since + timedelta(minutes=n):%H:%M}") for n in (0, 15, 30, 45)
    ]


def test_throughput_of_a_quiet_hour():
    chart = dashboard.throughput()
    assert (chart.total, chart.peak) == (0, 0)
    assert "none finished" in chart.bars[0].label


def test_expired_leases_oldest_first_and_counted_past_the_limit(worker):
    tasks = [running_task(worker, rn=f"r{n}") for n in range(4)]
    for minutes, task in zip([3, 1, 2], tasks, strict=False):
        Task.objects.filter(pk=task.pk).update(deadline=Now() - timedelta(minutes=minutes))

    expired = dashboard.expired_leases()
    assert expired.count == 3
    assert [t.rn for t in expired.rows] == ["r0", "r2", "r1"]
    assert expired.rows[0].age == "3 min ago"
    assert (expired.rows[0].owner, expired.rows[0].queue) == (worker.name, "default")
    limited = dashboard.expired_leases(limit=2)
    assert (limited.count, len(limited.rows)) == (3, 2)


def test_recent_failures_newest_first(worker):
    for n in range(3):
        finish(running_task(worker, rn=f"f{n}"), worker, Status.ABORTED)
    finish(running_task(worker, rn="ok"), worker, Status.COMPLETED)
    failures = dashboard.recent_failures(limit=2)
    assert [t.rn for t in failures] == ["f2", "f1"]
    assert (failures[0].error, failures[0].description) == ("boom", "it broke")


def test_running_counts(worker, other_worker):
    running_task(worker, rn="a")
    running_task(worker, rn="b")
    finish(running_task(worker, rn="c"), worker, Status.COMPLETED)
    running_task(other_worker, rn="d")
    counts = dashboard.running_counts([worker.name, other_worker.name, "worker-999"])
    assert counts == {worker.name: 2, other_worker.name: 1}
    assert dashboard.running_counts([]) == {}


def test_worker_board_shows_states_and_held_tasks(worker, other_worker, django_assert_num_queries):
    running_task(worker, rn="a")
    stopped = Worker.objects.register(["q"])
    stopped.stop()
    silent = Worker.objects.register(["q"])
    Worker.objects.filter(pk=silent.pk).update(silent_at=Now() - timedelta(seconds=1))
    dead = Worker.objects.register(["q"])
    running_task(dead, rn="held")
    Worker.objects.filter(pk=dead.pk).update(dead_at=Now() - timedelta(seconds=1))
    idle_dead = Worker.objects.register(["q"])
    Worker.objects.filter(pk=idle_dead.pk).update(dead_at=Now() - timedelta(seconds=1))

    # running per owner, the workers, their held tasks, the counts per state
    with django_assert_num_queries(4):
        board = dashboard.worker_board()
    rows = {row.name: row for row in board.rows}
    assert list(rows) == [worker.name, other_worker.name, silent.name, dead.name]
    assert {name: row.state for name, row in rows.items()} == {
        worker.name: "alive",
        other_worker.name: "alive",
        silent.name: "silent",
        dead.name: "dead",
    }
    first = rows[worker.name]
    assert (first.running, first.capacity, first.load) == (1, 4, 0.25)
    assert (first.hostname, first.pid, first.queues) == ("test", 1, ["default"])
    assert [rn for _, rn in rows[dead.name].held] == ["held"]
    assert [row.name for row in board.gone] == [dead.name]
    assert board.states == {"alive": 2, "silent": 1, "dead": 2, "stopped": 1}
    assert (board.count, board.running, board.capacity) == (4, 2, 8)
    assert dashboard.worker_board(limit=1).count == 4
    assert dashboard.known_workers()[-2:] == [other_worker.name, worker.name]


def test_failure_groups_count_by_queue_and_first_error_code(worker):
    def fail(rn: str, queue: str, code: str) -> None:
        running_task(worker, rn=rn, queue=queue).abort(
            worker, [{"code": code, "args": {}, "description": "x"}]
        )

    fail("a1", "mail", "smtp_timeout")
    fail("a2", "mail", "smtp_timeout")
    fail("a3", "mail", "bounced")
    fail("a4", "pdf", "smtp_timeout")
    old = running_task(worker, rn="old", queue="mail")
    old.abort(worker, [{"code": "ancient"}])
    Task.objects.filter(pk=old.pk).update(updated=Now() - timedelta(days=2))

    found = dashboard.failure_groups()
    assert [(g.queue, g.code, g.count) for g in found.groups] == [
        ("mail", "smtp_timeout", 2),
        ("mail", "bounced", 1),
        ("pdf", "smtp_timeout", 1),
    ]
    assert (found.total, found.truncated) == (4, False)
    capped = dashboard.failure_groups(scan=2)
    assert (capped.total, capped.truncated) == (2, True)


def test_the_queue_table_words_its_waits_with_the_duration_formatter(worker):
    waiting = TaskFactory(rn="waiting", queue="a")
    Task.objects.filter(pk=waiting.pk).update(created=Now() - timedelta(minutes=2, seconds=5))
    [row] = dashboard.queue_table()
    assert row.wait in ("2 min 5 s", "2 min 6 s")
    assert dashboard.totals([row]).wait == row.wait


def test_the_last_monitor_pass_is_worded_with_the_duration_formatter():
    board = dashboard.build()
    assert board.last_pass == ""  # no monitor yet
    last = board.generated - timedelta(seconds=0.971)
    shown = replace(board, monitors=replace(board.monitors, last_pass=last))
    assert shown.last_pass == "971 ms ago"


def test_worker_silence_follows_the_lease_length(settings):
    assert dashboard.worker_silence() == dashboard.WORKER_SILENCE
    settings.SCYLLA = {"LEASE_LENGTH": 300}
    assert dashboard.worker_silence() == timedelta(minutes=15)


def test_known_queues_come_from_live_workers(worker):
    Worker.objects.register(["emails", "reports"])
    gone = Worker.objects.register(["archive"])
    gone.stop()
    assert dashboard.known_queues() == ["default", "emails", "reports"]


def test_build_is_a_handful_of_queries(worker, django_assert_max_num_queries):
    finish(running_task(worker, rn="x"), worker, Status.ABORTED)
    TaskFactory(rn="y")
    # The dead letters and open batches among them, and on PostgreSQL the five of the VACUUM
    # report (db.vacuum_report).
    vacuum = 5 if connection.vendor == "postgresql" else 0
    with django_assert_max_num_queries(17 + vacuum):
        board = dashboard.build()
    assert [row.queue for row in board.queues] == ["default"]
    assert board.total.total == 2
    assert board.throughput.total == 1
    assert board.expired.count == 0
    assert [t.rn for t in board.failures] == ["x"]
    assert board.workers.count == 1
    assert (board.dead, board.open_batches) == (1, 0)
    assert [(g.queue, g.code, g.count) for g in board.failure_groups.groups] == [
        ("default", "boom", 1)
    ]
    assert board.monitors.missing
    assert board.statuses == dashboard.STATUSES


# -- the per-queue charts -------------------------------------------------------------------


def leased_after(worker: Worker, rn: str, queue: str, waited: timedelta) -> Task:
    """A task of `queue` leased by `worker` `waited` after its submission."""
    task = TaskFactory(rn=rn, queue=queue)
    Task.objects.filter(pk=task.pk).update(created=Now() - waited)
    [leased] = Task.objects.lease(worker, [queue])
    return leased


def test_charts_count_completions_and_aborts_per_queue(worker):
    for n in range(3):
        leased_after(worker, f"m{n}", "mail", timedelta(seconds=1)).complete(worker)
    leased_after(worker, "p0", "pdf", timedelta(seconds=1)).abort(worker, [{"code": "x"}])
    data = charts.build("hour").as_json()
    assert data["range"] == "hour" and data["interval_seconds"] == 60
    assert len(data["starts"]) == 60
    assert sum(data["throughput"]["mail"]) == 3
    assert data["throughput"]["mail"][-1] + data["throughput"]["mail"][-2] == 3
    assert "pdf" not in data["throughput"]
    assert sum(data["failures"]["pdf"]) == 1


def test_charts_measure_the_wait_to_a_first_lease(worker):
    for n, seconds in enumerate([10, 20, 30, 40, 50]):
        leased_after(worker, f"w{n}", "mail", timedelta(seconds=seconds)).complete(worker)
    again = leased_after(worker, "again", "mail", timedelta(hours=5))
    again.yield_lease(worker)  # leased twice: its wait is not known
    Task.objects.filter(pk=again.pk).update(leases=2)
    data = charts.build("hour").as_json()
    [p50] = [v for v in data["wait_p50"]["mail"] if v is not None]
    [p95] = [v for v in data["wait_p95"]["mail"] if v is not None]
    assert p50 == pytest.approx(30, abs=1)
    assert p95 == pytest.approx(48, abs=1)


@pytest.mark.parametrize(("key", "points", "step"), [("day", 24, 3600), ("week", 168, 3600)])
def test_charts_over_a_day_or_a_week(worker, key, points, step):
    leased_after(worker, "old", "mail", timedelta(seconds=1)).complete(worker)
    History.objects.filter(task__rn="old").update(time=Now() - timedelta(hours=20))
    data = charts.build(key).as_json()
    assert (len(data["starts"]), data["interval_seconds"]) == (points, step)
    assert sum(data["throughput"]["mail"]) == 1
    assert sum(charts.build("hour").as_json()["throughput"].get("mail", [])) == 0


def test_charts_draw_the_busiest_queues_and_sum_the_others(worker, monkeypatch):
    monkeypatch.setattr(charts, "QUEUE_LIMIT", 2)
    for n, queue in enumerate(["a", "a", "a", "b", "b", "c", "d"]):
        leased_after(worker, f"t{n}", queue, timedelta(seconds=1)).complete(worker)
    built = charts.build()
    assert [line.queue for line in built.throughput.lines] == ["a", "b", "other"]
    assert sum(built.as_json()["throughput"]["other"]) == 2
    assert built.throughput.peak_label in {"3/min", "2/min", "1/min"}


def test_the_percentile_interpolates_as_postgresql_does():
    assert charts.percentile([10, 20, 30, 40, 50], 0.95) == pytest.approx(48)
    assert charts.percentile([7], 0.5) == 7


def test_an_unknown_range_is_the_last_hour():
    assert charts.chosen_range("year").key == "hour"


def test_charts_read_a_closed_interval_once(worker, django_assert_max_num_queries):
    leased_after(worker, "old", "mail", timedelta(seconds=1)).complete(worker)
    History.objects.filter(task__rn="old").update(time=Now() - timedelta(hours=3))
    assert sum(charts.build("day").as_json()["throughput"]["mail"]) == 1
    History.objects.filter(task__rn="old").delete()  # as a purge would
    # Whether anything is rolled up (nothing is), then the open hour only (and its waits, not
    # on PostgreSQL).
    with django_assert_max_num_queries(3):
        again = charts.build("day").as_json()
    assert sum(again["throughput"]["mail"]) == 1


# -- the charts from the rollups --------------------------------------------------------------

WAITS = [0.0004, 0.5, 3.0, 7.0, 12.0, 40.0, 90.0, 300.0]


def seed_charts() -> None:
    """Finished tasks of two queues over the last week, some in the minute under way."""
    now = timezone.now()
    moments = [
        now - timedelta(minutes=40),
        now - timedelta(minutes=20, seconds=30),
        now,
        hour_ago(3),
        hour_ago(20),
        hour_ago(100),
    ]
    for n, at in enumerate(moments):
        for k, wait in enumerate(WAITS):
            finished("mail", at + timedelta(seconds=k), wait, aborted=k == 3)
            if n % 2 == 0:
                finished("pdf", at, wait * 2)


def assert_within_precision(rolled: list[float | None], exact: list[float | None]) -> None:
    """Estimated percentiles against exact ones: within 9% (a factor 2^(1/8)), or 1 ms."""
    assert [v is None for v in rolled] == [v is None for v in exact]
    for estimated, value in zip(rolled, exact, strict=True):
        if value is not None:
            assert estimated is not None
            assert value / 2 ** (1 / 8) - 0.001 <= estimated <= value * 2 ** (1 / 8) + 0.001


@pytest.mark.parametrize("key", ["hour", "day", "week"])
def test_charts_from_the_rollups_are_the_charts_from_history(db, key):
    seed_charts()
    cache.clear()
    # One moment for both charts: a minute that turns between them moves the hour's range.
    now = timezone.now()
    first = charts.chosen_range(key).first(now)
    assert charts.rolled_intervals(charts.chosen_range(key), first) is None  # nothing rolled up
    exact = charts.build(key, now=now).as_json()
    assert QueueRollup.objects.roll_up() > 0
    cache.clear()
    rolled = charts.build(key, now=now).as_json()
    assert rolled["starts"] == exact["starts"]
    assert rolled["throughput"] == exact["throughput"]
    assert rolled["failures"] == exact["failures"]
    assert sum(sum(v or 0 for v in line) for line in rolled["throughput"].values()) > 0
    for figure in ("wait_p50", "wait_p95"):
        assert set(rolled[figure]) == set(exact[figure]) == {"mail", "pdf"}
        for queue, line in exact[figure].items():
            assert_within_precision(rolled[figure][queue], line)


def test_charts_read_rolled_up_minutes_from_the_rollups_and_the_rest_from_history(
    db, django_assert_max_num_queries
):
    finished("mail", timezone.now() - timedelta(minutes=30), 2)
    finished("mail", hour_ago(5), 2)
    QueueRollup.objects.roll_up()
    History.objects.filter(time__lt=timezone.now() - timedelta(minutes=2)).delete()  # purged
    # After the last roll-up, completed now (`finished` completes a second after its start): a
    # completion a moment ahead could fall in the minute after the chart's last one.
    finished("mail", timezone.now() - timedelta(seconds=1), 1)
    cache.clear()
    for key, completed in (("hour", 2), ("day", 3), ("week", 3)):
        # How far the minutes (and hours) are rolled up, their rows, the History since (two).
        with django_assert_max_num_queries(6):
            data = charts.build(key).as_json()
        assert sum(data["throughput"]["mail"]) == completed
        assert sum(data["throughput"]["mail"][-2:]) >= 1  # the last interval, or the one before


# -- queues nobody serves ---------------------------------------------------------------------


def test_a_queue_with_ready_tasks_and_no_live_worker_is_marked_unserved(worker):
    """A typo in a queue name ("emials") leaves its tasks waiting for a worker that never
    comes: the queue table says so, and stops saying it once a worker serves the queue."""
    Task.objects.submit("emials", {}, rn="typo")
    Task.objects.submit("default", {}, rn="served")
    rows = {row.queue: row for row in dashboard.queue_table()}
    assert rows["emials"].unserved and not rows["default"].unserved
    Worker.objects.register(queues=["emials"], capacity=1, hostname="test", pid=3)
    assert not any(row.unserved for row in dashboard.queue_table())


def test_the_dashboard_page_warns_of_a_queue_nobody_serves(admin_client):
    from django.urls import reverse

    Task.objects.submit("emials", {}, rn="typo")
    page = admin_client.get(reverse("admin:scylla_django_task_dashboard"))
    assert page.status_code == 200
    assert "no live worker serves this queue" in page.content.decode()
