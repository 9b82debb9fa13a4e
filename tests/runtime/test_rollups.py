"""Queue rollups: the monitor's `QueueRollups` counts History's settled minutes and hours once,
writes the same figures however often (or however many at once) it runs, and purges old rows;
the waits' histogram estimates percentiles within its stated precision."""

from __future__ import annotations

import random
import threading
from datetime import datetime, timedelta

import pytest
from django.db import connection
from django.db.models import Sum
from django.utils import timezone

from scylla_django.admin.charts import percentile
from scylla_django.models import QueueRollup
from scylla_django.models.rollups import MARK, bucket_bounds, estimate, hour_of, wait_bucket
from scylla_django.monitor import Monitor, QueueRollups
from tests.helpers import finished, hour_ago, run_in_threads

PRECISION = 2 ** (1 / 8)
"""The stated precision of an estimated percentile: within this factor (or 1 ms)."""


def rows() -> list[tuple[int, datetime, str, int, int, dict[str, int]]]:
    """The rollup rows (but the mark of how far they reach), in order."""
    return list(
        QueueRollup.objects.exclude(queue=MARK)
        .order_by("minutes", "start", "queue")
        .values_list("minutes", "start", "queue", "completed", "aborted", "waits")
    )


# -- the histogram -------------------------------------------------------------------------------


def test_a_wait_falls_in_the_bucket_whose_bounds_hold_it():
    for seconds in [0.0, 0.0005, 0.001, 0.0123, 1.0, 59.9, 3600.0, 86400.0 * 30]:
        low, high = bucket_bounds(wait_bucket(seconds))
        assert low <= seconds < high or seconds == pytest.approx(low)
    assert wait_bucket(-1.0) == 0  # a clock a little behind: no wait
    assert high / low == pytest.approx(2 ** (1 / 8))


def test_estimated_percentiles_are_within_the_stated_precision_of_the_exact_ones():
    generator = random.Random(7)
    for _ in range(200):
        waits = [generator.lognormvariate(2, 2) for _ in range(generator.randint(1, 300))]
        histogram: dict[int, int] = {}
        for wait in waits:
            histogram[wait_bucket(wait)] = histogram.get(wait_bucket(wait), 0) + 1
        for fraction in (0.5, 0.95):
            exact, estimated = percentile(waits, fraction), estimate(histogram, fraction)
            assert estimated is not None
            assert exact / PRECISION - 0.001 <= estimated <= exact * PRECISION + 0.001
    assert estimate({}, 0.5) is None


# -- the service ---------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_service_rolls_up_settled_minutes_and_hours_per_queue():
    settled = hour_ago(2)
    for wait in (1, 2, 3):
        finished("mail", settled, wait)
    finished("mail", settled, 4, aborted=True)
    finished("pdf", settled, 100)
    finished("mail", timezone.now(), 5)  # in a minute not yet settled
    service = QueueRollups(interval=60)
    assert service.run("default") == {"rolled_up": 4, "rollups_purged": 0}
    minute = settled.replace(second=0, microsecond=0)
    hour = hour_of(settled)
    found = {(m, s, q): (c, a, w) for m, s, q, c, a, w in rows()}
    assert set(found) == {
        (1, minute, "mail"),
        (1, minute, "pdf"),
        (60, hour, "mail"),
        (60, hour, "pdf"),
    }
    for minutes, start in ((1, minute), (60, hour)):
        completed, aborted, waits = found[(minutes, start, "mail")]
        assert (completed, aborted, sum(waits.values())) == (3, 1, 4)
        assert found[(minutes, start, "pdf")][:2] == (1, 0)
        assert found[(minutes, start, "pdf")][2] == {str(wait_bucket(100.0)): 1}
    assert QueueRollup.objects.rolled_until() <= timezone.now() - timedelta(minutes=1)


@pytest.mark.django_db
def test_rolling_up_a_bucket_again_writes_the_same_figures():
    for wait in (1, 2, 30):
        finished("mail", hour_ago(3), wait)
    finished("mail", hour_ago(1), 7)
    QueueRollup.objects.roll_up()
    before = rows()
    # Forget every roll-up but the first minute's: the next run rolls its hour up again.
    first = QueueRollup.objects.filter(minutes=1).order_by("start").first()
    assert first is not None
    QueueRollup.objects.exclude(pk=first.pk).delete()
    assert QueueRollup.objects.roll_up() > 0
    assert rows() == before
    assert QueueRollup.objects.roll_up() == 0  # nothing new has settled
    assert rows() == before


@pytest.mark.django_db
def test_a_quiet_week_is_skipped_and_then_not_read_again(django_assert_max_num_queries):
    finished("mail", hour_ago(100), 2)
    # Not two queries per empty hour of the week (336), nor of the week since on a second run.
    with django_assert_max_num_queries(30):
        assert QueueRollup.objects.roll_up() == 2
    with django_assert_max_num_queries(16):
        assert QueueRollup.objects.roll_up() == 0
    assert QueueRollup.objects.rolled_until() >= timezone.now() - timedelta(minutes=3)


@pytest.mark.django_db
def test_a_roll_up_out_of_budget_stops_between_hours_and_the_next_goes_on():
    for hours in (30, 3, 1):
        finished("mail", hour_ago(hours), hours)
    QueueRollup.objects.roll_up()
    whole = rows()
    QueueRollup.objects.all().delete()
    calls = 0
    while QueueRollup.objects.roll_up(budget=0) or calls < 4:  # one hour a call
        calls += 1
        assert calls < 10
        assert QueueRollup.objects.filter(minutes=60).count() <= calls
    assert rows() == whole


@pytest.mark.django_db(transaction=True)
def test_two_roll_ups_at_once_count_each_event_once(vendor):
    if vendor != "postgresql":
        pytest.skip("concurrent writers need PostgreSQL")
    # From two hours back: the last hour is not yet settled in the first minute of this one.
    for n in range(40):
        finished(f"q{n % 3}", hour_ago(2 + n % 5) + timedelta(minutes=n % 20), n % 9, n % 7 == 0)
    until = timezone.now() - timedelta(minutes=1)
    written = run_in_threads([lambda _: QueueRollup.objects.roll_up(until=until)] * 2)
    assert written[0] > 0 and written[1] > 0  # both rolled the same minutes up
    for minutes in (1, 60):
        totals = QueueRollup.objects.filter(minutes=minutes).aggregate(
            completed=Sum("completed"), aborted=Sum("aborted")
        )
        assert totals == {"completed": 34, "aborted": 6}
        waits = QueueRollup.objects.filter(minutes=minutes).values_list("waits", flat=True)
        assert sum(sum(w.values()) for w in waits) == 40


@pytest.mark.django_db
def test_the_service_purges_rollups_older_than_the_retention(settings):
    finished("mail", hour_ago(2), 1)
    QueueRollup.objects.bulk_create(
        [
            QueueRollup(minutes=60, start=hour_of(timezone.now()) - timedelta(days=11), queue="a"),
            QueueRollup(minutes=1, start=timezone.now() - timedelta(days=11), queue="a"),
            QueueRollup(minutes=60, start=hour_of(timezone.now()) - timedelta(days=9), queue="a"),
        ]
    )
    settings.SCYLLA = {"RETENTION": timedelta(days=10)}
    service = QueueRollups()
    assert service.run("default")["rollups_purged"] == 2
    assert not QueueRollup.objects.filter(start__lt=timezone.now() - timedelta(days=10)).exists()
    assert QueueRollup.objects.filter(queue="a").count() == 1
    assert QueueRollup.objects.filter(queue="mail").exists()
    assert QueueRollups(retention=timedelta(days=8)).run("default")["rollups_purged"] == 1


@pytest.mark.django_db(transaction=True)
def test_the_monitor_runs_the_roll_up_every_minute_and_tests_can_wait_for_it():
    finished("mail", hour_ago(1), 2)
    monitor = Monitor(interval=0.05)
    assert monitor.rollups.interval == 60
    monitor.rollups.interval = 0.05
    stop = threading.Event()
    thread = threading.Thread(target=monitor.run, kwargs={"stop": stop}, daemon=True)
    thread.start()
    try:
        assert monitor.rollups.wait_for_run(1)
        finished("pdf", hour_ago(1), 3)  # an hour already rolled up: not counted again
        assert monitor.rollups.wait_for_run(monitor.rollups.runs + 1)
    finally:
        stop.set()
        thread.join(timeout=5)
        connection.close()
    assert not thread.is_alive()
    assert {queue for _, _, queue, *_ in rows()} == {"mail"}
