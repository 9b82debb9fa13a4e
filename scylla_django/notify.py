"""Completion notifications: `submit(..., notify="https://…")` (or `@handler(...,
notify=...)`) asks for a POST of the task's outcome once it reaches a final state.

This module holds what needs no model: the internal queue of the deliveries, the validation of
a notify URL, the per-queue defaults of `@handler(notify=...)`, the signature and the POST
itself (`urllib.request`, the standard library's client: one request, a timeout, no session
to keep). The deliveries themselves are tasks: `scylla_django.deliveries` submits and runs
them.

The body is compact JSON; the header `X-Scylla-Signature: sha256=<hex>` is the HMAC-SHA256 of
the body's bytes under `SCYLLA["NOTIFY_SECRET"]`, so a receiver that knows the secret can tell
that the POST came from this scheduler and was not altered.
"""

from __future__ import annotations

import hashlib
import hmac
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from django.core.exceptions import ValidationError
from django.core.serializers.json import DjangoJSONEncoder
from django.utils.translation import gettext as _

from .conf import scylla_settings
from .validation import validate_queue

#: The internal queue of notification deliveries; `scylla_worker --queue scylla.notify`
#: serves it (the app registers its handler in every process).
NOTIFY_QUEUE = "scylla.notify"

#: The longest notify URL accepted (the column's length).
URL_MAX_LENGTH = 2000

#: The header that carries the signature, and the one that names the delivery.
SIGNATURE_HEADER = "X-Scylla-Signature"
DELIVERY_HEADER = "X-Scylla-Delivery"

_queue_urls: dict[str, str] = {}


def validate_notify(value: object) -> str:
    """A notify URL: `https://host/...` (or `http://` with `NOTIFY_ALLOW_HTTP`), at most
    URL_MAX_LENGTH characters, with `NOTIFY_SECRET` configured to sign it.

    ValidationError with the code `invalid_notify` otherwise (`notify_not_configured` when the
    secret is missing).
    """
    if not isinstance(value, str) or not value or len(value) > URL_MAX_LENGTH:
        raise ValidationError(
            _("notify must be a URL of 1..%(max)d characters.") % {"max": URL_MAX_LENGTH},
            code="invalid_notify",
        )
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError:
        raise ValidationError(_("notify is not a valid URL."), code="invalid_notify") from None
    schemes = ("https", "http") if scylla_settings.NOTIFY_ALLOW_HTTP else ("https",)
    if parts.scheme not in schemes:
        raise ValidationError(
            _(
                "notify must be an https:// URL, not %(scheme)s:// (SCYLLA['NOTIFY_ALLOW_HTTP'] "
                "allows http:// too)."
            )
            % {"scheme": parts.scheme or "?"},
            code="invalid_notify",
        )
    if not parts.hostname or any(c.isspace() or c == "\x00" for c in value) or port == 0:
        raise ValidationError(_("notify must name a host."), code="invalid_notify")
    if scylla_settings.NOTIFY_SECRET is None:
        raise ValidationError(
            _("notify needs SCYLLA['NOTIFY_SECRET'], the key that signs the notifications."),
            code="notify_not_configured",
        )
    return value


def register_notify(queue: str, url: str | None) -> None:
    """Make `url` the notify URL of the tasks submitted to `queue` without one (what
    `@handler(queue, notify=...)` does, in the process that imports the handler); None clears
    it. The URL is checked at submission, when the settings are surely loaded."""
    queue = validate_queue(queue)
    if url is None:
        _queue_urls.pop(queue, None)
    elif not isinstance(url, str):
        raise TypeError(f"notify must be a URL string, not {url!r}")
    else:
        _queue_urls[queue] = url


def default_notify(queue: str) -> str | None:
    """The notify URL `@handler(queue, notify=...)` gave the queue, if any."""
    return _queue_urls.get(queue)


def body_of(payload: Mapping[str, Any]) -> bytes:
    """The bytes POSTed for `payload`: compact JSON, keys sorted, dates in ISO 8601."""
    return DjangoJSONEncoder(separators=(",", ":"), sort_keys=True).encode(payload).encode()


def signature(body: bytes, secret: str) -> str:
    """The value of the signature header: `sha256=` and the HMAC-SHA256 of `body` in hex."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def verify(body: bytes, header: str, secret: str) -> bool:
    """Whether `header` is the signature of `body` under `secret` (for receivers and tests;
    compared in constant time)."""
    return hmac.compare_digest(signature(body, secret), header)


@dataclass(frozen=True)
class Response:
    """What the receiver answered: its HTTP `status`, or `error` when none came back."""

    status: int | None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


def post(url: str, body: bytes, delivery: str) -> Response:
    """POST `body`, signed, to `url` within `NOTIFY_TIMEOUT`; redirects are not followed (a
    3xx counts as a failure: the signed body goes only where it was sent)."""
    secret = scylla_settings.NOTIFY_SECRET
    if secret is None:
        return Response(None, "SCYLLA['NOTIFY_SECRET'] is not set")
    request = urllib.request.Request(
        url,
        data=body,
        method="POST",
        headers={
            "Content-Type": "application/json",
            "User-Agent": "scylla_django",
            SIGNATURE_HEADER: signature(body, secret),
            DELIVERY_HEADER: delivery,
        },
    )
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(request, timeout=scylla_settings.NOTIFY_TIMEOUT.total_seconds()) as answer:
            return Response(answer.status)
    except urllib.error.HTTPError as exc:
        return Response(exc.code)
    except (OSError, ValueError) as exc:  # refused, unreachable, timed out, bad TLS
        return Response(None, f"{type(exc).__name__}: {exc}")


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None
