"""docs/howto/admission.md's example runs as written, and does what its comments say.

The block is read from the page itself (the ```python block that starts with `# admission:`),
so the page cannot drift from what works."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from scylla_django.enums import Status
from scylla_django.models import Task, TaskOrigin

pytestmark = pytest.mark.django_db

PAGE = Path(__file__).resolve().parents[2] / "docs" / "howto" / "admission.md"
BLOCK = re.compile(r"```python\n(# admission: (SCYLLA = .*?)\n.*?)```", re.DOTALL)


@pytest.mark.keys  # limits and admission keys: not on MySQL/MariaDB
def test_the_admission_example_does_what_it_says(settings, capsys) -> None:
    match = BLOCK.search(PAGE.read_text())
    assert match is not None, "admission.md has no example block"
    settings.SCYLLA = ast.literal_eval(match.group(2).removeprefix("SCYLLA = "))
    exec(compile(match.group(1), str(PAGE), "exec"), {})
    printed = capsys.readouterr().out.splitlines()
    scope, size, retry_after = printed[0].rsplit(" ", 2)
    assert (scope, size) == ("queue reports", "3") and int(retry_after) >= 1
    assert printed[1:] == ["key tenant:acme", "1"]
    assert Task.objects.filter(queue="reports").count() == 3
    thumbnails = Task.objects.filter(queue="thumbnails")
    assert thumbnails.filter(status=Status.READY).count() == 2
    assert thumbnails.filter(status=Status.CANCELLED, errors__0__code="shed").count() == 3
    assert TaskOrigin.objects.filter(admission_key="tenant:acme").count() == 2
    assert TaskOrigin.objects.get(user__username="ann").description == "welcome"
