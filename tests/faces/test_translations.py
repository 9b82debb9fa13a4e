"""What users read in the admin (its code and templates), the API's errors and the system checks
is translatable: the strings are marked for `makemessages`, and a project's translation of them
is shown."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from django.core import checks
from django.test import override_settings
from django.utils import translation

import scylla_django
from scylla_django.admin import task_actions

from ..helpers import API

PACKAGE = Path(scylla_django.__file__).parent
MARKED = [
    "Cancel selected (ready/running only)",  # an admin action
    "Lease reset: %(rn)s is ready again (%(owner)s lost it).",  # an admin message
    "No API route matches %(path)r.",  # an API error
    "Unknown query parameter. %(hint)s",
    "SQLite database %(alias)r is not set up for concurrent workers.",  # a system check
    "SCYLLA[%(name)r] is not a scylla_django setting and is ignored.",
    "Locks held",  # the admin's templates
    "No monitor is running",
]
TRANSLATED = {
    "Cancel selected (ready/running only)": "Annuler la sélection (prêtes ou en cours)",
    "No API route matches %(path)r.": "Aucune route de l'API ne correspond à %(path)r.",
    "SCYLLA[%(name)r] is not a scylla_django setting and is ignored.": (
        "SCYLLA[%(name)r] n'est pas un réglage de scylla_django ; il est ignoré."
    ),
}

pytestmark = pytest.mark.skipif(
    shutil.which("xgettext") is None or shutil.which("msgfmt") is None,
    reason="needs GNU gettext (xgettext, msgfmt)",
)


@pytest.fixture(scope="module")
def catalog(tmp_path_factory) -> Path:
    """A French catalog of the package made by `makemessages`, with a few strings translated
    and compiled: the locale directory."""
    root = tmp_path_factory.mktemp("i18n")
    shutil.copytree(PACKAGE, root / "scylla_django", ignore=shutil.ignore_patterns("__pycache__"))
    app = root / "scylla_django"
    (app / "locale").mkdir(exist_ok=True)
    django_admin = [sys.executable, "-m", "django"]
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    subprocess.run([*django_admin, "makemessages", "-l", "fr"], cwd=app, env=env, check=True)
    po = app / "locale" / "fr" / "LC_MESSAGES" / "django.po"
    text = po.read_text()
    for source, target in TRANSLATED.items():
        entry = f'msgid "{source}"\nmsgstr ""'
        assert entry in text, source
        text = text.replace(entry, f'msgid "{source}"\nmsgstr "{target}"')
    po.write_text(text)
    subprocess.run(["msgfmt", "-o", str(po.with_suffix(".mo")), str(po)], check=True)
    return app / "locale"


def test_the_admin_api_and_checks_strings_are_marked(catalog):
    text = (catalog / "fr" / "LC_MESSAGES" / "django.po").read_text()
    msgids = set(re.findall(r'^msgid "(.+)"$', text, flags=re.M))
    missing = [s for s in MARKED if s not in msgids]
    assert not missing


def test_a_projects_translation_is_shown(catalog, client, db):
    with override_settings(LOCALE_PATHS=[str(catalog)]), translation.override("fr"):
        action = task_actions.cancel_selected
        assert str(action.short_description) == TRANSLATED["Cancel selected (ready/running only)"]
        detail = client.get(f"{API}/no-such-route/").json()["detail"]
        assert detail == "Aucune route de l'API ne correspond à '/api/scylla/no-such-route/'."
        with override_settings(SCYLLA={"NO_SUCH_SETTING": 1}):
            messages = [m.msg for m in checks.run_checks() if m.id == "scylla_django.W001"]
        assert messages == [
            "SCYLLA['NO_SUCH_SETTING'] n'est pas un réglage de scylla_django ; il est ignoré."
        ]
