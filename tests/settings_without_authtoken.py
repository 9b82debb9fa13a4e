"""The test settings without `rest_framework.authtoken`: the API on session authentication."""

from tests.settings import *  # noqa: F403
from tests.settings import INSTALLED_APPS

INSTALLED_APPS = [app for app in INSTALLED_APPS if app != "rest_framework.authtoken"]
