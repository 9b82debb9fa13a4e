"""The JSON parser of the API: no input makes it fail with a server error."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import IO, Any

from django.conf import settings
from django.utils.translation import gettext as _
from rest_framework import exceptions
from rest_framework.parsers import JSONParser


class ScyllaJSONParser(JSONParser):
    """DRF's JSON parser, with every failure a 400 `parse_error`.

    DRF turns `ValueError` into a 400 but lets `RecursionError` through, which nesting too deep
    for Python's parser (`[[[[…`) raises. `NaN` and `Infinity` are refused, as by DRF's strict
    mode; numbers too long to convert and invalid UTF-8 are `ValueError`s. The body's size is
    bounded by Django's `DATA_UPLOAD_MAX_MEMORY_SIZE` before parsing (a 413).
    """

    def parse(
        self,
        stream: IO[Any],
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        encoding = (parser_context or {}).get("encoding") or settings.DEFAULT_CHARSET
        try:
            return json.loads(stream.read().decode(encoding), parse_constant=_reject_constant)
        except RecursionError:
            raise exceptions.ParseError("JSON parse error - nested too deeply.") from None
        except ValueError as exc:
            raise exceptions.ParseError(
                _("JSON parse error - %(error)s") % {"error": exc}
            ) from None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")
