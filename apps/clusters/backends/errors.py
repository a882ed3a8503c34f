"""What a backend call raises: every failure leaves as a :class:`BackendError`.

:class:`TransientBackendError` (5xx, timeouts, connection resets and refusals, 409 Conflict on an
optimistic-concurrency write — retry later) or :class:`PermanentBackendError` (other 4xx, objects
the client refuses to send). 404 on delete and 409 AlreadyExists on create are not errors (already
gone / compare and update). There are no retries in the backends: retrying, with backoff, is the
caller's (the pusher's) job.
"""

from __future__ import annotations

import json
from typing import Any


class BackendError(Exception):
    """A backend call failed. ``status`` is the HTTP code when there was an answer; ``causes`` the
    Status body's ``details.causes`` ({reason, message, field}) when the server gave them."""

    def __init__(self, message: str, status: int | None = None, reason: str = "", causes: list | None = None):
        super().__init__(message)
        self.message = message
        self.status = status
        self.reason = reason
        self.causes = list(causes or [])


class TransientBackendError(BackendError):
    """Retryable: 5xx, timeouts, connection resets/refusals, 409 Conflict, 429."""


class PermanentBackendError(BackendError):
    """Not retryable: 4xx other than 404/409 (400, 401, 403, 422, ...), objects that cannot be sent."""


class ImmutableFieldError(PermanentBackendError):
    """The live object differs from the desired one in a field the server does not let change
    (422 Invalid, ``field is immutable``: a Job's ``spec.template``, a Deployment's ``spec.selector``
    …). The object cannot be updated in place: it has to be deleted and created again.
    ``fields`` are the refused paths (``spec.template``)."""

    def __init__(self, message: str, fields: list[str], live: dict | None = None, **kwargs: Any):
        super().__init__(message, **kwargs)
        self.fields = fields
        self.live = live or {}  # the object that refused the update (its uid, its pod selector)


def immutable_fields(error: BackendError) -> list[str]:
    """The fields a 422 refused as immutable (apimachinery ValidateImmutableField's detail
    ``field is immutable``, reported in the Status ``details.causes``)."""
    if error.status != 422:
        return []
    return [
        c.get("field") or ""
        for c in error.causes
        if isinstance(c, dict) and "field is immutable" in (c.get("message") or "")
    ]


def error_from_api_exception(what: str, e: Any) -> BackendError:
    """The error of an ``ApiException`` (the client's answer with a status): transient for 5xx,
    no status, 408, 429 and 409 Conflict; permanent otherwise, with the Status body's reason,
    message and ``details.causes``."""
    status = e.status or 0
    reason, message, causes = e.reason or "", "", []
    try:
        body = json.loads(e.body or "{}")
        if isinstance(body, dict):
            message = body.get("message") or ""
            reason = body.get("reason") or reason
            details = body.get("details")
            if isinstance(details, dict) and isinstance(details.get("causes"), list):
                causes = details["causes"]
    except ValueError:
        message = (e.body or "")[:500]
    text = f"{what}: {status} {reason}: {message}".rstrip(": ")
    if status >= 500 or status in (0, 408, 429) or (status == 409 and reason == "Conflict"):
        return TransientBackendError(text, status, reason, causes)
    return PermanentBackendError(text, status, reason, causes)
