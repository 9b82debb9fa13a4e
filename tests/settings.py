"""Settings for the test suite. DATABASE_URL picks the database (SQLite by default)."""

import json
import os

import dj_database_url

SECRET_KEY = "scylla-django-tests"
USE_TZ = True
TIME_ZONE = "UTC"
DEBUG = False
ALLOWED_HOSTS = ["*"]
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "django_filters",
    "drf_spectacular",
    "scylla_django",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "tests.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]
STATIC_URL = "static/"
# Task logs (and any file) go to memory: a test that reads them names a folder of its own.
STORAGES: dict[str, dict[str, object]] = {
    "default": {"BACKEND": "django.core.files.storage.InMemoryStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast test logins

DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get("DATABASE_URL", "sqlite:///scylla-tests.sqlite3"), conn_max_age=0
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"]["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": 60,  # a loaded machine may keep a writer long
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
    if os.environ.get("SCYLLA_TEST_SQLITE_NO_TRANSACTION_MODE"):  # as a user might leave it
        del DATABASES["default"]["OPTIONS"]["transaction_mode"]
    # A file, not memory, so that other processes see the same database.
    DATABASES["default"]["TEST"] = {"NAME": DATABASES["default"]["NAME"] + ".test"}

# More databases (a replica, a second primary) by alias, as URLs in JSON; with them the routers.
for _alias, _url in json.loads(os.environ.get("SCYLLA_TEST_DATABASES", "{}")).items():
    DATABASES[_alias] = dj_database_url.parse(_url, conn_max_age=0)
if len(DATABASES) > 1:
    DATABASE_ROUTERS = ["scylla_django.routers.ReadRouter", "scylla_django.routers.QueueRouter"]

SCYLLA: dict[str, object] = {}
# Several servers, one of them the primary (tests/ha's failover): "host:port,host:port", tried
# in turn by libpq for a read-write session.
if os.environ.get("SCYLLA_TEST_PG_HOSTS"):
    servers = [server.rsplit(":", 1) for server in os.environ["SCYLLA_TEST_PG_HOSTS"].split(",")]
    DATABASES["default"]["HOST"] = ",".join(host for host, _ in servers)
    DATABASES["default"]["PORT"] = ",".join(port for _, port in servers)
    DATABASES["default"].setdefault("OPTIONS", {})["target_session_attrs"] = "read-write"
    DATABASES["default"]["OPTIONS"]["connect_timeout"] = 2
# Behind a transaction-mode pooler (tests/ha): DATABASE_URL is the pooler, so no server-side
# cursor nor prepared statement; SCYLLA_TEST_LISTEN_URL, if given, reaches the server itself
# and takes the workers' LISTEN.
if os.environ.get("SCYLLA_TEST_POOLED"):
    DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = True
if os.environ.get("SCYLLA_TEST_LISTEN_URL"):
    DATABASES["listen"] = dj_database_url.parse(os.environ["SCYLLA_TEST_LISTEN_URL"])
    DATABASES["listen"]["TEST"] = {"MIRROR": "default"}
    SCYLLA["LISTEN_DATABASE"] = "listen"
# Task logs in a folder every process of a test sees (a test of processes' task logs names it).
if os.environ.get("SCYLLA_TEST_LOG_DIR"):
    STORAGES["tasklogs"] = {
        "BACKEND": "django.core.files.storage.FileSystemStorage",
        "OPTIONS": {"location": os.environ["SCYLLA_TEST_LOG_DIR"]},
    }
    SCYLLA["TASK_LOG_STORAGE"] = "tasklogs"
# A child process's own settings (a worker with a short timeout grace, say), as JSON.
if os.environ.get("SCYLLA_TEST_SETTINGS"):
    SCYLLA.update(json.loads(os.environ["SCYLLA_TEST_SETTINGS"]))

# Django 6+: django.tasks on Scylla (ignored by Django 5.2).
TASKS = {
    "default": {
        "BACKEND": "scylla_django.backends.ScyllaBackend",
        "QUEUES": ["default", "dj-mail"],
    }
}
