"""Dependency: a follow-up task waits for its parents to complete."""

from __future__ import annotations

from datetime import UTC, datetime

from django.db import models

from ..validation import (
    RN_MAX_LENGTH,
)

#: The `not_before` of a follow-up task whose parents have not all completed: never leasable.
AFTER_PARENTS = datetime(9999, 12, 31, tzinfo=UTC)


#: Most parents a follow-up task may wait for.
MAX_PARENTS = 10_000


class Dependency(models.Model):
    """A follow-up task (`child`) waits for `parent` to complete (`submit(..., after=[...])`).

    The child is held by `not_before = AFTER_PARENTS` until every parent has completed; the
    monitor then releases it (`scylla_django.followups`). Rows are deleted once the child is
    released or cancelled. Neither key is a database constraint, so purging tasks never
    cascades here.
    """

    id = models.BigAutoField(primary_key=True)
    child = models.ForeignKey(
        "Task", on_delete=models.DO_NOTHING, db_constraint=False, related_name="dependencies"
    )
    parent = models.ForeignKey(
        "Task", on_delete=models.DO_NOTHING, db_constraint=False, related_name="dependents"
    )
    # The parent's rn, to name it in an error even after it was purged.
    parent_rn = models.CharField(max_length=RN_MAX_LENGTH)
    # The child's own `not_before`, set when it is released.
    release_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["parent"], name="scylla_dependency_parent_idx")]
        constraints = [
            models.UniqueConstraint(fields=["child", "parent"], name="scylla_dependency_unique")
        ]

    def __str__(self) -> str:
        return f"{self.child_id} after {self.parent_rn}"
