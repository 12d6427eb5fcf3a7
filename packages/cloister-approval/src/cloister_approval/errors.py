"""What the hub refuses, and the HTTP status each refusal answers with.

Raised anywhere below the routes; :mod:`cloister_approval.handlers` turns them into
JSON ``{"error": ..., "detail": ...}`` once, for every route.
"""

from __future__ import annotations

from typing import Any


class HubError(Exception):
    """A request the hub refuses; ``status`` is the HTTP status to answer with."""

    status = 400

    def __init__(self, message: str, detail: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail


class NotFoundError(HubError):
    status = 404


class ConflictError(HubError):
    status = 409


class BusyError(HubError):
    status = 503


class TooManyHeldError(HubError):
    """One cloister's fair share of held requests is used up: refused, not queued."""

    status = 429
