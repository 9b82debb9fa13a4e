"""docs/howto/eta.md's example runs as written, and prints what its comments say.

The block is read from the page itself (the ```python block that starts with `# eta`), so the
page cannot drift from what works; each `print` is checked against the comment beside it or on
the next line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.django_db

PAGE = Path(__file__).resolve().parents[2] / "docs" / "howto" / "eta.md"
BLOCK = re.compile(r"```python\n(# eta\n.*?)```", re.DOTALL)


def promised(code: str) -> list[str]:
    """What the block's comments say each print shows: the comment on its line, else the
    comment line that follows it."""
    lines = code.splitlines()
    said = []
    for index, line in enumerate(lines):
        if line.startswith("print("):
            comment = line.partition("#")[2].strip()
            if not comment:
                comment = lines[index + 1].strip().removeprefix("#").strip()
            said.append(comment)
    return said


@pytest.mark.keys  # limits and admission keys: not on MySQL/MariaDB
def test_the_eta_example_prints_what_it_says(capsys) -> None:
    match = BLOCK.search(PAGE.read_text())
    assert match is not None, "eta.md has no example block"
    code = match.group(1)
    exec(compile(code, str(PAGE), "exec"), {})
    printed = capsys.readouterr().out.splitlines()
    said = promised(code)
    assert len(printed) == len(said) == 4
    assert printed[:3] == said[:3]
    assert printed[3].endswith(said[3])
