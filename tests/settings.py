"""Settings for the test suite. DATABASE_URL picks the database (SQLite by default)."""

import os

import dj_database_url

SECRET_KEY = "scylla-django-tests"
USE_TZ = True
TIME_ZONE = "UTC"
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "scylla_django",
]

DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get("DATABASE_URL", "sqlite:///scylla-tests.sqlite3"), conn_max_age=0
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"]["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
    # A file, not memory, so that other processes see the same database.
    DATABASES["default"]["TEST"] = {"NAME": DATABASES["default"]["NAME"] + ".test"}

SCYLLA: dict[str, object] = {}
