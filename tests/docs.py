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
    the same or a higher level, or the end of the page."""
    level = heading.split(" ", 1)[0]
    start = text.index(f"\n{heading}\n") + len(heading) + 2
    ends = [text.find(f"\n{'#' * n} ", start) for n in range(1, len(level) + 1)]
    found = [end for end in ends if end != -1]
    return text[start : min(found)] if found else text[start:]
