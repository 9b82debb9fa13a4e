"""One word per concept: words retired from a concept stay retired, in the code and the docs.

"Hold" is what possesses a key: a task or code outside tasks holds a lock (`scylla_django.lock()`
gives a hold with a token), a worker holds a lease. An operator keeping one ready task from
every lease *pauses* it, as a queue is paused; a follow-up waits for its parents
(`AFTER_PARENTS`). The old names of those two are refused here wherever they could come back.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: Each retired spelling, and the word that replaced it.
RETIRED = {
    r"\bTaskHold\b": "TaskPause",
    r"\bON_HOLD\b": "PAUSED",
    r"\btask_holds\b": "task_pauses",
    r"\bTaskHeld\b|\btask_held\b": "TaskPaused / task_paused",
    r"\bNotHeld\b|\bnot_held\b": "NotPaused / not_paused",
    r"(?<!force_)\brelease_hold\(": "Task.resume()",
    r"\.hold\(by=|\bhold_selected\b|/tasks/\{+rn\}+/hold/": "pause",
    r"scylla_tasks (hold|release) ": "scylla_tasks pause|resume",
    r"\bHELD\b": "AFTER_PARENTS",
}


def sources() -> list[Path]:
    """The package (its migrations aside), the tests (this file aside), the docs, the README
    and the changelog."""
    found = [p for p in (ROOT / "scylla_django").rglob("*") if p.suffix in {".py", ".html", ".js"}]
    found += [p for p in (ROOT / "tests").rglob("*.py") if p != Path(__file__).resolve()]
    found += list((ROOT / "docs").rglob("*.md"))
    found += [ROOT / "README.md", ROOT / "CHANGELOG.md"]
    return [p for p in found if p.is_file() and "migrations" not in p.parts]


@pytest.mark.parametrize("pattern", sorted(RETIRED))
def test_a_retired_word_does_not_come_back(pattern: str) -> None:
    spelling = re.compile(pattern)
    uses = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in sources()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if spelling.search(line)
    ]
    assert not uses, f"say {RETIRED[pattern]!r} instead:\n" + "\n".join(uses)
