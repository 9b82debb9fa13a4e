"""The virtual clock is refused on MySQL/MariaDB, before anything is changed."""

from __future__ import annotations

import pytest
from django.db import NotSupportedError, connection

from scylla_django.testing import virtual_clock


@pytest.mark.skipif(connection.vendor != "mysql", reason="it runs on PostgreSQL and SQLite")
@pytest.mark.django_db(transaction=True)
def test_the_virtual_clock_is_refused_on_mysql():
    with pytest.raises(NotSupportedError, match="PostgreSQL and SQLite"), virtual_clock():
        pass
