"""The ApplicationError family. Services raise these; one DRF handler maps them to HTTP.

Body shape (stable): {"error": {"code": "...", "message": "...", "details": {...}}}
"""

from __future__ import annotations

from typing import Any


class ApplicationError(Exception):
    status_code = 400
    code = "invalid"

    def __init__(self, message: str, *, details: Any = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details
        if code:
            self.code = code

    def as_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.details is not None:
            body["details"] = self.details
        return body


class ValidationFailed(ApplicationError):
    """Bad input. ``details`` maps field names (or line numbers) to messages."""

    status_code = 400
    code = "invalid"


class ParseFailed(ValidationFailed):
    """A tool output or file could not be parsed; the message names the line or element."""

    code = "parse_error"


class PermissionDenied(ApplicationError):
    status_code = 403
    code = "permission_denied"


class NotFound(ApplicationError):
    status_code = 404
    code = "not_found"


class Conflict(ApplicationError):
    status_code = 409
    code = "conflict"


class InvalidTransition(Conflict):
    code = "invalid_transition"


class InsufficientCapacity(Conflict):
    code = "insufficient_capacity"
