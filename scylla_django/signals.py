"""Signals sent once a task's write has committed. Receivers live in your code, not here.

Each is sent with `sender=Task` and `task=<Task>`; `task_finished` also has `status`.
"""

from django.dispatch import Signal

task_submitted = Signal()
task_leased = Signal()
task_finished = Signal()  # completed, aborted or cancelled
task_reset = Signal()  # a monitor made an expired or yielded task ready again
