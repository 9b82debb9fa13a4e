"""`django.tasks` functions used by the backend tests (Django 6+ only)."""

from __future__ import annotations

from django.tasks import task


@task
def add(a: int, b: int) -> int:
    return a + b


@task(queue_name="dj-mail", priority=100)
def send(to: str, subject: str = "hello") -> dict[str, str]:
    return {"to": to, "subject": subject}


@task
def explode() -> None:
    raise KeyError("missing")


@task(takes_context=True)
def attempt(context) -> int:
    return context.attempt


@task
def shout(text: str) -> str:
    return text.upper()


def plain() -> None:
    """A plain function, not a Task: a Scylla task whose spec names it cannot be run."""
