"""The argument types of `manage.py scylla_tasks` (and `scylla_schedules`)."""

from __future__ import annotations

import argparse

from django.core.exceptions import ValidationError

from ...validation import RN_MAX_LENGTH, rn_validator


def rn_argument(text: str) -> str:
    """argparse type: a well-formed rn."""
    try:
        rn_validator(text)
    except ValidationError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {' '.join(exc.messages)}") from None
    if len(text) > RN_MAX_LENGTH:
        raise argparse.ArgumentTypeError(f"{text!r} is longer than {RN_MAX_LENGTH} characters")
    return text


def text_argument(text: str) -> str:
    """argparse type: a non-empty value of at most 100 characters, without NUL."""
    if not text or len(text) > 100 or "\x00" in text:
        raise argparse.ArgumentTypeError(f"{text!r} must be 1 to 100 characters, without NUL")
    return text


def what_if_argument(text: str) -> tuple[str, str]:
    """argparse type: NAME=VALUE of a what-if (WhatIf.parse checks the value)."""
    name, equals, value = text.partition("=")
    if not equals or not name or not value:
        raise argparse.ArgumentTypeError(f"{text!r}: write NAME=VALUE, e.g. limit.stripe=6")
    return name, value
