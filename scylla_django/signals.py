"""Signals sent once a task's write has committed. Receivers live in your code, not here.

Each is sent with `sender=Task` and `task=<Task>`; `task_finished` also has `status`.

A worker sends `task_leased` and `task_finished` for every task, so each signal keeps its
receivers per sender, as Django's model signals do (`use_caching`): connecting or disconnecting
a receiver clears what was kept.
"""

from django.dispatch import Signal

task_submitted = Signal(use_caching=True)
task_leased = Signal(use_caching=True)
task_finished = Signal(use_caching=True)  # completed, aborted or cancelled
task_reset = Signal(use_caching=True)  # a monitor made an expired or yielded task ready again
