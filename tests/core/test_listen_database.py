"""SCYLLA["LISTEN_DATABASE"]: the alias a worker's LISTEN connection is made from, and the
system check (scylla_django.W004) that warns of a pooled database whose workers would LISTEN
through the pooler."""

from __future__ import annotations

import pytest

from scylla_django.checks import check_listen_database, check_settings
from scylla_django.conf import scylla_settings

pytestmark = pytest.mark.filterwarnings("ignore:Overriding setting DATABASES")

POSTGRES = {"ENGINE": "django.db.backends.postgresql", "NAME": "app"}
POOLED = {**POSTGRES, "PORT": 6432, "DISABLE_SERVER_SIDE_CURSORS": True}


def ids(messages) -> list[str]:
    return [message.id for message in messages]


def test_a_pooled_database_without_a_listen_database_is_warned_of(settings):
    settings.DATABASES = {"default": POOLED}
    [warning] = check_listen_database()
    assert warning.id == "scylla_django.W004"
    assert "'default'" in warning.msg
    assert 'SCYLLA["LISTEN_DATABASE"]' in warning.hint


def test_a_listen_database_that_reaches_the_server_silences_it(settings):
    settings.DATABASES = {"default": POOLED, "direct": POSTGRES}
    settings.SCYLLA = {"LISTEN_DATABASE": "direct"}
    assert check_listen_database() == []
    assert scylla_settings.listen_alias("default") == "direct"


def test_a_listen_database_through_the_pooler_too_is_warned_of(settings):
    settings.DATABASES = {"default": POOLED, "other": POOLED}
    settings.SCYLLA = {"LISTEN_DATABASE": "other"}
    assert ids(check_listen_database()) == ["scylla_django.W004", "scylla_django.W004"]


def test_by_alias_each_pooled_database_needs_its_own(settings):
    settings.DATABASES = {"default": POOLED, "eu": POOLED, "direct": POSTGRES}
    settings.SCYLLA = {"LISTEN_DATABASE": {"default": "direct"}}
    [warning] = check_listen_database()
    assert "'eu'" in warning.msg
    assert scylla_settings.listen_alias("eu") == "eu"
    assert scylla_settings.listen_alias("default") == "direct"


def test_an_unpooled_database_needs_nothing(settings):
    settings.DATABASES = {"default": POSTGRES}
    assert check_listen_database() == []
    assert scylla_settings.listen_alias("default") == "default"


@pytest.mark.parametrize("value", ["nope", 3, {"default": "nope"}, {"nope": "default"}])
def test_an_unknown_alias_is_an_error(settings, value):
    settings.SCYLLA = {"LISTEN_DATABASE": value}
    assert "scylla_django.E001" in ids(check_settings())
    assert check_listen_database() == []
