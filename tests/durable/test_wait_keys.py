"""An event wait's key: an event reads the open waits of its kind keyed by one of its payload's
pairs, never every wait of the kind. The keys must never miss a wait the payload matches."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from scylla_django.models.waits import match_key, nested_match, payload_keys, payload_matches

SCALARS = st.one_of(
    st.booleans(),
    st.integers(-(2**53), 2**53),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
)
NAMES = st.sampled_from(["a", "b", "id", "order", "live"])
PAYLOADS = st.recursive(
    st.dictionaries(NAMES, SCALARS, max_size=4),
    lambda inner: st.dictionaries(NAMES, st.one_of(SCALARS, inner), max_size=4),
    max_leaves=12,
)


def flat(document: dict, prefix: str = "") -> dict:
    """{dotted path: scalar} of a payload, as a match names them."""
    pairs: dict = {}
    for key, value in document.items():
        if isinstance(value, dict):
            pairs.update(flat(value, f"{prefix}{key}."))
        else:
            pairs[f"{prefix}{key}"] = value
    return pairs


# No time checks: a loaded machine makes the generation of nested payloads slow, not wrong.
@hypothesis_settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(PAYLOADS, st.data())
def test_a_wait_whose_match_the_payload_holds_is_keyed_by_one_of_its_pairs(payload, data):
    pairs = flat(payload)
    chosen = data.draw(
        st.lists(st.sampled_from(sorted(pairs)), unique=True) if pairs else st.just([])
    )
    # An equal value written another way: a whole float for the integer it equals.
    match = {
        path: float(pairs[path])
        if type(pairs[path]) is int and abs(pairs[path]) < 2**53 and data.draw(st.booleans())
        else pairs[path]
        for path in chosen
    }
    assert payload_matches(payload, nested_match(match))
    assert match_key(match) in payload_keys(payload)


def test_keys_tell_values_apart_as_a_match_does():
    assert match_key({}) == match_key(None) == ""
    assert match_key({"n": 7}) == match_key({"n": 7.0})
    assert match_key({"n": 1}) != match_key({"n": True})
    assert match_key({"n": 7}) != match_key({"n": "7"})
    assert match_key({"order.id": 7}) == match_key({"order": {"id": 7}})
    assert match_key({"order.id": 7}) in payload_keys({"order": {"id": 7, "total": 3}})
    assert match_key({"order.id": 7}) not in payload_keys({"order": {"id": 8}, "id": 7})


def test_the_key_is_the_pair_fewest_waits_share_by_guess():
    """A number before a string, a long string before a short one, a boolean last."""
    assert match_key({"order_id": 12, "status": "paid", "live": True}) == match_key(
        {"order_id": 12}
    )
    assert match_key({"user": "3f1c0a9e-uuid", "status": "paid"}) == match_key(
        {"user": "3f1c0a9e-uuid"}
    )
    assert match_key({"live": True, "status": "paid"}) == match_key({"status": "paid"})


@pytest.mark.django_db(transaction=True)
def test_an_event_wakes_each_wait_it_matches_whatever_its_key(django_db_blocker):
    """Waits keyed on each kind of pair, and on none: an event wakes those it matches and
    only those, each once."""
    from scylla_django import emit
    from scylla_django.models import PARKED, Task, Wait
    from scylla_django.models.waits import WaitKind

    matches = {
        "any": {},
        "id": {"order.id": 7},
        "id-float": {"order.id": 7.0},
        "id-and-flag": {"order.id": 7, "order.live": True},
        "flag": {"order.live": True},
        "other-id": {"order.id": 8},
        "string": {"by": "ann"},
        "one-not-bool": {"order.live": 1},
    }
    tasks = {}
    for name, match in matches.items():
        task = Task.objects.submit("w-keys", {}, rn=f"w-keys-{name}")
        Task.objects.filter(pk=task.pk).update(not_before=PARKED, leases=1)
        Wait.objects.create(
            task=task,
            name="event:order.paid",
            kind=WaitKind.EVENT,
            event_kind="order.paid",
            match=nested_match(match),
            match_key=match_key(match),
            lease=1,
        )
        tasks[name] = task
    emit("order.shipped", {"order": {"id": 7, "live": True}, "by": "ann"})
    assert not Wait.objects.filter(outcome__isnull=False).exists()
    event = emit("order.paid", {"order": {"id": 7, "live": True, "total": 5.5}, "by": "ann"})
    woken = set(
        Wait.objects.filter(outcome="woken", event=event.pk).values_list("task__rn", flat=True)
    )
    expected = {"any", "id", "id-float", "id-and-flag", "flag", "string"}
    assert woken == {f"w-keys-{name}" for name in expected}
    ready = Task.objects.filter(rn__in=woken).exclude(not_before=PARKED)
    assert ready.count() == len(expected)
    emit("order.paid", {"order": {"id": 7, "live": True}, "by": "ann"})
    assert Wait.objects.filter(outcome="woken").count() == len(expected)


@pytest.mark.django_db(transaction=True)
def test_the_migration_keys_the_open_event_waits():
    """Migration 0003 gives each open event wait its key, and leaves ended waits alone."""
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    before = [("scylla_django", "0002_lease_floors")]
    after = [("scylla_django", "0003_wait_match_key")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    try:
        apps = executor.loader.project_state(before).apps
        Wait = apps.get_model("scylla_django", "Wait")
        common = {"name": "w", "kind": "event", "event_kind": "k", "lease": 1}
        Wait.objects.create(task_id=1, match={"n": 5}, **common)
        Wait.objects.create(task_id=2, match={}, **common)
        Wait.objects.create(task_id=3, match={"n": 5}, outcome="woken", **common)
        Wait.objects.create(task_id=4, name="s", kind="sleep", lease=1)
    finally:
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(after)
    from scylla_django.models import Wait as Current

    keys = dict(Current.objects.values_list("task_id", "match_key"))
    assert keys == {1: match_key({"n": 5}), 2: "", 3: None, 4: None}
