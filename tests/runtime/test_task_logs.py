"""Task logs: captured per task while its handler runs, capped, stored through Django's storage
API, read by the admin, the API and `scylla_tasks show --log`, and deleted with the task."""

from __future__ import annotations

import asyncio
import io
import logging
import re
import threading
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.db.models.functions import Now

from scylla_django.checks import check_task_log_storage
from scylla_django.conf import scylla_settings
from scylla_django.enums import Status
from scylla_django.handlers import handler
from scylla_django.logs import log_name
from scylla_django.models import Task
from scylla_django.worker import TaskWorker, WorkerOptions
from tests.docs import page
from tests.helpers import client_for, make_user, staff

pytestmark = pytest.mark.django_db(transaction=True)
PAGE = page("howto/task-logs.md")

app_logger = logging.getLogger("tests.app")
STARTED = threading.Barrier(2)


@handler("t-log")
def logs_a_little(ctx):
    ctx.logger.info("working on %s", ctx.spec["name"])
    app_logger.warning("app says %s", ctx.spec["name"])
    app_logger.debug("too fine to pass the logger's level")
    if ctx.spec.get("together"):
        STARTED.wait(timeout=10)  # two handlers log at the same time
        for n in range(50):
            ctx.logger.info("%s line %d", ctx.spec["name"], n)
    if ctx.spec.get("fail"):
        raise RuntimeError("it went wrong")
    return None


@handler("t-log-async")
async def logs_asynchronously(ctx):
    for n in range(20):
        ctx.logger.info("%s step %d", ctx.spec["name"], n)
        await asyncio.sleep(0.005)
    return None


@handler("t-log-much")
def logs_a_lot(ctx):
    for n in range(1000):
        ctx.logger.info("line %04d %s", n, "x" * 50)
    return None


@handler("t-log-nothing")
def logs_nothing(ctx):
    return {"quiet": True}


@handler("t-log-snooze")
def logs_then_snoozes(ctx):
    ctx.logger.info("run %d", ctx.task.snoozes)
    if ctx.task.snoozes == 0:
        ctx.snooze(timedelta(minutes=5))
    return None


@pytest.fixture(autouse=True)
def storage(settings, tmp_path) -> Path:
    """Task logs go to a folder of their own (a storage alias the project names)."""
    settings.STORAGES = {
        **settings.STORAGES,
        "tasklogs": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": str(tmp_path)},
        },
    }
    settings.SCYLLA = {**settings.SCYLLA, "TASK_LOG_STORAGE": "tasklogs"}
    app_logger.setLevel(logging.INFO)
    return tmp_path


def run(queue: str, **options) -> None:
    TaskWorker(WorkerOptions([queue], poll_interval=0.05, **options)).run(once=True)


def test_what_a_handler_logs_is_kept_with_its_task(storage):
    task = Task.objects.submit("t-log", {"name": "alpha"}, rn="job:1")
    run("t-log")
    task.refresh_from_db()
    assert task.status == Status.COMPLETED
    text = task.read_log()
    assert "INFO scylla_django.task: [job:1] working on alpha" in text
    assert "WARNING tests.app: app says alpha" in text
    assert "too fine" not in text
    # In the storage named by the setting, under a name made of the rn (its ':' quoted).
    assert task.log == log_name("job:1") == "scylla_django/logs/job%3A1.log"
    assert (storage / "scylla_django/logs/job%3A1.log").read_text() == text


def test_the_outcome_s_own_write_names_the_log(monkeypatch):
    """A completed or aborted task's log is named by the statement that writes its outcome,
    not by a statement of its own."""

    def no_statement_of_its_own(task, text):
        raise AssertionError(f"{task.rn}: the log was named by a statement of its own")

    monkeypatch.setattr(Task, "keep_log", no_statement_of_its_own)
    done = Task.objects.submit("t-log", {"name": "zeta"}, rn="named:1")
    failed = Task.objects.submit("t-log", {"name": "eta", "fail": True}, rn="named:2")
    run("t-log", concurrency=2)
    for task, status in ((done, Status.COMPLETED), (failed, Status.ABORTED)):
        task.refresh_from_db()
        assert (task.status, task.log) == (status, log_name(task.rn))
        assert "app says" in task.read_log()


def test_a_snoozed_task_keeps_the_log_of_the_run_that_snoozed():
    task = Task.objects.submit("t-log-snooze", {}, rn="snoozer")
    run("t-log-snooze")
    task.refresh_from_db()
    assert (task.status, task.snoozes) == (Status.READY, 1)
    assert "run 0" in task.read_log()


def test_concurrent_handlers_keep_their_own_lines():
    Task.objects.submit("t-log", {"name": "one", "together": True}, rn="one")
    Task.objects.submit("t-log", {"name": "two", "together": True}, rn="two")
    run("t-log", concurrency=2)
    one, two = Task.objects.get(rn="one").read_log(), Task.objects.get(rn="two").read_log()
    assert one.count("one line") == 50 and "two" not in one
    assert two.count("two line") == 50 and "one" not in two


def test_async_handlers_keep_their_own_lines():
    for name in ("a1", "a2", "a3"):
        Task.objects.submit("t-log-async", {"name": name}, rn=name)
    run("t-log-async", concurrency=3)
    for name in ("a1", "a2", "a3"):
        text = Task.objects.get(rn=name).read_log()
        assert text.count(f"{name} step") == 20
        assert all(other not in text for other in {"a1", "a2", "a3"} - {name})


def test_a_handler_s_exception_ends_its_log_with_the_traceback():
    task = Task.objects.submit("t-log", {"name": "beta", "fail": True})
    run("t-log")
    task.refresh_from_db()
    assert task.status == Status.ABORTED
    text = task.read_log()
    assert text.index("app says beta") < text.index("Traceback (most recent call last)")
    assert "RuntimeError: it went wrong" in text


def test_the_log_is_capped_with_a_marker(settings):
    settings.SCYLLA = {**settings.SCYLLA, "TASK_LOG_MAX_BYTES": 2000}
    task = Task.objects.submit("t-log-much", {})
    run("t-log-much")
    text = Task.objects.get(pk=task.pk).read_log()
    kept, marker = text.split("\n[log truncated: ")
    assert len(kept.encode()) <= 2000
    assert kept.startswith(text[:40]) and "line 0000" in kept and "line 0999" not in kept
    assert "more bytes were left out (SCYLLA['TASK_LOG_MAX_BYTES'] = 2,000)" in marker


def test_no_log_when_nothing_was_logged_or_capture_is_off(settings, storage):
    quiet = Task.objects.submit("t-log-nothing", {})
    run("t-log-nothing")
    settings.SCYLLA = {**settings.SCYLLA, "TASK_LOG_MAX_BYTES": 0}
    off = Task.objects.submit("t-log", {"name": "gamma"})
    run("t-log")
    for task in (quiet, off):
        task.refresh_from_db()
        assert task.status == Status.COMPLETED
        assert (task.log, task.read_log()) == (None, None)
    assert not (storage / "scylla_django").exists()


def test_a_storage_that_fails_costs_the_log_not_the_outcome(settings):
    settings.SCYLLA = {**settings.SCYLLA, "TASK_LOG_STORAGE": "nowhere"}
    with pytest.raises(ImproperlyConfigured, match=r"alias of settings\.STORAGES"):
        _ = scylla_settings.TASK_LOG_STORAGE
    task = Task.objects.submit("t-log", {"name": "epsilon"})
    run("t-log")
    task.refresh_from_db()
    assert (task.status, task.log) == (Status.COMPLETED, None)


def test_a_fresh_project_keeps_no_log_until_it_names_a_storage(settings, tmp_path, monkeypatch):
    """Without `TASK_LOG_STORAGE`, no log is written: not under the working directory of each
    process (MEDIA_ROOT unset), nor in the default storage, which projects serve publicly."""
    settings.STORAGES = {
        **settings.STORAGES,
        "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    }
    settings.MEDIA_ROOT = ""
    settings.SCYLLA = {k: v for k, v in settings.SCYLLA.items() if k != "TASK_LOG_STORAGE"}
    monkeypatch.chdir(tmp_path)
    assert scylla_settings.TASK_LOG_STORAGE is None
    task = Task.objects.submit("t-log", {"name": "fresh", "fail": True})
    run("t-log")
    task.refresh_from_db()
    assert (task.status, task.log, task.read_log()) == (Status.ABORTED, None, None)
    task.keep_log("kept by hand\n")
    assert (task.log, task.read_log()) == (None, None)
    assert list(tmp_path.iterdir()) == []
    # Those who look for the log are told why there is none.
    answer = client_for(make_user("reader", "view_task")).get(f"/api/scylla/tasks/{task.rn}/log/")
    assert answer.status_code == 404
    assert answer.json()["code"] == "no_log"
    assert answer.json()["detail"] == (
        f"Task {task.rn} has no log: SCYLLA['TASK_LOG_STORAGE'] names no storage, so no task "
        "log is kept."
    )
    out = io.StringIO()
    call_command("scylla_tasks", "show", task.rn, "--log", stdout=out)
    assert "log: none (SCYLLA['TASK_LOG_STORAGE'] names no storage" in out.getvalue()


FILES = "django.core.files.storage.FileSystemStorage"


@pytest.mark.parametrize(
    ("alias", "config", "media_root"),
    [
        ("default", None, "/srv/media"),  # the default storage itself
        ("copy", {"BACKEND": FILES}, ""),  # configured as the default one is
        ("under", {"BACKEND": FILES, "OPTIONS": {"location": "/srv/media/logs"}}, "/srv/media"),
    ],
)
def test_check_warns_when_task_logs_go_to_the_public_media_storage(
    settings, alias, config, media_root
):
    settings.MEDIA_ROOT = media_root
    settings.STORAGES = {**settings.STORAGES, "default": {"BACKEND": FILES}}
    if config is not None:
        settings.STORAGES = {**settings.STORAGES, alias: config}
    settings.SCYLLA = {"TASK_LOG_STORAGE": alias}
    [warning] = check_task_log_storage()
    assert warning.id == "scylla_django.W005"
    assert "served" in warning.msg
    assert "TASK_LOG_STORAGE" in warning.hint


def test_check_warns_when_task_logs_go_under_each_process_s_working_directory(settings):
    settings.MEDIA_ROOT = ""
    settings.STORAGES = {
        **settings.STORAGES,
        "relative": {"BACKEND": FILES, "OPTIONS": {"location": "task-logs"}},
    }
    settings.SCYLLA = {"TASK_LOG_STORAGE": "relative"}
    [warning] = check_task_log_storage()
    assert warning.id == "scylla_django.W006"
    assert "working directory" in warning.msg


def test_check_is_quiet_about_a_private_log_storage_or_none(settings, storage):
    assert check_task_log_storage() == []  # the fixture's own folder, an absolute path
    settings.SCYLLA = {}
    assert check_task_log_storage() == []  # no log is kept: nothing to warn about


def test_the_documented_log_storage_passes_check_and_keeps_logs(settings, tmp_path):
    [_, block] = re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.DOTALL)
    names: dict[str, object] = {}
    exec(compile(block, str(PAGE), "exec"), names)
    settings.STORAGES, settings.SCYLLA = names["STORAGES"], names["SCYLLA"]
    settings.MEDIA_ROOT = "/var/www/media"
    assert check_task_log_storage() == []
    own = {"BACKEND": FILES, "OPTIONS": {"location": str(tmp_path)}}  # a folder we may write
    settings.STORAGES = {**settings.STORAGES, "scylla_logs": own}
    task = Task.objects.submit("t-log", {"name": "readme"}, rn="readme")
    run("t-log")
    assert "working on readme" in Task.objects.get(pk=task.pk).read_log()
    assert (tmp_path / "scylla_django/logs/readme.log").exists()


def test_a_task_keeps_the_log_of_its_last_run(storage):
    task = Task.objects.submit("t-log-nothing", {}, rn="twice")
    task.keep_log("first run\n")
    task.keep_log("second run\n")
    assert Task.objects.get(rn="twice").read_log() == "second run\n"
    assert [p.name for p in (storage / "scylla_django/logs").iterdir()] == ["twice.log"]


def test_purge_and_delete_remove_the_logs(storage):
    for rn in ("old", "new", "gone"):
        Task.objects.submit("t-log", {"name": rn}, rn=rn)
    run("t-log", concurrency=3)
    folder = storage / "scylla_django/logs"
    assert sorted(p.name for p in folder.iterdir()) == ["gone.log", "new.log", "old.log"]
    Task.objects.filter(rn="old").update(updated=Now() - timedelta(days=30))
    assert Task.objects.purge(older_than=timedelta(days=1)) == 1
    Task.objects.get(rn="gone").delete()
    assert [p.name for p in folder.iterdir()] == ["new.log"]


# -- faces ----------------------------------------------------------------------------------


@pytest.fixture
def logged():
    task = Task.objects.submit("t-log", {"name": "delta"}, rn="logged")
    Task.objects.submit("t-log-nothing", {}, rn="silent")
    run("t-log")
    run("t-log-nothing")
    return Task.objects.get(pk=task.pk)


def test_the_api_serves_the_log_as_text(logged):
    api = client_for(make_user("reader", "view_task"))
    response = api.get("/api/scylla/tasks/logged/log/")
    assert response.status_code == 200
    assert response["Content-Type"] == "text/plain; charset=utf-8"
    assert response.content.decode() == logged.read_log()
    silent = api.get("/api/scylla/tasks/silent/log/")
    assert (silent.status_code, silent.json()["code"]) == (404, "no_log")
    unknown = api.get("/api/scylla/tasks/nope/log/")
    assert (unknown.status_code, unknown.json()["code"]) == (404, "task_not_found")
    assert client_for(make_user("nobody")).get("/api/scylla/tasks/logged/log/").status_code == 403


def test_the_admin_task_page_shows_the_log(logged):
    page = staff("view_task").get(f"/admin/scylla_django/task/{logged.pk}/change/")
    assert page.status_code == 200
    assert "working on delta" in page.content.decode()


def test_show_log_prints_it(logged):
    out = io.StringIO()
    call_command("scylla_tasks", "show", "logged", "--log", stdout=out)
    assert out.getvalue().endswith("log:\n" + logged.read_log())
    out = io.StringIO()
    call_command("scylla_tasks", "show", "silent", "--log", stdout=out)
    assert "log: none" in out.getvalue()
