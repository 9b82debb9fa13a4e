"""Cancelling many tasks (`POST /bulk/tasks/cancel/`): what it cancels and what it did."""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _
from rest_framework import serializers
from rest_framework.exceptions import ErrorDetail

from .base import StrictSerializer, rn_field

MAX_CANCEL_RNS = 10_000


class BulkCancelSerializer(StrictSerializer):
    """What `POST /bulk/tasks/cancel/` cancels: `filter` (the list's filters) or `rns`, not both."""

    filter = serializers.DictField(required=False)
    rns = serializers.ListField(
        child=rn_field(),
        required=False,
        min_length=1,
        max_length=MAX_CANCEL_RNS,
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if ("filter" in attrs) == ("rns" in attrs):
            raise serializers.ValidationError(
                ErrorDetail(_("Give either `filter` or `rns`."), code="invalid")
            )
        return attrs


class CancelledSerializer(serializers.Serializer[Any]):
    """What `POST /bulk/tasks/cancel/` did."""

    cancelled = serializers.IntegerField(help_text="Ready or running tasks now cancelled.")
    skipped = serializers.IntegerField(help_text="Selected tasks that were already finished.")
    not_found = serializers.IntegerField(help_text="Given rns that name no task.")
