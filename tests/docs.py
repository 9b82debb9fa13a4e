"""The documentation's pages, for the tests that run their examples as written."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def page(name: str) -> Path:
    """A page of the documentation site, by its path under docs/ (`howto/keys.md`)."""
    path = DOCS / name
    assert path.exists(), f"docs/{name} is gone: the test that runs its examples must follow it"
    return path


def section(text: str, heading: str) -> str:
    """The text under `heading` (a whole line, `## A first task`), up to the next heading of
    the same or a higher level outside code blocks, or the end of the page."""
    level = len(heading.split(" ", 1)[0])
    lines = text.split("\n")
    start = lines.index(heading) + 1
    fenced = False
    for end in range(start, len(lines)):
        line = lines[end]
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            marks = len(line) - len(line.lstrip("#"))
            if marks <= level and line[marks : marks + 1] == " ":
                return "\n".join(lines[start:end])
    return "\n".join(lines[start:])
