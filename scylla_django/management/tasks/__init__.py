"""The work of `manage.py scylla_tasks`, one module per group of its subcommands; the command
itself only parses the arguments and dispatches:

- `listing`: `list`, the tasks the filters select (`filters`: the filters of GET /tasks/);
- `showing`: `show`, one task with its errors, history, durable records and log;
- `forecasting`: `eta`, when a ready task is expected to start, and why;
- `watching`: `watch`, the running tasks' progress, refreshed;
- `operations`: `cancel`, `retry`, `requeue`, `discard`, `pause`, `resume`, `delete` and
  `release-order`;
- `arguments` and `formats`: the argument types and the ways of writing a task's fields that
  these share (and `scylla_schedules` with them).
"""
