"""Every ```python block of the documentation (docs/**/*.md and README.md) runs as written.

A block runs here (exec'd in a namespace of its own, against the test database, its `@handler`s
registered in a registry of the test's own) unless the line before it says otherwise:

- `<!-- not run: REASON -->`: a fragment that cannot run alone (a part of a project's settings,
  code naming your own models); the reason is required;
- `<!-- run by tests/PATH.py -->`: a test of its own reads the block out of the page and checks
  what it does; that file must exist and name the page.

A new page's examples are covered without a word here.
"""

from __future__ import annotations

import functools
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.dispatch import Signal

import scylla_django
from scylla_django import notify, queue_keys, retries, signals, spec_versions, testing
from scylla_django.handlers import HandlerRegistry, handler
from tests.docs import DOCS, ROOT

FENCE = re.compile(r"^( *)```python\n(.*?)^\1```$", re.DOTALL | re.MULTILINE)
MARK = re.compile(r"<!-- (not run: (?P<reason>.*?)|run by (?P<test>tests/\S+\.py)) -->")


@dataclass(frozen=True)
class Example:
    """One ```python block of a page."""

    page: Path
    line: int
    code: str
    mark: str  # the line before the block

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def examples() -> list[Example]:
    found = []
    for page in [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]:
        text = page.read_text()
        for match in FENCE.finditer(text):
            before = [line for line in text[: match.start()].splitlines() if line.strip()]
            found.append(
                Example(
                    page=page,
                    line=text.count("\n", 0, match.start()) + 1,
                    code=textwrap.dedent(match.group(2)),
                    mark=before[-1].strip() if before else "",
                )
            )
    return found


EXAMPLES = examples()
RUN = [e for e in EXAMPLES if not MARK.fullmatch(e.mark)]
# Keys are refused on MySQL/MariaDB (the `keys` marker skips these there, as documented).
KEYS = re.compile(r"\b(unique_key|locks|limits|order_key|rate_key)=|scylla_django\.lock\(")
MARKED = [e for e in EXAMPLES if MARK.fullmatch(e.mark)]


def test_the_pages_have_examples_to_run():
    assert len(RUN) >= 10, [e.name for e in RUN]


@pytest.mark.parametrize("example", MARKED, ids=[e.name for e in MARKED])
def test_a_block_not_run_here_says_why_or_which_test_runs_it(example: Example):
    match = MARK.fullmatch(example.mark)
    assert match is not None
    if match.group("test"):
        test = ROOT / match.group("test")
        assert test.exists(), f"{example.name}: {test} does not exist"
        page = example.page.relative_to(DOCS).as_posix()
        assert page in test.read_text(), f"{example.name}: {test} does not read {page}"
    else:
        assert match.group("reason").strip(), f"{example.name}: say why the block is not run"


#: What `@handler` records per queue outside its registry (default keys, retry policies,
#: notify URLs, spec versions): put back as it was after each block.
QUEUE_DEFAULTS = [
    (queue_keys, "_queue_keys"),
    (retries, "_queue_policies"),
    (notify, "_queue_urls"),
    (spec_versions, "_queues"),
]


@pytest.fixture
def registry(monkeypatch) -> HandlerRegistry:
    """`from scylla_django import handler` in a block registers here, not in the process,
    the testing helpers run what it registered, and what it records per queue beside the
    registry is forgotten after the block."""
    own = HandlerRegistry()
    monkeypatch.setattr(scylla_django, "handler", functools.partial(handler, registry=own))
    # `from scylla_django.testing import run_task` (or `drain`) in a block runs its handlers.
    monkeypatch.setattr(testing, "run_task", functools.partial(testing.run_task, registry=own))
    monkeypatch.setattr(testing, "drain", functools.partial(testing.drain, registry=own))
    for module, name in QUEUE_DEFAULTS:
        monkeypatch.setattr(module, name, dict(getattr(module, name)))
    return own


@pytest.fixture
def receivers():
    """The signal receivers a block connects are disconnected after it."""
    before = {name: list(s.receivers) for name, s in vars(signals).items() if isinstance(s, Signal)}
    yield
    for name, kept in before.items():
        signal: Signal = getattr(signals, name)
        with signal.lock:
            signal.receivers = kept
            signal.sender_receivers_cache.clear()


@pytest.mark.django_db
@pytest.mark.parametrize(
    "example",
    [pytest.param(e, marks=[pytest.mark.keys] if KEYS.search(e.code) else []) for e in RUN],
    ids=[e.name for e in RUN],
)
def test_the_example_runs(example: Example, registry, receivers):
    code = compile(example.code, example.name, "exec")
    exec(code, {"__name__": "docs_example"})
