"""Token authentication that refuses malformed keys before they reach the database."""

from __future__ import annotations

from typing import Any

from rest_framework import exceptions
from rest_framework.authentication import TokenAuthentication


class ScyllaTokenAuthentication(TokenAuthentication):
    """`Authorization: Token <key>` with DRF's tokens (`rest_framework.authtoken`).

    A key holding a NUL character is refused here: PostgreSQL cannot even compare such a
    string, so looking it up would fail with a server error instead of a 401.
    """

    def authenticate_credentials(self, key: str) -> tuple[Any, Any]:
        if "\x00" in key:
            raise exceptions.AuthenticationFailed("Invalid token.")
        return super().authenticate_credentials(key)
