"""Bad input gets a clear ValidationError with a code, and nothing is written."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from scylla_django.enums import Status
from scylla_django.exceptions import Abort, LeaseLost, ScyllaError, error_record
from scylla_django.models import Task
from scylla_django.validation import (
    JSON_MAX_DEPTH,
    _check_any,
    _check_json,
    validate_errors,
    validate_json,
    validate_locks,
)
from tests.factories import TaskFactory

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "rn",
    ["", "x" * 129, "has space", "slash/", "percent%", "ünïcode", "nul\x00", 42, ".", ".."],
)
def test_bad_rns_are_rejected(rn):
    with pytest.raises(ValidationError) as raised:
        Task.objects.submit("q", {}, rn=rn)
    assert "rn" in raised.value.error_dict
    assert Task.objects.count() == 0


@pytest.mark.parametrize(
    "rn", ["a", "x" * 128, "orders:eu-1.233_b", "2e822247-e4f5-480d", "...", ".a", "a.."]
)
def test_good_rns_are_accepted(rn):
    assert Task.objects.submit("q", {}, rn=rn).rn == rn


@pytest.mark.parametrize(
    "queue", ["", "q" * 101, "_leading", "-leading", "a b", "a%b", "a/b", None, ["q"]]
)
def test_bad_queues_are_rejected(queue):
    with pytest.raises(ValidationError) as raised:
        Task.objects.submit(queue, {})
    assert "queue" in raised.value.error_dict


@pytest.mark.parametrize("queue", ["q", "Q" * 100, "reports.daily:eu-1", "a_c", "0"])
def test_good_queues_are_accepted(queue):
    assert Task.objects.submit(queue, {}).queue == queue


@pytest.mark.parametrize(
    "locks",
    ["a", [7], [["a"]], [["a", "sometimes"]], [["a", ["shared"]]], [["a", {"m": 1}]], [("a", 1)]],
)
def test_bad_locks_are_rejected_with_a_code(locks):
    """A lock's mode that is not a text (a list, an object, a number) is refused as any bad
    mode is, before anything compares it with the modes."""
    with pytest.raises(ValidationError) as info:
        validate_locks(locks)
    assert info.value.code == "invalid_key"


@pytest.mark.parametrize("priority", [-1, 256, 10**20, 1.5, "5", True, None])
def test_bad_priorities_are_rejected(priority, settings):
    if priority is None:
        settings.SCYLLA = {"DEFAULT_PRIORITY": 300}  # a bad default is caught as well
        with pytest.raises(Exception):  # noqa: B017 (ImproperlyConfigured)
            Task.objects.submit("q", {}, priority=priority)
        return
    with pytest.raises(ValidationError) as raised:
        Task.objects.submit("q", {}, priority=priority)
    assert raised.value.error_dict["priority"][0].code == "invalid_priority"


@pytest.mark.parametrize(
    ("spec", "code"),
    [
        (None, "required"),
        ({"s": "nul \x00 inside"}, "invalid_json"),
        ({"k\x00": 1}, "invalid_json"),
        ({"f": float("nan")}, "invalid_json"),
        ({"f": float("inf")}, "invalid_json"),
        ({1: "non-string key"}, "invalid_json"),
        ({"set": {1, 2}}, "invalid_json"),
        ({"big": "x" * (1024 * 1024)}, "too_large"),
    ],
)
def test_bad_specs_are_rejected(spec, code):
    with pytest.raises(ValidationError) as raised:
        Task.objects.submit("q", spec)
    assert raised.value.error_dict["spec"][0].code == code
    assert Task.objects.count() == 0


def test_deep_nesting_is_rejected_not_a_crash():
    spec: list = []
    for _ in range(10_000):
        spec = [spec]
    with pytest.raises(ValidationError):
        Task.objects.submit("q", spec)


def json_check_outcome(check, value) -> str | None:
    try:
        check(value)
    except ValidationError as exc:
        return f"{exc.code}: {exc.message}"
    return None


LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),  # NaN and infinities included
    st.text(alphabet=st.sampled_from("ab\x00☃")),
    st.sampled_from([Status.READY, 1.5, b"bytes", {1, 2}]),  # a str subclass, not JSON
)
KEYS = st.one_of(st.text(alphabet=st.sampled_from("k\x00")), st.integers(), st.just(Status.READY))


@hypothesis_settings(max_examples=400, deadline=None)
@given(
    st.recursive(
        LEAVES,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4),
            st.lists(inner, max_size=3).map(tuple),
            st.dictionaries(KEYS, inner, max_size=4),
        ),
        max_leaves=20,
    )
)
def test_the_json_check_s_fast_path_says_what_the_full_walk_says(value):
    """Plain dicts and lists check their plain members in a loop of their own: for any value,
    the same error (or none) as the walk that checks every member by a call."""
    assert json_check_outcome(lambda v: _check_json(v, "spec"), value) == json_check_outcome(
        lambda v: _check_any(v, "spec", 0), value
    )


@pytest.mark.parametrize("levels", range(JSON_MAX_DEPTH - 2, JSON_MAX_DEPTH + 3))
@pytest.mark.parametrize("innermost", [[], {}, [1], {"a": "b"}, ["\x00"], [float("nan")]])
@pytest.mark.parametrize("container", [lambda inner: [inner], lambda inner: {"k": inner}])
def test_the_json_check_s_fast_path_keeps_the_depth_limit(levels, innermost, container):
    value = innermost
    for _ in range(levels):
        value = container(value)
    assert json_check_outcome(lambda v: _check_json(v, "spec"), value) == json_check_outcome(
        lambda v: _check_any(v, "spec", 0), value
    )


def test_huge_integers_are_rejected_or_stored_intact():
    with pytest.raises(ValidationError):
        validate_json(10**5000)
    assert Task.objects.submit("q", {"n": 10**30}).spec == {"n": 10**30}


def test_spec_size_limit_follows_the_setting(settings):
    settings.SCYLLA = {"SPEC_SIZE_LIMIT": 20}
    Task.objects.submit("q", {"a": "x" * 10})
    with pytest.raises(ValidationError):
        Task.objects.submit("q", {"a": "x" * 20})


@pytest.mark.parametrize("spec", [0, False, "", [], {}, "text", [1, {"a": None}], {"u": "☃"}])
def test_any_json_but_null_is_a_spec(spec):
    assert Task.objects.get(pk=Task.objects.submit("q", spec).pk).spec == spec


def test_not_before_must_be_an_aware_datetime():
    from datetime import datetime

    with pytest.raises(ValidationError):
        Task.objects.submit("q", {}, not_before=datetime(2030, 1, 1))
    with pytest.raises(ValidationError):
        Task.objects.submit("q", {}, not_before="2030-01-01")


@pytest.mark.parametrize(
    "values",
    [
        {"priority": 256},
        {"progress": 1.5},
        {"progress": -0.1},
        {"status": "paused"},
        {"status": "running"},  # running without owner and deadline
    ],
)
def test_database_check_constraints_hold_without_the_orm_validation(values):
    task = TaskFactory()
    with pytest.raises(IntegrityError), transaction.atomic():
        Task.objects.filter(pk=task.pk).update(**values)


def test_every_error_record_has_one_shape():
    assert error_record("empty") == {"code": "empty", "args": {}, "description": ""}
    raised = Abort("empty", "no rows matched", args={"day": 3})
    assert raised.as_error() == error_record("empty", "no rows matched", {"day": 3})
    assert raised.as_error() == {
        "code": "empty",
        "args": {"day": 3},
        "description": "no rows matched",
    }
    assert validate_errors({"code": "empty"}) == [error_record("empty")]
    assert validate_errors([{"code": "x", "args": [1], "description": "d"}]) == [
        error_record("x", "d", [1])
    ]


def test_an_error_class_names_its_code_in_its_header():
    class Late(LeaseLost):
        """Inherits its code."""

    class Busy(ScyllaError, code="busy"):
        """Names its own."""

    assert (Late.code, Busy.code, LeaseLost.code, ScyllaError.code) == (
        "lease_lost",
        "busy",
        "lease_lost",
        "scylla_error",
    )


def test_a_generated_rn_is_a_random_version_4_uuid():
    import uuid

    from scylla_django.models.inputs import new_rn

    rns = [new_rn() for _ in range(2000)]
    assert len(set(rns)) == len(rns)
    for rn in rns:
        parsed = uuid.UUID(rn)
        assert str(parsed) == rn
        assert (parsed.version, parsed.variant) == (4, uuid.RFC_4122)
    # Every variant digit (8, 9, a, b) and every hex digit elsewhere turns up.
    assert {rn[19] for rn in rns} == set("89ab")
    assert set("".join(rns).replace("-", "")) == set("0123456789abcdef")
