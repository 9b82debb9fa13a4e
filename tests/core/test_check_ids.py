"""Each system check id names one check, and a bad schedule name is not called a queue name."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest
from django.core.exceptions import ValidationError

from scylla_django.checks import check_schedules
from scylla_django.schedules import clean_definition

PACKAGE = Path(__file__).resolve().parents[2] / "scylla_django"
CHECK_ID = re.compile(r"""\bid\s*=\s*["'](scylla_django\.[EW]\d{3})["']""")


def check_ids_in_source() -> Counter[str]:
    """Every `id="scylla_django.…"` written in the package (checks.py, backends.py, …)."""
    found: Counter[str] = Counter()
    for path in PACKAGE.rglob("*.py"):
        found.update(CHECK_ID.findall(path.read_text()))
    return found


def test_the_checks_module_registers_checks_with_ids():
    ids = set(CHECK_ID.findall((PACKAGE / "checks.py").read_text()))
    assert {"scylla_django.E001", "scylla_django.W001", "scylla_django.W010"} <= ids


def test_no_check_id_is_used_twice():
    ids = check_ids_in_source()
    assert ids, "no check id found: has the way checks are written changed?"
    assert [check_id for check_id, count in ids.items() if count > 1] == []


def test_a_bad_schedule_name_is_reported_as_a_schedule_name(settings):
    settings.SCYLLA = {"SCHEDULES": {"-nightly": {"every": "5m", "queue": "q"}}}
    [error] = check_schedules()
    assert error.id == "scylla_django.W010"
    assert "A schedule name is 1 to 100 characters" in error.msg
    assert "queue name" not in error.msg


def test_a_bad_schedule_name_has_its_own_code():
    with pytest.raises(ValidationError) as exc:
        clean_definition("-nightly", {"every": "5m", "queue": "q"})
    [error] = exc.value.error_dict["name"]
    assert error.code == "invalid_schedule_name"
