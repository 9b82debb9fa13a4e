"""The admin console through Django's test client: list, filters, search, detail, actions,
the bulk purge page and permissions."""

from __future__ import annotations

import re
from datetime import timedelta
from html import unescape

import pytest
from django.db import connection
from django.db.models.functions import Now
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from scylla_django import admin as scylla_admin
from scylla_django.admin import display as admin_display
from scylla_django.admin import task_list
from scylla_django.admin.task_page import family
from scylla_django.enums import EventType, Status
from scylla_django.models import History, Outcome, Task, TaskQuerySet, Worker
from tests.factories import TaskFactory, running_task
from tests.helpers import messages_of, staff

pytestmark = pytest.mark.django_db

LIST = reverse("admin:scylla_django_task_changelist")
DASHBOARD = reverse("admin:scylla_django_task_dashboard")
PURGE = reverse("admin:scylla_django_task_purge")


def task_in(status: str, worker: Worker, **kwargs) -> Task:
    """A task brought to `status` through the real transitions (no other task may be ready)."""
    if status == Status.READY:
        return TaskFactory(**kwargs)
    if status == Status.CANCELLED:
        task = TaskFactory(**kwargs)
        task.cancel()
        return task
    task = running_task(worker, **kwargs)
    if status == Status.COMPLETED:
        task.complete(worker, {"sent": 3})
    elif status == Status.ABORTED:
        task.abort(worker, [{"code": "boom", "args": {"n": 1}, "description": "it broke"}])
    return task


@pytest.fixture
def tasks(worker, other_worker) -> dict[str, Task]:
    """One task per status over three queues, two workers and spread priorities."""
    made = {
        "run": task_in(Status.RUNNING, worker, rn="run", queue="alpha", priority=10),
        "run2": task_in(Status.RUNNING, other_worker, rn="run2", queue="beta", priority=60),
        "done": task_in(Status.COMPLETED, worker, rn="done", queue="alpha", priority=60),
        "fail": task_in(Status.ABORTED, worker, rn="fail", queue="beta", priority=120),
        "gone": task_in(Status.CANCELLED, worker, rn="gone", queue="beta", priority=0),
        "wait": task_in(Status.READY, worker, rn="wait", queue="gamma", priority=220),
        "wait2": task_in(Status.READY, worker, rn="wait2", queue="alpha", priority=0),
    }
    # The abort was given up (a dead letter, which the bulk purge keeps): let it go.
    assert Task.objects.all().discard() == 1
    for task in made.values():
        task.refresh_from_db()
    return made


def listed(response) -> list[str]:
    """The rns on a changelist page, in order."""
    assert response.status_code == 200, response.status_code
    return [task.rn for task in response.context["cl"].result_list]


def act(client: Client, action: str, *tasks: Task, **extra: str):
    """POST an action on the changelist for `tasks`, following the redirect."""
    url = extra.pop("url", LIST)
    data = {"action": action, "index": "0", "_selected_action": [t.pk for t in tasks], **extra}
    return client.post(url, data, follow=True)


# -- the list --------------------------------------------------------------------------------


def test_list_shows_badges_progress_owner_and_links(admin_client, tasks):
    response = admin_client.get(LIST)
    html = response.content.decode()
    assert set(listed(response)) == set(tasks)
    assert listed(response)[0] == "wait2"  # newest first
    for status in Status:
        assert f'class="scylla-badge scylla-{status.value}"' in html
    assert '<progress class="scylla-progress" value="1.000" max="1">' in html  # completed
    assert f'href="{LIST}?owner={tasks["run"].owner}"' in html
    assert f'href="{LIST}?queue=gamma"' in html
    assert "scylla_django/admin.css" in html
    assert f'href="{DASHBOARD}"' in html
    assert f'href="{PURGE}"' in html


def test_list_marks_running_tasks_past_their_deadline(admin_client, tasks):
    Task.objects.filter(pk=tasks["run"].pk).update(deadline=Now() - timedelta(minutes=5))
    html = admin_client.get(LIST).content.decode()
    assert html.count('class="scylla-badge scylla-expired"') == 1
    # "5 min ago", or "5 min 2 s ago" on a machine slow to render the page.
    assert re.search(
        r'scylla-expired" title="[0-9-]+ [0-9:]+ UTC, 5 min( [0-9]+ s)? ago">expired<', html
    )


def test_list_never_counts_the_whole_table_nor_queries_per_row(admin_client, worker):
    for n in range(3):
        TaskFactory(rn=f"a{n}")
    with CaptureQueriesContext(connection) as few:
        admin_client.get(LIST)
    for n in range(30):
        TaskFactory(rn=f"b{n}", spec={"big": "x" * 1000})
    with CaptureQueriesContext(connection) as many:
        assert len(listed(admin_client.get(LIST))) == 33
    assert len(many) == len(few)
    table = connection.ops.quote_name("scylla_django_task")
    task_queries = [q["sql"] for q in many if table in q["sql"]]
    counts = [sql for sql in task_queries if "COUNT(" in sql.upper()]
    assert counts and all("LIMIT" in sql.upper() for sql in counts)
    # The rows are loaded without their payloads.
    assert not any(f"{table}.{connection.ops.quote_name('spec')}" in sql for sql in task_queries)


def test_list_count_is_exact_up_to_the_cap(admin_client, worker, monkeypatch):
    monkeypatch.setattr(task_list, "COUNT_CAP", 3)
    for n in range(3):
        TaskFactory(rn=f"t{n}")
    response = admin_client.get(LIST)
    assert response.context["cl"].result_count == 3
    assert type(response.context["cl"].result_count) is int


def test_list_count_past_the_cap(admin_client, worker, monkeypatch):
    """Past the cap PostgreSQL shows its estimate ("about N"); other databases count."""
    monkeypatch.setattr(task_list, "COUNT_CAP", 3)
    for n in range(5):
        TaskFactory(rn=f"t{n}")
    count = admin_client.get(LIST).context["cl"].result_count
    if connection.vendor == "postgresql":
        assert isinstance(count, scylla_admin.ApproximateCount)
        assert count >= 4
        assert str(count) == f"about {int(count):,}"
    else:
        assert count == 5


def test_approximate_count_reads_as_about():
    count = scylla_admin.ApproximateCount(765432)
    assert str(count) == "about 765,432"
    assert count + 1 == 765433
    assert count > 10_000


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("status=ready", {"wait", "wait2"}),
        ("status=running", {"run", "run2"}),
        ("status=completed", {"done"}),
        ("status=aborted", {"fail"}),
        ("status=cancelled", {"gone"}),
        ("status=expired", {"run"}),
        ("queue=beta", {"run2", "fail", "gone"}),
        ("queue=beta&status=running", {"run2"}),
        ("priority=0", {"gone", "wait2"}),
        ("priority=50-99", {"run2", "done"}),
        ("priority=200-255", {"wait"}),
        ("priority=120", {"fail"}),
        ("owner=OTHER", {"run2"}),
        ("owner=nobody", set()),
        ("owner=&queue=alpha", {"run", "done", "wait2"}),
    ],
)
def test_filters(admin_client, tasks, other_worker, query, expected):
    Task.objects.filter(pk=tasks["run"].pk).update(deadline=Now() - timedelta(seconds=1))
    query = query.replace("OTHER", other_worker.name)
    assert set(listed(admin_client.get(f"{LIST}?{query}"))) == expected


def test_time_range_filters(admin_client, tasks):
    Task.objects.filter(rn__in=["done", "fail"]).update(
        created=Now() - timedelta(days=3), updated=Now() - timedelta(days=2)
    )
    old = {"done", "fail"}
    two_days_ago = f"{(Task.objects.get(rn='done').updated):%Y-%m-%dT%H:%M}"
    one_day_ago = f"{Task.objects.get(rn='wait').created - timedelta(days=1):%Y-%m-%d}"
    assert set(listed(admin_client.get(f"{LIST}?created__lt={one_day_ago}"))) == old
    recent = set(listed(admin_client.get(f"{LIST}?created__gte={one_day_ago}")))
    assert recent == set(tasks) - old
    between = f"updated__gte={two_days_ago}&updated__lt={one_day_ago}"
    assert set(listed(admin_client.get(f"{LIST}?{between}"))) == old
    # The filter shows the range it applies, for the datetime-local inputs.
    html = admin_client.get(f"{LIST}?{between}").content.decode()
    assert f'name="updated__gte" value="{two_days_ago}"' in html


def test_time_range_presets_link_to_their_range(admin_client, tasks):
    html = admin_client.get(LIST).content.decode()
    links = re.findall(r'href="\?(created__gte=[^"]+)">Past 24 hours', html)
    assert len(links) == 1
    assert set(listed(admin_client.get(f"{LIST}?{links[0]}"))) == set(tasks)


@pytest.mark.parametrize(
    "query",
    [
        "priority=abc",
        "priority=300",
        "priority=50-10",
        "priority=-1",
        "status=bogus",
        "queue=%00",
        "queue=a%20b",
        "owner=%00",
        "owner=" + "w" * 65,
        "created__gte=garbage",
        "created__gte=2026-13-01",
        "updated__lt=2026-02-30T10:00",
        "updated__lt=%00",
    ],
)
def test_bad_filter_values_redirect_instead_of_failing(admin_client, tasks, query):
    response = admin_client.get(f"{LIST}?{query}")
    assert response.status_code == 302
    assert response["Location"].endswith("?e=1")


def test_times_out_of_range_once_in_utc_are_bad_lookups(admin_client, tasks, settings):
    settings.TIME_ZONE = "Asia/Tokyo"
    response = admin_client.get(f"{LIST}?created__lt=0001-01-01T01:00")
    assert response.status_code == 302
    assert set(listed(admin_client.get(f"{LIST}?created__gte=0001-01-02"))) == set(tasks)


def test_odd_page_and_order_parameters_are_ignored(admin_client, tasks):
    for query in ("p=abc", "p=999999", "o=abc", "o=99", "o=1.x"):
        assert set(listed(admin_client.get(f"{LIST}?{query}"))) == set(tasks)


@pytest.mark.parametrize(
    ("q", "expected"),
    [
        ("done", {"done"}),
        ("beta", {"run2", "fail", "gone"}),
        ("WORKER", {"run", "done", "fail"}),
        ("alpha WORKER", {"run", "done"}),
        ("nothing-like-this", set()),
        ("don", set()),  # exact matches only
        ("a b", set()),
        ("%00", None),  # Django's search form rejects it and shows everything
        ("<script>", set()),
        ("  ", None),
    ],
)
def test_search_by_rn_queue_or_owner(admin_client, tasks, worker, q, expected):
    response = admin_client.get(LIST, {"q": q.replace("WORKER", worker.name).replace("%00", "\0")})
    assert set(listed(response)) == (set(tasks) if expected is None else expected)


def test_only_indexed_columns_sort(admin_client, tasks):
    response = admin_client.get(f"{LIST}?o=-1")  # rn, descending
    assert listed(response) == sorted(tasks, reverse=True)
    newest_first = listed(admin_client.get(LIST))
    assert listed(admin_client.get(f"{LIST}?o=8")) == newest_first[::-1]  # created
    assert listed(admin_client.get(f"{LIST}?o=-8")) == newest_first
    # priority (column 4) is not sortable: ?o=4 falls back to the default order.
    assert listed(admin_client.get(f"{LIST}?o=4")) == newest_first
    html = admin_client.get(LIST).content.decode()
    sortable = re.findall(r'<th scope="col" class="sortable[^"]*column-(\w+)', html)
    assert sortable == ["rn", "created_at"]


# -- the detail ------------------------------------------------------------------------------


def test_detail_is_read_only_and_pretty(admin_client, tasks):
    task = tasks["fail"]
    url = reverse("admin:scylla_django_task_change", args=[task.pk])
    response = admin_client.get(url)
    html = response.content.decode()
    assert response.status_code == 200
    assert '<pre class="scylla-json">{\n  &quot;n&quot;: ' in html  # spec, indented
    assert "<td><code>boom</code></td><td>it broke</td>" in html  # errors table
    assert "scylla-badge scylla-aborted" in html
    assert re.search(r"<time datetime=[^>]+>[0-9-]+ [0-9:]+ UTC</time> <span", html)
    assert re.search(r"\(\d+(\.\d)? m?s ago\)", html)  # "(971 ms ago)", "(3.3 s ago)"
    assert 'name="_save"' not in html
    assert admin_client.post(url, {"queue": "other"}).status_code == 403
    assert admin_client.get(f"{url}delete/").status_code == 403
    assert admin_client.get(reverse("admin:scylla_django_task_add")).status_code == 403
    assert Task.objects.get(pk=task.pk).queue == "beta"


def test_detail_by_rn_redirects_to_the_task_s_page(admin_client, tasks):
    task = tasks["fail"]
    by_id = reverse("admin:scylla_django_task_change", args=[task.pk])
    response = admin_client.get(reverse("admin:scylla_django_task_change", args=["fail"]))
    assert response.status_code == 302
    assert response["Location"] == by_id
    assert admin_client.get(response["Location"]).context["original"] == task
    filters = "_changelist_filters=status%3Daborted"
    response = admin_client.get(f"/admin/scylla_django/task/fail/change/?{filters}")
    assert response["Location"] == f"{by_id}?{filters}"


def test_history_by_rn_redirects_to_the_task_s_history(admin_client, tasks):
    response = admin_client.get("/admin/scylla_django/task/fail/history/")
    url = reverse("admin:scylla_django_task_history", args=[tasks["fail"].pk])
    assert response["Location"] == url
    assert admin_client.get(url).status_code == 200


def test_detail_by_an_rn_of_digits_that_is_no_id(admin_client, worker):
    task = TaskFactory(rn="900000001")
    response = admin_client.get("/admin/scylla_django/task/900000001/change/")
    assert response["Location"] == reverse("admin:scylla_django_task_change", args=[task.pk])


@pytest.mark.parametrize("key", ["no-such-task", "99999999", "99999999999999999999", "a%20b"])
def test_detail_of_an_unknown_key_is_a_message_and_the_list(admin_client, tasks, key):
    response = admin_client.get(f"/admin/scylla_django/task/{key}/change/")
    assert response.status_code == 302
    assert response["Location"] == LIST
    [message] = messages_of(admin_client.get(LIST))
    assert "No task has the id or rn" in message


def test_detail_by_rn_needs_the_view_permission(tasks):
    assert staff().get("/admin/scylla_django/task/fail/change/").status_code == 403


def test_a_waiting_follow_up_shows_its_parents_and_no_far_off_date(admin_client, tasks):
    Task.objects.submit("delta", {}, rn="child", after=["done", "wait", "run"])
    Task.objects.submit("delta", {}, rn="later", after=["wait"], not_before=tasks["done"].created)
    Task.objects.filter(rn="run").delete()  # purged while the child waits
    html = admin_client.get(reverse("admin:scylla_django_task_change", args=["child"]), follow=True)
    html = html.content.decode()
    assert "9999" not in html
    assert "waiting for parents" in html
    parents = re.search(r'<ul class="scylla-parents">(.*?)</ul>', html, re.S)[1]
    done, wait = (
        reverse("admin:scylla_django_task_change", args=[tasks[k].pk]) for k in ("done", "wait")
    )
    assert re.findall(r"<li>(.*?)</li>", parents) == [
        f'<a href="{done}">done</a> <span class="scylla-badge scylla-completed">completed</span>',
        f'<a href="{wait}">wait</a> <span class="scylla-badge scylla-ready">ready</span>',
        'run <span class="scylla-age">purged</span>',
    ]
    assert "No events yet" in html
    later = admin_client.get("/admin/scylla_django/task/later/change/", follow=True)
    assert re.search(r"waiting for parents, then <time", later.content.decode())
    listed = admin_client.get(LIST, {"q": "delta"}).content.decode()
    assert listed.count("waiting for parents") == 2
    assert "9999" not in listed


def test_a_follow_up_s_parents_are_shown_up_to_a_limit(admin_client, worker, monkeypatch):
    monkeypatch.setattr(family, "PARENTS_LIMIT", 2)
    for n in range(5):
        TaskFactory(rn=f"p{n}")
    Task.objects.submit("q", {}, rn="child", after=[f"p{n}" for n in range(5)])
    html = admin_client.get("/admin/scylla_django/task/child/change/", follow=True)
    html = html.content.decode()
    parents = re.search(r'<ul class="scylla-parents">(.*?)</ul>', html, re.S)[1]
    assert re.findall(r"<li><a [^>]+>(p\d)</a>", parents) == ["p0", "p1"]
    assert "and 3 more" in html


def test_a_task_that_waits_for_nothing_has_no_parents_row(admin_client, tasks):
    html = admin_client.get(reverse("admin:scylla_django_task_change", args=[tasks["wait"].pk]))
    assert "waits for" not in html.content.decode()


def test_detail_shows_history_newest_first(admin_client, tasks):
    task = tasks["done"]
    response = admin_client.get(reverse("admin:scylla_django_task_change", args=[task.pk]))
    [formset] = response.context["inline_admin_formsets"]
    shown = [form.instance.typ for form in formset.formset.forms]
    assert shown == [EventType.COMPLETION, EventType.ASSIGNMENT]
    assert "2 events, shown below." in response.content.decode()


def test_detail_shows_only_the_latest_history(admin_client, tasks):
    task = tasks["run"]
    History.objects.bulk_create(
        History(task=task, typ=EventType.TIMEOUT, worker=f"worker-{n}") for n in range(204)
    )
    response = admin_client.get(reverse("admin:scylla_django_task_change", args=[task.pk]))
    [formset] = response.context["inline_admin_formsets"]
    forms = formset.formset.forms
    assert len(forms) == scylla_admin.HISTORY_LIMIT == 200
    assert forms[0].instance.worker == "worker-203"
    assert "205 events; the latest 200 are shown below." in response.content.decode()


def test_detail_folds_long_payloads(admin_client, worker):
    spec = {"lines": [f"line {n:05d}" for n in range(2000)]}
    task = TaskFactory(spec=spec)
    html = admin_client.get(
        reverse("admin:scylla_django_task_change", args=[task.pk])
    ).content.decode()
    head, rest = map(unescape, re.findall(r'<pre class="scylla-json">(.*?)</pre>', html, re.S)[:2])
    assert len(head) <= admin_display.PAYLOAD_PREVIEW
    assert '<details class="scylla-more"><summary>Show all: ' in html
    assert head.count("line ") + rest.count("line ") == 2000  # nothing lost, nothing twice


def test_detail_shows_error_args_whole_with_the_traceback_as_lines(admin_client, worker):
    trace = "".join(f'  File "job.py", line {n}, in step_{n}\n' for n in range(400))
    trace = "Traceback (most recent call last):\n" + trace + "ValueError: the end <of it>\n"
    args = {"type": "builtins.ValueError", "message": "x" * 1200, "traceback": trace}
    task = running_task(worker)
    task.abort(worker, [{"code": "exception", "args": args, "description": "ValueError"}])
    html = admin_client.get(
        reverse("admin:scylla_django_task_change", args=[task.pk])
    ).content.decode()
    shown = "\n".join(
        map(unescape, re.findall(r'<pre class="scylla-json">(.*?)</pre>', html, re.S))
    )
    assert "x" * 1200 in shown  # the message whole, not cut at 300 characters
    assert trace in shown  # the traceback as its own lines, escaped once
    assert "ValueError: the end &lt;of it&gt;" in html
    long_args = {"rows": [f"row {n:05d}" for n in range(1500)]}
    task = running_task(worker, rn="long-args")
    task.abort(worker, [{"code": "bad_rows", "args": long_args, "description": "many"}])
    html = admin_client.get(
        reverse("admin:scylla_django_task_change", args=[task.pk])
    ).content.decode()
    assert '<details class="scylla-more"><summary>Show all: ' in html  # folded, like the spec
    shown = "".join(map(unescape, re.findall(r'<pre class="scylla-json">(.*?)</pre>', html, re.S)))
    assert all(f"row {n:05d}" in shown for n in range(1500))


# -- actions ---------------------------------------------------------------------------------


def test_cancel_selected_cancels_ready_and_running_and_skips_the_rest(admin_client, tasks):
    chosen = [tasks[k] for k in ("run", "wait", "done", "fail", "gone")]
    response = act(admin_client, "cancel_selected", *chosen)
    assert messages_of(response) == ["2 cancelled, 3 skipped (not ready or running)."]
    statuses = dict(Task.objects.values_list("rn", "status"))
    assert statuses["run"] == statuses["wait"] == Status.CANCELLED
    assert (statuses["done"], statuses["fail"]) == (Status.COMPLETED, Status.ABORTED)
    assert (statuses["wait2"], statuses["run2"]) == (Status.READY, Status.RUNNING)
    cancellations = History.objects.filter(typ=EventType.CANCELLATION)
    assert set(cancellations.values_list("task__rn", flat=True)) == {"run", "wait", "gone"}


def test_cancel_selected_across_a_filtered_list(admin_client, tasks):
    """ "Select all" posts the page's boxes and select_across: the whole filtered list."""
    response = act(
        admin_client,
        "cancel_selected",
        tasks["wait"],
        url=f"{LIST}?status=ready",
        select_across="1",
    )
    assert messages_of(response) == ["2 cancelled, 0 skipped (not ready or running)."]
    assert not Task.objects.filter(status=Status.READY).exists()
    assert Task.objects.filter(status=Status.RUNNING).count() == 2


def confirmation_form(response) -> tuple[str, dict[str, list[str]]]:
    """The action URL and hidden fields of the purge confirmation's form."""
    html = response.content.decode()
    [form] = re.findall(r'<form method="post" action="([^"]*)">(.*?)</form>', html, re.S)
    data: dict[str, list[str]] = {}
    for name, value in re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', form[1]):
        data.setdefault(name, []).append(unescape(value))
    return unescape(form[0]), data


def test_purge_selected_asks_first_with_a_count(admin_client, tasks):
    chosen = [tasks[k] for k in ("run", "wait", "done", "fail", "gone")]
    response = act(admin_client, "purge_selected", *chosen)
    html = response.content.decode()
    assert response.status_code == 200
    assert response.templates[0].name == "scylla_django/admin/purge_selected.html"
    assert "This deletes <strong>3</strong> selected tasks, with their history." in html
    assert "2 selected tasks are ready or running, and stay." in html
    assert 'value="Yes, purge 3 tasks"' in html
    assert Task.objects.count() == 7  # nothing deleted yet
    url, data = confirmation_form(response)
    assert url == LIST
    assert sorted(data["_selected_action"]) == sorted(str(t.pk) for t in chosen)
    assert data["action"] == ["purge_selected"] and data["post"] == ["yes"]
    assert messages_of(admin_client.post(url, data, follow=True)) == [
        "3 purged, 2 skipped (not terminal)."
    ]
    assert set(Task.objects.values_list("rn", flat=True)) == {"run", "run2", "wait", "wait2"}


def test_purge_selected_confirms_a_selection_across_a_filtered_list(admin_client, tasks):
    across = {"url": f"{LIST}?queue=beta", "select_across": "1"}  # "Select all" on this list
    response = act(admin_client, "purge_selected", tasks["fail"], **across)
    html = response.content.decode()
    assert "This deletes <strong>2</strong> selected tasks" in html  # fail, gone; not run2
    assert "1 selected task is ready or running, and stays." in html
    url, data = confirmation_form(response)
    assert url == f"{LIST}?queue=beta" and data["select_across"] == ["1"]
    assert messages_of(admin_client.post(url, data, follow=True)) == [
        "2 purged, 1 skipped (not terminal)."
    ]
    assert set(Task.objects.filter(queue="beta").values_list("rn", flat=True)) == {"run2"}


def test_purge_selected_with_nothing_terminal_offers_no_purge(admin_client, tasks):
    response = act(admin_client, "purge_selected", tasks["run"], tasks["wait"])
    html = response.content.decode()
    assert "there is nothing to purge" in html
    assert "Yes, purge" not in html
    assert f'href="{LIST}" class="button cancel-link"' in html


def test_purge_selected_deletes_terminal_tasks_only(admin_client, tasks):
    chosen = [tasks[k] for k in ("run", "wait", "done", "fail", "gone")]
    response = act(admin_client, "purge_selected", *chosen, post="yes")
    assert messages_of(response) == ["3 purged, 2 skipped (not terminal)."]
    assert set(Task.objects.values_list("rn", flat=True)) == {"run", "run2", "wait", "wait2"}
    assert not History.objects.exclude(task__in=Task.objects.all()).exists()
    assert History.objects.filter(task__rn="run").exists()


def test_purge_selected_runs_in_chunks_through_purge(admin_client, tasks, settings, monkeypatch):
    settings.SCYLLA = {"PURGE_CHUNK_SIZE": 1}
    calls = spy_on_purge(monkeypatch)
    chosen = [tasks[k] for k in ("done", "fail", "gone", "wait")]
    assert messages_of(act(admin_client, "purge_selected", *chosen, post="yes")) == [
        "3 purged, 1 skipped (not terminal)."
    ]
    assert calls == [3]  # one purge() call, three one-task chunks


def test_purge_selected_stops_at_its_time_budget(admin_client, tasks, settings, monkeypatch):
    settings.SCYLLA = {"PURGE_CHUNK_SIZE": 1}
    monkeypatch.setattr(scylla_admin.TaskAdmin, "purge_time_budget", timedelta(0))
    chosen = (tasks["done"], tasks["fail"])
    [message] = messages_of(act(admin_client, "purge_selected", *chosen, post="yes"))
    assert re.match(r"1 purged, then stopped after \d+(\.\d)? m?s: run the action again", message)
    assert Task.objects.filter(rn__in=["done", "fail"]).count() == 1


def test_delete_selected_is_not_offered(admin_client, tasks):
    choices = dict(admin_client.get(LIST).context["action_form"].fields["action"].choices)
    assert set(choices) == {
        "",
        "cancel_selected",
        "purge_selected",
        "retry_selected",
        "release_order_selected",
        "pause_selected",
        "resume_selected",
        "discard_selected",
    }
    response = act(admin_client, "delete_selected", tasks["done"], post="yes")
    assert response.status_code == 403
    assert Task.objects.filter(pk=tasks["done"].pk).exists()


def spy_on_purge(monkeypatch) -> list[int]:
    """Record, for each TaskQuerySet.purge() call, how many chunks it reported."""
    calls: list[int] = []
    original = TaskQuerySet.purge

    def purge(self, *args, on_chunk=None, **kwargs):
        calls.append(0)

        def counted(n):
            calls[-1] += 1
            if on_chunk is not None:
                on_chunk(n)

        return original(self, *args, on_chunk=counted, **kwargs)

    monkeypatch.setattr(TaskQuerySet, "purge", purge)
    return calls


# -- the bulk purge page ---------------------------------------------------------------------


@pytest.fixture
def aged(tasks) -> dict[str, Task]:
    """The tasks of `tasks`, with "done", "fail", "gone" and "run" not updated for 30 days."""
    Task.objects.filter(rn__in=["done", "fail", "gone", "run"]).update(
        updated=Now() - timedelta(days=30)
    )
    worker = Worker.objects.first()
    fresh = task_in(Status.COMPLETED, worker, rn="fresh", queue="alpha", priority=255)
    return {**tasks, "fresh": fresh}


def test_purge_page_shows_the_form(admin_client, aged):
    response = admin_client.get(PURGE)
    assert response.status_code == 200
    form = response.context["form"]
    assert form.initial["older_than_days"] == 10
    assert response.context["count"] is None
    assert "Yes, purge" not in response.content.decode()


def test_purge_page_confirms_the_count_then_purges(admin_client, aged, settings, monkeypatch):
    settings.SCYLLA = {"PURGE_CHUNK_SIZE": 1}
    query = {"older_than_days": "10", "statuses": ["completed", "cancelled"], "queue": ""}
    response = admin_client.get(PURGE, query)
    html = response.content.decode()
    assert response.context["count"] == 2  # done, gone: not fail (aborted), not fresh
    assert "This deletes <strong>2</strong> tasks" in html
    assert 'value="Yes, purge 2 tasks"' in html
    assert html.count('type="hidden" name="statuses"') == 2

    calls = spy_on_purge(monkeypatch)
    confirm = {**query, "confirm": "Yes"}
    response = admin_client.post(PURGE, confirm, follow=True)
    assert response.redirect_chain == [(LIST, 302)]
    assert messages_of(response) == ["Purged 2 tasks."]
    assert calls == [2]  # one purge() call, two chunks
    remaining = set(Task.objects.values_list("rn", flat=True))
    assert remaining == {"run", "run2", "fail", "wait", "wait2", "fresh"}


def test_purge_page_filters_by_queue(admin_client, aged):
    query = {"older_than_days": "10", "statuses": ["completed", "aborted", "cancelled"]}
    assert admin_client.get(PURGE, {**query, "queue": "beta"}).context["count"] == 2
    admin_client.post(PURGE, {**query, "queue": "beta"})
    assert not Task.objects.filter(rn__in=["fail", "gone"]).exists()
    assert Task.objects.filter(rn="done").exists()


def test_purge_page_says_when_nothing_matches(admin_client, aged):
    response = admin_client.get(PURGE, {"older_than_days": "365", "statuses": ["completed"]})
    assert response.context["count"] == 0
    assert "there is nothing to purge" in response.content.decode()


def test_purge_page_stops_at_its_time_budget(admin_client, aged, settings, monkeypatch):
    settings.SCYLLA = {"PURGE_CHUNK_SIZE": 1}
    monkeypatch.setattr(scylla_admin.TaskAdmin, "purge_time_budget", timedelta(0))
    query = {"older_than_days": "10", "statuses": ["completed", "aborted", "cancelled"]}
    [message] = messages_of(admin_client.post(PURGE, query, follow=True))
    assert re.match(r"Purged 1 task in \d+(\.\d)? m?s, then stopped; 2 more match", message)
    assert Task.objects.filter(rn__in=["done", "fail", "gone"]).count() == 2


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"older_than_days": "0", "statuses": ["completed"]}, "older_than_days"),
        ({"older_than_days": "abc", "statuses": ["completed"]}, "older_than_days"),
        ({"older_than_days": "99999999999999999999", "statuses": ["completed"]}, "older_than_days"),
        ({"older_than_days": "10", "statuses": ["running"]}, "statuses"),
        ({"older_than_days": "10"}, "statuses"),
        ({"older_than_days": "10", "statuses": ["completed"], "queue": "\0"}, "queue"),
        ({"older_than_days": "10", "statuses": ["completed"], "queue": "a b"}, "queue"),
    ],
)
def test_purge_page_rejects_bad_input(admin_client, aged, query, field):
    before = Task.objects.count()
    for response in (admin_client.get(PURGE, query), admin_client.post(PURGE, query)):
        assert response.status_code == 400
        assert field in response.context["form"].errors
    assert Task.objects.count() == before


# -- permissions -----------------------------------------------------------------------------


def test_view_only_staff_can_look_but_not_act(tasks):
    client = staff("view_task")
    response = client.get(LIST)
    assert set(listed(response)) == set(tasks)
    assert response.context["action_form"] is None
    html = response.content.decode()
    assert f'href="{DASHBOARD}"' in html
    assert f'href="{PURGE}"' not in html
    detail = client.get(reverse("admin:scylla_django_task_change", args=[tasks["run"].pk]))
    [history] = detail.context["inline_admin_formsets"]  # without view_history
    assert len(history.formset.forms) == 1
    assert client.get(DASHBOARD).status_code == 200
    for action in ("cancel_selected", "purge_selected", "retry_selected", "delete_selected"):
        assert act(client, action, tasks["run"], tasks["done"]).status_code == 403
    assert client.get(PURGE).status_code == 403
    query = {"older_than_days": "1", "statuses": ["completed"]}
    assert client.post(PURGE, query).status_code == 403
    assert Task.objects.get(rn="run").status == Status.RUNNING
    assert Task.objects.filter(rn="done").exists()


def test_cancel_needs_the_cancel_permission(tasks):
    client = staff("view_task", "cancel_task")
    choices = dict(client.get(LIST).context["action_form"].fields["action"].choices)
    assert set(choices) == {"", "cancel_selected", "discard_selected"}
    assert messages_of(act(client, "cancel_selected", tasks["run"])) == [
        "1 cancelled, 0 skipped (not ready or running)."
    ]
    assert act(client, "purge_selected", tasks["done"]).status_code == 403
    assert client.get(PURGE).status_code == 403


def test_purge_needs_the_delete_permission(tasks):
    client = staff("view_task", "delete_task")
    choices = dict(client.get(LIST).context["action_form"].fields["action"].choices)
    assert set(choices) == {"", "purge_selected"}
    assert messages_of(act(client, "purge_selected", tasks["done"], post="yes")) == [
        "1 purged, 0 skipped (not terminal)."
    ]
    assert act(client, "cancel_selected", tasks["run"]).status_code == 403
    assert client.get(PURGE).status_code == 200


def test_staff_without_task_permissions_see_nothing(tasks):
    client = staff()
    assert client.get(LIST).status_code == 403
    assert client.get(DASHBOARD).status_code == 403
    assert client.get(PURGE).status_code == 403


def test_anonymous_users_are_sent_to_the_login(client, tasks):
    for url in (LIST, DASHBOARD, PURGE):
        response = client.get(url)
        assert response.status_code == 302
        assert response["Location"].startswith(reverse("admin:login"))


# -- the index pages -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url", [reverse("admin:index"), reverse("admin:app_list", args=["scylla_django"])]
)
def test_index_pages_link_to_the_console(admin_client, url):
    html = admin_client.get(url).content.decode()
    assert f'<a href="{DASHBOARD}">Dashboard</a>' in html
    assert f'<a href="{PURGE}">Bulk purge</a>' in html
    assert reverse("admin:scylla_django_task_changelist") in html


def test_index_pages_link_only_to_what_the_user_may_use():
    client = staff("view_task")
    html = client.get(reverse("admin:index")).content.decode()
    assert f'href="{DASHBOARD}"' in html
    assert f'href="{PURGE}"' not in html
    assert f'href="{DASHBOARD}"' not in staff().get(reverse("admin:index")).content.decode()


# -- the dashboard page ----------------------------------------------------------------------


def test_dashboard_page(admin_client, tasks, worker):
    Task.objects.filter(pk=tasks["run"].pk).update(deadline=Now() - timedelta(seconds=5))
    response = admin_client.get(DASHBOARD)
    html = response.content.decode()
    assert response.status_code == 200
    assert '<meta http-equiv="refresh" content="10">' in html
    assert f'href="{LIST}?queue=beta&amp;status=aborted">1</a>' in html
    assert "<h2>Expired leases: 1</h2>" in html
    assert '<svg class="scylla-chart"' in html
    assert html.count('<rect class="scylla-bar-') >= 2  # completed, aborted, cancelled
    assert f'href="{LIST}?owner={worker.name}&amp;status=running">{worker.name}</a>' in html
    assert "<code>boom</code> it broke" in html
    assert '<span class="scylla-badge scylla-alive">2 alive</span>' in html
    assert 'id="scylla-monitor-missing"' in html  # no monitor has run


CHARTS = reverse("admin:scylla_django_task_dashboard_charts")


@pytest.mark.parametrize("key", [None, "day", "week"])
def test_dashboard_shows_three_per_queue_charts_over_a_chosen_range(admin_client, tasks, key):
    html = admin_client.get(DASHBOARD, {"range": key} if key else {}).content.decode()
    label = {None: "Last hour", "day": "Last day", "week": "Last week"}[key]
    assert f"<h2>Per queue: {label.lower()}</h2>" in html
    assert f"<strong>{label}</strong>" in html
    for chart in ("throughput", "failures", "wait"):
        assert f'id="scylla-chart-{chart}"' in html
    assert re.search(r'<polyline class="scylla-line scylla-line-\d+" points="[\d., ]+">', html)
    others = {"hour", "day", "week"} - {key or "hour"}
    for other in others:
        assert f'data-range="{other}"' in html


def test_dashboard_chart_data(admin_client, tasks):
    data = admin_client.get(CHARTS, {"range": "day"}).json()
    assert data["range"] == "day"
    assert set(data) == {
        "range",
        "interval_seconds",
        "starts",
        "throughput",
        "failures",
        "wait_p50",
        "wait_p95",
    }
    assert sum(data["throughput"]["alpha"]) == 1  # "done"
    assert sum(data["failures"]["beta"]) == 1  # "fail"
    response = admin_client.get(CHARTS, {"range": "year"})
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_range"
    assert staff().get(CHARTS).status_code == 403
    assert staff("view_task").get(CHARTS).status_code == 200


@pytest.mark.parametrize(
    ("refresh", "meta"), [("0", None), ("30", "30"), ("abc", "10"), ("-5", "10")]
)
def test_dashboard_refresh(admin_client, refresh, meta):
    html = admin_client.get(DASHBOARD, {"refresh": refresh}).content.decode()
    found = re.findall(r'<meta http-equiv="refresh" content="(\d+)">', html)
    assert found == ([meta] if meta else [])


# -- workers ---------------------------------------------------------------------------------


def test_worker_list(admin_client, tasks, worker, other_worker):
    stopped = Worker.objects.register(["alpha"], hostname="gone-host")
    stopped.stop()
    silent = Worker.objects.register(["alpha"], hostname="quiet-host")
    Worker.objects.filter(pk=silent.pk).update(silent_at=Now() - timedelta(seconds=1))
    dead = Worker.objects.register(["alpha"], hostname="dead-host")
    Worker.objects.filter(pk=dead.pk).update(
        silent_at=Now() - timedelta(minutes=2), dead_at=Now() - timedelta(seconds=1)
    )
    url = reverse("admin:scylla_django_worker_changelist")
    with CaptureQueriesContext(connection) as queries:
        response = admin_client.get(url)
    html = response.content.decode()
    assert response.status_code == 200
    assert [w.name for w in response.context["cl"].result_list] == [
        dead.name,
        silent.name,
        stopped.name,
        other_worker.name,
        worker.name,
    ]
    running = f'href="{LIST}?owner={worker.name}&amp;status=running">1 / 4</a>'
    assert running in html
    assert 'class="scylla-badge scylla-stopped"' in html
    assert 'class="scylla-badge scylla-silent"' in html
    assert 'class="scylla-badge scylla-dead"' in html
    assert html.count('class="scylla-badge scylla-alive"') == 2
    held = reverse("admin:scylla_django_task_change", args=[tasks["run"].pk])
    assert f'<a href="{held}">run</a>' in html  # the tasks each worker holds
    table = connection.ops.quote_name("scylla_django_task")
    assert sum(table in q["sql"] for q in queries) == 2  # one GROUP BY, the held tasks
    assert f'href="{DASHBOARD}"' in html

    def names(query: str) -> set[str]:
        response = admin_client.get(f"{url}?{query}")
        assert response.status_code == 200
        return {w.name for w in response.context["cl"].result_list}

    assert names("state=alive") == {worker.name, other_worker.name}
    assert names("state=silent") == {silent.name}
    assert names("state=dead") == {dead.name}
    assert names("state=stopped") == {stopped.name}
    assert names(f"q={worker.name}") == {worker.name}
    assert names("q=quiet") == {silent.name}
    assert names("q=%00") == {
        worker.name,
        other_worker.name,
        stopped.name,
        silent.name,
        dead.name,
    }
    assert admin_client.get(f"{url}?state=bogus").status_code == 302


def test_worker_detail_is_read_only(admin_client, tasks, worker):
    url = reverse("admin:scylla_django_worker_change", args=[worker.pk])
    html = admin_client.get(url).content.decode()
    assert "1 / 4</a>" in html
    assert admin_client.post(url, {"capacity": 9}).status_code == 403
    assert admin_client.get(reverse("admin:scylla_django_worker_add")).status_code == 403


def test_detail_shows_what_the_run_used(admin_client, worker):
    task = running_task(worker, rn="used")
    outcome = Outcome(task.pk, task.leases, result=1, cpu_time=1.5, peak_memory=50 * 2**20)
    Task.objects.finish_many(worker, [outcome])
    html = admin_client.get(reverse("admin:scylla_django_task_change", args=[task.pk])).content
    text = unescape(html.decode())
    assert "CPU time" in text and "1.5 s" in text
    assert "Peak memory" in text and "50.0\xa0MB" in text
    fresh = TaskFactory(rn="fresh")
    text = admin_client.get(reverse("admin:scylla_django_task_change", args=[fresh.pk])).content
    assert "CPU time" in text.decode()
