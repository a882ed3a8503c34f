"""One exception handler: ApplicationError, Django and DRF errors all become the same JSON body."""

from __future__ import annotations

import logging

from django.conf import settings
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import DataError
from django.http import Http404
from django.utils.translation import gettext as _
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from apps.core.errors import ApplicationError
from apps.core.validation import validation_details

logger = logging.getLogger(__name__)

_DRF_CODES = {
    400: "invalid",
    401: "not_authenticated",
    403: "permission_denied",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    409: "conflict",
    413: "too_large",
    415: "unsupported_media_type",
    429: "throttled",
}


def _too_large(exc: RequestDataTooBig, context) -> Response:
    """A body over DATA_UPLOAD_MAX_MEMORY_SIZE: 413 Content Too Large (RFC 9110 §15.5.14) naming the
    limit, instead of Django's HTML 400 page for a SuspiciousOperation."""
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    request = context.get("request")
    size = request.META.get("CONTENT_LENGTH") if request is not None else None
    got = _(" (this one is %(size)s bytes)") % {"size": size} if size and str(size).isdigit() else ""
    message = _("The request body is larger than the limit of %(limit)d bytes (%(mib)g MiB)%(got)s.") % {
        "limit": limit,
        "mib": limit / 2**20,
        "got": got,
    }
    return Response(
        {"error": {"code": "too_large", "message": message, "details": {"limit_bytes": limit}}},
        status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
    )


def exception_handler(exc, context):
    if isinstance(exc, RequestDataTooBig):
        return _too_large(exc, context)
    if isinstance(exc, ApplicationError):
        return Response({"error": exc.as_dict()}, status=exc.status_code)
    if isinstance(exc, DjangoValidationError):
        details = validation_details(exc)
        return Response(
            {"error": {"code": "invalid", "message": _("Invalid input."), "details": details}},
            status=status.HTTP_400_BAD_REQUEST,
        )
    if isinstance(exc, DataError):
        # A value PostgreSQL cannot take (a NUL character, a time-zone offset beyond ±15:59, a number out
        # of range) reached a query: the input is invalid, not the server broken (found by fuzzing).
        logger.warning("invalid input reached the database: %s", exc)
        return Response(
            {
                "error": {
                    "code": "invalid",
                    "message": _("Invalid input: a value the database cannot store or compare."),
                    "details": {},
                }
            },
            status=status.HTTP_400_BAD_REQUEST,
        )
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()

    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    data = response.data
    if isinstance(exc, exceptions.ValidationError):
        body = {"code": "invalid", "message": _("Invalid input."), "details": data}
    else:
        detail = data.get("detail", data) if isinstance(data, dict) else data
        body = {
            "code": getattr(detail, "code", None) or _DRF_CODES.get(response.status_code, "error"),
            "message": str(detail),
        }
    response.data = {"error": body}
    return response
