"""pytest fixtures for a project's own tests. Load them in the project's `conftest.py`:

```python
pytest_plugins = ["scylla_django.pytest_plugin"]
```

- `scylla_clock`: the database clock, shifted as the test says (`scylla_django.testing.
  virtual_clock()`), on a transactional database (it requests pytest-django's
  `transactional_db`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from .db.virtual_clock import VirtualClock


@pytest.fixture
def scylla_clock(transactional_db: Any) -> Iterator[VirtualClock]:
    """The database clock of the default database, which `scylla_clock.advance(delta)` moves
    ahead for every statement of the test's process; back to the real clock after the test."""
    from .testing import virtual_clock  # Django is set up by now

    with virtual_clock() as clock:
        yield clock
