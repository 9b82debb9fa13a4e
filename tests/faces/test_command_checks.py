"""The system checks the project's commands run at start: this app's own and Django's model
checks, not the web's (templates, URLs, the admin, static files), which import the whole web
stack into every worker, monitor and command line."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command, get_commands, load_command_class
from django.core.management.base import SystemCheckError

from scylla_django.management.base import COMMAND_CHECKS

pytestmark = pytest.mark.django_db


def test_every_command_of_the_app_runs_its_checks_and_the_models():
    ours = sorted(name for name, app in get_commands().items() if app == "scylla_django")
    assert "scylla_worker" in ours and "scylla_monitor" in ours
    for name in ours:
        command = load_command_class("scylla_django", name)
        # scylla_health reports on a running system, whatever its settings say.
        expected = [] if name == "scylla_health" else COMMAND_CHECKS
        assert command.requires_system_checks == expected, name


def test_a_bad_setting_of_the_app_stops_a_command(settings):
    settings.SCYLLA = {"SPEC_SIZE_LIMIT": "a lot"}
    with pytest.raises(SystemCheckError, match=r"scylla_django\.E001"):
        call_command("scylla_tasks", "list", stdout=io.StringIO(), skip_checks=False)


def test_a_web_misconfiguration_is_the_web_servers_check_not_a_commands(settings):
    settings.STATICFILES_DIRS = "static"  # not a list: staticfiles.E001
    with pytest.raises(SystemCheckError, match=r"staticfiles\.E001"):
        call_command("check", stdout=io.StringIO(), stderr=io.StringIO())
    out = io.StringIO()
    call_command("scylla_tasks", "list", stdout=out, skip_checks=False)
    assert out.getvalue() == "No task matches.\n"
