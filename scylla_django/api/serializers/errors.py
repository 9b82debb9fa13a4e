"""The body of every error response, for the schema (`exceptions.py` writes it)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers


class FieldErrorSerializer(serializers.Serializer[Any]):
    """One problem with one field."""

    code = serializers.CharField()
    detail = serializers.CharField()


class ErrorSerializer(serializers.Serializer[Any]):
    """Every error response: a machine-readable `code` and a human-readable `detail`."""

    code = serializers.CharField()
    detail = serializers.CharField()
    errors = serializers.DictField(  # type: ignore[assignment]  # see TaskSerializer
        child=FieldErrorSerializer(many=True),
        required=False,
        help_text="400 only: the errors of each field, by field name or path.",
    )
