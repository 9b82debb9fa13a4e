"""Request rates of the REST API: DRF's own throttles, their rates from our settings.

`SCYLLA["THROTTLE_RATES"] = {"user": "1000/hour", "token": "100/min"}` (DRF's rate form:
a count per `s`, `min`, `h` or `day`); a scope left out, or None, is not throttled. `user`
counts every request of an authenticated user, whatever the way it came in; `token` counts
the requests made with one API token (so two tokens of one user have a budget each).
The counts are kept in Django's default cache, as DRF's throttles keep them: use a shared
cache (Redis, Memcached, the database cache) when several processes serve the API. A
request over a rate gets a 429 `throttled` with `Retry-After`.
"""

from __future__ import annotations

import hashlib
from typing import Any

from rest_framework.request import Request
from rest_framework.throttling import SimpleRateThrottle, UserRateThrottle
from rest_framework.views import APIView

from ..conf import scylla_settings


class ScyllaUserThrottle(UserRateThrottle):
    """Per authenticated user: `SCYLLA["THROTTLE_RATES"]["user"]`."""

    scope = "user"

    def get_rate(self) -> str | None:
        return scylla_settings.THROTTLE_RATES.get(self.scope)

    def allow_request(self, request: Request, view: APIView) -> bool:
        # The rate is read on each request, so that a settings change (and a test's
        # override_settings) applies at once.
        self.rate = self.get_rate()
        self.num_requests, self.duration = self.parse_rate(self.rate)
        return super().allow_request(request, view)

    def get_cache_key(self, request: Request, view: APIView) -> str | None:
        if not (request.user and request.user.is_authenticated):
            return None  # an anonymous request is refused before it counts
        return self.cache_format % {"scope": f"scylla_{self.scope}", "ident": request.user.pk}


class ScyllaTokenThrottle(ScyllaUserThrottle):
    """Per API token: `SCYLLA["THROTTLE_RATES"]["token"]`; requests that came in without a
    token (a session) are not counted here."""

    scope = "token"

    def get_cache_key(self, request: Request, view: APIView) -> str | None:
        key: Any = getattr(request.auth, "key", None)
        if not isinstance(key, str):
            return None
        ident = hashlib.sha256(key.encode()).hexdigest()[:32]
        return self.cache_format % {"scope": f"scylla_{self.scope}", "ident": ident}


#: The throttles of every view of the API.
THROTTLES: list[type[SimpleRateThrottle]] = [ScyllaUserThrottle, ScyllaTokenThrottle]
