"""Unique keys: at most one ready or running task per key (and, with a window, none within the
window after the last one finished), decided by the partial unique index; what a submission
does when its key is held; the handler's default key; retries keep the key."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import F

from scylla_django.exceptions import DuplicateKey, DuplicateTask
from scylla_django.handlers import HandlerRegistry, handler
from scylla_django.models import Task
from scylla_django.queue_keys import register_key
from scylla_django.retries import Retry

pytestmark = [pytest.mark.django_db, pytest.mark.keys]


def _finish(task: Task, worker, how: str) -> None:
    if how == "cancel":
        task.cancel()
        return
    (leased,) = Task.objects.lease(worker, [task.queue])
    assert leased.pk == task.pk
    if how == "complete":
        leased.complete(worker)
    else:
        leased.abort(worker, [{"code": "boom", "args": {}, "description": ""}], retry=False)


def test_a_key_admits_one_active_task_and_return_gives_it_back():
    first = Task.objects.submit("default", {"n": 1}, unique_key="invoice:7")
    again = Task.objects.submit("default", {"n": 2}, unique_key="invoice:7")
    assert first.submit_outcome == "inserted"
    assert again.submit_outcome == "duplicate"
    assert again.pk == first.pk and again.rn == first.rn
    assert again.spec == {"n": 1}
    assert Task.objects.filter(unique_key="invoice:7").count() == 1


def test_raise_names_the_key_and_the_holder():
    first = Task.objects.submit("default", {}, unique_key="k")
    with pytest.raises(DuplicateKey) as caught:
        Task.objects.submit("default", {}, unique_key="k", on_conflict="raise")
    assert caught.value.code == "duplicate"
    assert caught.value.key == "k" and caught.value.rn == first.rn
    assert isinstance(caught.value, DuplicateTask)
    assert Task.objects.count() == 1


def test_replace_updates_a_ready_holder(worker):
    first = Task.objects.submit("default", {"v": 1}, unique_key="k", priority=1)
    replaced = Task.objects.submit(
        "default", {"v": 2}, unique_key="k", priority=9, on_conflict="replace"
    )
    assert replaced.submit_outcome == "replaced" and replaced.pk == first.pk
    stored = Task.objects.get(pk=first.pk)
    assert (stored.spec, stored.priority) == ({"v": 2}, 9)
    assert Task.objects.count() == 1


def test_replace_leaves_a_running_holder_alone(worker):
    first = Task.objects.submit("default", {"v": 1}, unique_key="k")
    Task.objects.lease(worker, ["default"])
    same = Task.objects.submit("default", {"v": 2}, unique_key="k", on_conflict="replace")
    assert same.submit_outcome == "duplicate" and same.pk == first.pk
    assert Task.objects.get(pk=first.pk).spec == {"v": 1}


@pytest.mark.parametrize("how", ["complete", "abort", "cancel"])
def test_a_key_is_free_again_once_its_task_finished_without_a_window(worker, how):
    first = Task.objects.submit("default", {}, unique_key="k")
    _finish(first, worker, how)
    second = Task.objects.submit("default", {}, unique_key="k")
    assert second.submit_outcome == "inserted" and second.pk != first.pk


def test_a_window_holds_the_key_after_the_task_finished_until_it_is_over(worker):
    first = Task.objects.submit("default", {}, unique_key="k", unique_window=timedelta(hours=1))
    _finish(first, worker, "complete")
    inside = Task.objects.submit("default", {}, unique_key="k")
    assert inside.submit_outcome == "duplicate" and inside.pk == first.pk
    with pytest.raises(DuplicateKey):
        Task.objects.submit("default", {}, unique_key="k", on_conflict="raise")
    # The window ends on the database clock: move the finish back beyond it.
    Task.objects.filter(pk=first.pk).update(updated=F("updated") - timedelta(hours=2))
    after = Task.objects.submit("default", {}, unique_key="k")
    assert after.submit_outcome == "inserted" and after.pk != first.pk
    assert Task.objects.get(pk=first.pk).unique_held is False


def test_a_window_given_as_text_is_parsed(worker):
    task = Task.objects.submit("default", {}, unique_key="k", unique_window="1.5s")
    assert task.unique_window == timedelta(seconds=1.5)


def test_the_index_refuses_a_second_holder_written_past_submit():
    Task.objects.submit("default", {}, unique_key="k")
    with pytest.raises(IntegrityError), transaction.atomic():
        Task.objects.create(rn="other", queue="default", spec={}, unique_key="k")


def test_keyless_tasks_are_submitted_as_before():
    task = Task.objects.submit("default", {})
    again = Task.objects.submit("default", {})
    assert task.unique_key is None and task.unique_held is False
    assert task.submit_outcome == "inserted" and again.pk != task.pk


def test_a_duplicate_rn_with_a_free_key_is_still_a_duplicate_rn():
    Task.objects.submit("default", {}, rn="same")
    with pytest.raises(DuplicateTask) as caught:
        Task.objects.submit("default", {}, rn="same", unique_key="k")
    assert caught.value.code == "duplicate_task"


@pytest.mark.parametrize(
    ("options", "field", "code"),
    [
        ({"unique_key": ""}, "unique_key", "invalid_unique_key"),
        ({"unique_key": "x" * 201}, "unique_key", "invalid_unique_key"),
        ({"unique_key": 7}, "unique_key", "invalid_unique_key"),
        ({"unique_key": "k", "unique_window": -1}, "unique_window", "invalid_unique_window"),
        ({"unique_key": "k", "unique_window": "soon"}, "unique_window", "invalid_unique_window"),
        ({"unique_window": 5}, "unique_window", "invalid_unique_window"),
        ({"unique_key": "k", "on_conflict": "merge"}, "on_conflict", "invalid_on_conflict"),
    ],
)
def test_bad_input_is_refused_and_nothing_is_written(options, field, code):
    with pytest.raises(ValidationError) as caught:
        Task.objects.submit("default", {}, **options)
    assert field in caught.value.error_dict
    assert caught.value.error_dict[field][0].code == code
    assert not Task.objects.exists()


def test_a_key_of_200_characters_is_accepted():
    assert Task.objects.submit("default", {}, unique_key="x" * 200).unique_key == "x" * 200


def test_the_handlers_default_key_is_computed_from_the_spec():
    registry = HandlerRegistry()

    @handler("invoices", registry=registry, unique_key=lambda spec: f"invoice:{spec['id']}")
    def invoices(context):
        return None

    try:
        first = Task.objects.submit("invoices", {"id": 7})
        again = Task.objects.submit("invoices", {"id": 7, "more": 1})
        other = Task.objects.submit("invoices", {"id": 8})
        explicit = Task.objects.submit("invoices", {"id": 7}, unique_key="mine")
        assert first.unique_key == "invoice:7" and again.pk == first.pk
        assert other.unique_key == "invoice:8" and other.pk != first.pk
        assert explicit.unique_key == "mine"
        with pytest.raises(ValidationError) as caught:
            Task.objects.submit("invoices", {"no_id": 1})
        assert caught.value.error_dict["unique_key"][0].code == "invalid_unique_key"
    finally:
        register_key("invoices", None)


def test_a_retry_keeps_the_key_of_its_chain(worker):
    first = Task.objects.submit("default", {}, unique_key="k", retry=Retry(max_attempts=3))
    (leased,) = Task.objects.lease(worker, ["default"])
    successor = leased.abort(worker, [{"code": "boom", "args": {}, "description": ""}], retry=True)
    assert successor is not None
    assert successor.unique_key == "k"
    assert Task.objects.get(pk=successor.pk).unique_key == "k"
    again = Task.objects.submit("default", {}, unique_key="k")
    assert again.pk == successor.pk and again.submit_outcome == "duplicate"
    assert Task.objects.get(pk=first.pk).status == "aborted"


def test_a_retry_takes_over_a_windowed_key(worker):
    Task.objects.submit(
        "default", {}, unique_key="k", unique_window=timedelta(hours=1), retry=Retry()
    )
    (leased,) = Task.objects.lease(worker, ["default"])
    successor = leased.abort(worker, [{"code": "boom", "args": {}, "description": ""}], retry=True)
    assert successor is not None
    assert Task.objects.get(pk=leased.pk).unique_held is False
    stored = Task.objects.get(pk=successor.pk)
    assert (stored.unique_key, stored.unique_held) == ("k", True)
    assert Task.objects.submit("default", {}, unique_key="k").pk == successor.pk


def test_a_manual_retry_of_a_task_whose_key_was_taken_is_refused(worker):
    first = Task.objects.submit("default", {}, unique_key="k")
    _finish(first, worker, "abort")
    Task.objects.submit("default", {}, unique_key="k")
    with pytest.raises(DuplicateKey):
        Task.objects.get(pk=first.pk).retry()


def test_submit_many_reports_keyed_items():
    holder = Task.objects.submit("default", {}, unique_key="held")
    outcomes = Task.objects.submit_many(
        [
            {"queue": "default", "spec": {}, "unique_key": "held"},
            {"queue": "default", "spec": {}, "unique_key": "new"},
            {"queue": "default", "spec": {}, "unique_key": "new", "on_conflict": "raise"},
            {"queue": "default", "spec": {}},
            {"queue": "default", "spec": {}, "unique_key": ""},
        ]
    )
    assert [o.outcome for o in outcomes] == [
        "duplicate",
        "inserted",
        "duplicate",
        "inserted",
        "invalid",
    ]
    assert outcomes[0].rn == holder.rn
    assert outcomes[2].rn == outcomes[1].rn
    assert Task.objects.filter(unique_key="new").count() == 1
