"""Where a task came from: who submitted it (a user, an API token or the system) and the
admission key it counts against (`TaskOrigin`), a row written once beside the task.

The lease and the transitions never read it, so it stays off the task row: a task without an
origin row was submitted by the system (code, a schedule, a retry, a worker) with no admission
key. A row is written in the submission's transaction, only when there is something to record.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q

from ..validation import KEY_NAME_MAX_LENGTH, key_name

#: Who submitted a task.
USER = "user"
TOKEN = "token"
SYSTEM = "system"
KINDS = (USER, TOKEN, SYSTEM)

NAME_MAX_LENGTH = 150
DESCRIPTION_MAX_LENGTH = 1000


class TaskOrigin(models.Model):
    """Who submitted a task and the admission key it counts against (see the module).

    `token` is a digest of the API token used (never the token itself), so that "this token's
    tasks" can be found without keeping a secret.
    """

    # DO_NOTHING: tasks are deleted in bulk by TaskQuerySet.delete(), which removes these first.
    task = models.OneToOneField(
        "Task", on_delete=models.DO_NOTHING, primary_key=True, related_name="origin"
    )
    kind = models.CharField(max_length=8, choices=[(k, k) for k in KINDS], default=SYSTEM)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    token = models.CharField(max_length=16, blank=True, default="")
    name = models.CharField(max_length=NAME_MAX_LENGTH, blank=True, default="")
    description = models.CharField(max_length=DESCRIPTION_MAX_LENGTH, blank=True, default="")
    admission_key = models.CharField(  # noqa: DJ001  # null: keyless rows stay out of the index
        max_length=KEY_NAME_MAX_LENGTH, null=True, blank=True
    )

    class Meta:
        indexes = [
            models.Index(fields=["user"], name="scylla_origin_user_idx"),
            models.Index(
                fields=["admission_key"],
                name="scylla_origin_admission_idx",
                condition=Q(admission_key__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return self.name or self.kind


@dataclass(frozen=True)
class Submitter:
    """Who submits a task, as `submit(..., submitter=...)` takes it: `Submitter.of(user)`,
    `Submitter.of(user, token=key)`, or `Submitter(name="nightly import")` for the system."""

    kind: str = SYSTEM
    user_id: Any = None
    token: str = ""
    name: str = ""
    description: str = ""

    @classmethod
    def of(
        cls, user: Any, *, token: str | None = None, name: str = "", description: str = ""
    ) -> Submitter:
        """The submitter `user` (authenticated with the API token `token`, if given)."""
        username = user.get_username() if hasattr(user, "get_username") else str(user)
        return cls(
            kind=TOKEN if token else USER,
            user_id=user.pk,
            token=token_digest(token) if token else "",
            name=name or username,
            description=description,
        )

    def validated(self) -> Submitter:
        """This submitter, or ValidationError naming what is wrong."""
        if self.kind not in KINDS:
            raise ValidationError(
                {"submitter": f"kind is one of {', '.join(KINDS)}."}, code="invalid_submitter"
            )
        if len(self.name) > NAME_MAX_LENGTH or len(self.description) > DESCRIPTION_MAX_LENGTH:
            raise ValidationError(
                {
                    "submitter": f"name is at most {NAME_MAX_LENGTH} characters and "
                    f"description at most {DESCRIPTION_MAX_LENGTH}."
                },
                code="invalid_submitter",
            )
        return self


def token_digest(token: str) -> str:
    """What a task keeps of an API token: the first 16 hex digits of its SHA-256."""
    return hashlib.sha256(token.encode()).hexdigest()[:16]


def validate_admission_key(value: object) -> str | None:
    """An admission key: None, or a key name ("tenant:42")."""
    if value is None:
        return None
    try:
        return key_name(value, "admission key")
    except ValidationError as exc:
        raise ValidationError({"admission_key": exc.messages}, code="invalid_key") from None


def origin_row(task_id: int, submitter: Submitter | None, admission_key: str | None) -> Any:
    """The origin row of a new task, or None when there is nothing to record."""
    if admission_key is None and (submitter is None or submitter == Submitter()):
        return None
    who = submitter or Submitter()
    return TaskOrigin(
        task_id=task_id,
        kind=who.kind,
        user_id=who.user_id,
        token=who.token,
        name=who.name,
        description=who.description,
        admission_key=admission_key,
    )
