"""The admin console: tasks, workers and schedules, task actions, a bulk purge page, a dashboard.

Read-only apart from explicit operations, each calling the same method as the API and the
commands: "Cancel selected" is `TaskQuerySet.cancel()`, "Purge selected" and the bulk purge page
are `TaskQuerySet.purge()`. Built to stay fast on millions of tasks:

- no full COUNT(*): `EstimatingPaginator` counts at most `COUNT_CAP` + 1 rows, and past that
  shows PostgreSQL's planner estimate ("about 765,000");
- the list is ordered by primary key, the insertion order (newest first, through the pk index);
- the search and the filters are exact matches; queue and owner are typed in (with
  suggestions from the live workers) rather than listed by a SELECT DISTINCT over every task;
- the list never loads `spec`, `result` or `errors` (up to a MiB each).

| module | holds |
|---|---|
| `tasks` | `TaskAdmin`: its configuration and the wiring of the task pages' rooms |
| `task_list` | the task list: its paginator, its query, its search |
| `task_columns` | the task list's columns, each a function of one task |
| `task_page` | the task's page: its fields by what they tell, its History inline, its address |
| `task_operations` | the task page's buttons (reset lease, cancel, release order key), as views |
| `task_actions` | the task list's actions on the selected tasks |
| `console` | the pages beside the task list: dashboard, charts, pausing a queue, bulk purge |
| `permissions` | who may do what in the task console |
| `workers` | `WorkerAdmin` |
| `filters` | the list filters |
| `display` | HTML helpers: times, badges, JSON, errors |
| `purge` | the bulk purge form and its time budget |
| `dashboard` | the dashboard's numbers, by part (queues, throughput, failures, workers, VACUUM) |
| `schedules` | `ScheduleAdmin`, the "Retry selected" action, the chain of attempts |
| `keys` | the "Locks and limits" page, `LimitAdmin`, `RateAdmin`, `HoldAdmin` |
| `databases` | which database the pages read and act on |
| `charts` | the dashboard's per-queue charts |
| `batches` | `BatchAdmin`: each batch's progress from its counters, "Cancel selected batches" |
| `events` | `EventAdmin`: the stored events, read-only, with the schedules that consumed each |

Importing this package registers `Task`, `Worker`, `Schedule`, `Limit`, `Rate`, `Hold`,
`Batch` and `Event` with `admin.site` and changes nothing else. The "Scylla console" module on
the admin index is opt-in: set `admin.site.index_template = INDEX_TEMPLATE` (see
docs/howto/admin.md).
"""

from __future__ import annotations

from .batches import BatchAdmin
from .events import EventAdmin
from .keys import HoldAdmin, LimitAdmin, RateAdmin
from .schedules import ScheduleAdmin
from .task_list import COUNT_CAP, ApproximateCount, EstimatingPaginator
from .task_page.history import HISTORY_LIMIT
from .tasks import TaskAdmin
from .workers import WorkerAdmin

INDEX_TEMPLATE = "scylla_django/admin/index.html"

__all__ = [
    "COUNT_CAP",
    "HISTORY_LIMIT",
    "INDEX_TEMPLATE",
    "ApproximateCount",
    "BatchAdmin",
    "EstimatingPaginator",
    "EventAdmin",
    "HoldAdmin",
    "LimitAdmin",
    "RateAdmin",
    "ScheduleAdmin",
    "TaskAdmin",
    "WorkerAdmin",
]
