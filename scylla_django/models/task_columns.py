"""The task row's columns that belong to a feature, not to the state machine: one abstract model
per feature, which `Task` inherits (as `django.contrib.auth` builds its user from
`AbstractBaseUser` and `PermissionsMixin`).

`Task` itself declares the state machine's own columns (status, owner, deadline, lease number
and length, run-time limit, the handler's start, expiry); a reader looking for what a feature
keeps on the row finds it here, under the feature's name. They stay on the row, not in tables
beside it, because a hot statement reads or writes them (the lease orders by the turn and
takes the keys, the finish writes the usage, the log name and the dead letter's time) or
because an index serves them. Every class here is
abstract: the table is one (`scylla_django_task`), and the statements that name its columns
(`db.postgresql`, the portable driver) are the same whatever class declares a column.
"""

from __future__ import annotations

from django.db import models

from ..notify import URL_MAX_LENGTH
from ..validation import RN_MAX_LENGTH, UNIQUE_KEY_MAX_LENGTH


class RetryColumns(models.Model):
    """Retry chains (`scylla_django.retries`) and snoozes: what a retry keeps of the task it
    follows, and what `MAX_LEASES` counts."""

    # A retry is a new task, linked by rn to the task it follows and to the first task of its
    # chain (the first task too, once it has a retry; null on a task never retried).
    retry_of = models.CharField(max_length=RN_MAX_LENGTH, null=True, blank=True)  # noqa: DJ001
    root = models.CharField(max_length=RN_MAX_LENGTH, null=True, blank=True)  # noqa: DJ001
    attempt = models.PositiveIntegerField(default=1)
    retry_policy = models.JSONField(null=True, blank=True)
    # How many times the task's own handler put it back to ready (`Snooze`): a snooze spends
    # no attempt, and `MAX_LEASES` counts the leases that ended neither in one nor in a yield,
    # nor expired before their handler started (`unstarted`).
    snoozes = models.PositiveIntegerField(default=0)

    class Meta:
        abstract = True


class FamilyColumns(models.Model):
    """Children and follow-ups (`ctx.spawn`, `after=`): the task's links to the tasks it
    came from."""

    # A child's link: the rn of the running task that spawned it (`ctx.spawn`).
    parent = models.CharField(max_length=RN_MAX_LENGTH, null=True, blank=True)  # noqa: DJ001
    # The rns a follow-up named in `after`, kept past its release for `ctx.parent_results`.
    after = models.JSONField(null=True, blank=True, editable=False)

    class Meta:
        abstract = True


class UniqueKeyColumns(models.Model):
    """Unique keys (docs/howto/keys.md).

    At most one task holds a key: the partial unique index `scylla_task_unique_key` admits
    one row per key among the ready and running tasks and those that still hold it
    (`unique_held`). With a window, a task holds its key from its submission until a
    submission of the same key finds it finished for `unique_window` and clears the flag (a
    conditional write on the database clock); without one, leaving ready/running frees the
    key in the same write. A retry takes its key over from the task it follows.
    """

    unique_key = models.CharField(  # noqa: DJ001  # null, not "": keyless tasks stay out
        max_length=UNIQUE_KEY_MAX_LENGTH, null=True, blank=True
    )
    unique_window = models.DurationField(null=True, blank=True)
    # A database default too: a row inserted by SQL that does not name the column holds nothing.
    unique_held = models.BooleanField(default=False, db_default=False)

    class Meta:
        abstract = True


class LeaseKeyColumns(models.Model):
    """Keys taken by the lease (`scylla_django.db.keys`): locks, limit slots, order keys and
    weighted rates."""

    # The task's locks and limit slots as key elements ("L:invoice:7" exclusive, "S:ledger"
    # shared, "C:stripe" a limit's slot); null for a task without keys. The lease takes them
    # with the task, every transition out of running frees them.
    keys = models.JSONField(null=True, blank=True, editable=False)
    # An order key: its tasks run one at a time, in submit order (by id, or by `order_seq`,
    # the place a retry keeps of its predecessor). `order_block`: an abort for good holds the
    # key until the task is retried or the key released (order_on_failure="block").
    order_key = models.CharField(max_length=200, null=True, blank=True, editable=False)  # noqa: DJ001
    order_seq = models.BigIntegerField(null=True, blank=True, editable=False)
    order_block = models.BooleanField(null=True, blank=True, editable=False)
    # A weighted rate: what the task's start costs against its rate (`rate_key=(name,
    # {"cost": n})`); null costs 1.
    rate_cost = models.PositiveIntegerField(null=True, blank=True, editable=False)

    class Meta:
        abstract = True


class FairShareColumns(models.Model):
    """Fair shares (`scylla_django.db.fairness`).

    The value of the key its queue shares its capacity by ("42" of a tenant), null for a task
    outside any share, and the task's turn within its priority: the lease takes lower turns
    first, before age. A trigger gives each new task with a fair key its turn, after the last
    ready turn of its key's and never before the first ready turn of its priority.
    """

    fair_key = models.CharField(  # noqa: DJ001  # null, not "": tasks outside a share
        max_length=200, null=True, blank=True, editable=False
    )
    turn = models.FloatField(default=0.0, db_default=0.0, editable=False)

    class Meta:
        abstract = True


class UsageColumns(models.Model):
    """What the handler's last run used, as the worker measured it: CPU seconds (its thread's,
    or its child process's under process isolation) and the peak resident memory in bytes
    (measured under process isolation only). Written with the outcome; null before."""

    cpu_time = models.FloatField(null=True, blank=True, editable=False)
    peak_memory = models.BigIntegerField(null=True, blank=True, editable=False)

    class Meta:
        abstract = True


class BatchColumns(models.Model):
    """The batch the task was submitted in (`scylla_django.batches`); a retry stays in it.

    No index of its own: `scylla_task_batch_idx` (partial, batched tasks only) serves every
    lookup by batch, so a task outside a batch costs no index entry on each transition.
    """

    batch = models.ForeignKey(
        "scylla_django.Batch",
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,
        null=True,
        blank=True,
        related_name="tasks",
        editable=False,
    )

    class Meta:
        abstract = True


class DeadLetterColumns(models.Model):
    """Dead letters: when an aborted task was given up (no retry policy, or its retries were
    used up). Kept past RETENTION until an operator requeues or discards it."""

    dead = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        abstract = True


class TaskLogColumns(models.Model):
    """The name of the task's log in storage (`scylla_django.logs`), once a run logged
    something."""

    log = models.CharField(max_length=255, null=True, blank=True, editable=False)  # noqa: DJ001

    class Meta:
        abstract = True


class NotificationColumns(models.Model):
    """Completion notifications (`scylla_django.notify`): the URL to POST the outcome to once
    the task is final, and when its delivery task was submitted."""

    notify = models.CharField(  # noqa: DJ001
        max_length=URL_MAX_LENGTH, null=True, blank=True, editable=False
    )
    notified = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        abstract = True


class SpecVersionColumns(models.Model):
    """The version of the spec (`scylla_django.spec_versions`): its handler's `version` when
    it was submitted, moved up by the worker that upgraded it; null for a queue whose handler
    declares none (read as 1).

    On the row, not beside it: the worker reads it with every lease it takes, to know whether
    the spec needs upgrading before its handler runs.
    """

    version = models.PositiveSmallIntegerField(null=True, blank=True, editable=False)

    class Meta:
        abstract = True
