"""Token authentication that refuses malformed keys before they reach the database."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.apps import apps
from django.utils.translation import gettext as _
from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication, TokenAuthentication


class ScyllaTokenAuthentication(TokenAuthentication):
    """`Authorization: Token <key>` with DRF's tokens (`rest_framework.authtoken`).

    A key holding a NUL character is refused here: PostgreSQL cannot even compare such a
    string, so looking it up would fail with a server error instead of a 401.
    """

    def authenticate_credentials(self, key: str) -> tuple[Any, Any]:
        if "\x00" in key:
            raise exceptions.AuthenticationFailed(_("Invalid token."))
        return super().authenticate_credentials(key)


def authenticators(classes: Sequence[type[BaseAuthentication]]) -> list[BaseAuthentication]:
    """Instances of `classes`, leaving token authentication out unless
    `rest_framework.authtoken` is installed: without it the API works with session
    authentication alone (and a `Token` header is not looked up in a table that is not there).
    """
    tokens = apps.is_installed("rest_framework.authtoken")
    return [cls() for cls in classes if tokens or not issubclass(cls, TokenAuthentication)]
