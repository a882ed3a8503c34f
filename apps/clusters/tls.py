"""TLS failures talking to an API server, in words a platform team can act on.

The official client turns a failed handshake into ``ApiException(status=0, reason="SSLError\\n…")``
(kubernetes/client/rest.py: ``except urllib3.exceptions.SSLError``); the backend wraps that in a
``BackendError`` (apps.clusters.backends.kubernetes ``_call_bytes``). The exception chain still holds Python's
``ssl.SSLCertVerificationError`` (``verify_code``, ``verify_message``) or ``ssl.SSLError``
(``reason``). :func:`tls_failure` reads it into a small dict that is stored with the connection test
(``Cluster.last_check["tls"]``) and explained at display, in the reader's language, by
:func:`tls_lines`: what went wrong and what to check. The raw text stays in ``detail``.

Verify codes are OpenSSL's (openssl/openssl include/openssl/x509_vfy.h.in @
0365b1aa03a58488f6324da03b4e25186e503c05): 2 UNABLE_TO_GET_ISSUER_CERT, 9 CERT_NOT_YET_VALID,
10 CERT_HAS_EXPIRED, 18 DEPTH_ZERO_SELF_SIGNED_CERT, 19 SELF_SIGNED_CERT_IN_CHAIN,
20 UNABLE_TO_GET_ISSUER_CERT_LOCALLY, 21 UNABLE_TO_VERIFY_LEAF_SIGNATURE, 23 CERT_REVOKED,
62 HOSTNAME_MISMATCH, 64 IP_ADDRESS_MISMATCH. The codes of self-signed (18), IP mismatch (64) and
expired (10) certificates are reproduced against a real TLS server in tests/clusters/test_pages.py;
``WRONG_VERSION_NUMBER`` is what OpenSSL 3.0 answers when the address speaks plain HTTP (same test).
"""

from __future__ import annotations

import re
import ssl
from typing import Any

from django.utils.translation import gettext as _

# verify code -> kind
_VERIFY_KINDS: dict[int, str] = {
    18: "self_signed",
    19: "self_signed",
    2: "unknown_issuer",
    20: "unknown_issuer",
    21: "unknown_issuer",
    9: "not_yet_valid",
    10: "expired",
    62: "name_mismatch",
    64: "name_mismatch",
    23: "revoked",
}
# ssl.SSLError.reason -> kind (handshakes that fail before or besides certificate verification)
_REASON_KINDS: dict[str, str] = {
    "WRONG_VERSION_NUMBER": "not_tls",
    "HTTP_REQUEST": "not_tls",
    "RECORD_LAYER_FAILURE": "not_tls",
}
# The same, read from the text when the chain was lost (a stored message, an old answer).
_TEXT_KINDS: tuple[tuple[re.Pattern, str], ...] = (
    (re.compile(r"self[- ]signed certificate", re.I), "self_signed"),
    (
        re.compile(r"unable to get (local )?issuer certificate|unable to verify the first", re.I),
        "unknown_issuer",
    ),
    (re.compile(r"certificate has expired", re.I), "expired"),
    (re.compile(r"certificate is not yet valid", re.I), "not_yet_valid"),
    (re.compile(r"(hostname|ip address) mismatch|doesn't match", re.I), "name_mismatch"),
    (re.compile(r"certificate revoked", re.I), "revoked"),
    (re.compile(r"WRONG_VERSION_NUMBER", re.I), "not_tls"),
    (re.compile(r"CERTIFICATE_VERIFY_FAILED", re.I), "untrusted"),
    (re.compile(r"\bSSLError\b|\[SSL[:\]]", re.I), "handshake"),
)


def _chain(exc: BaseException, limit: int = 12):
    seen: set[int] = set()
    todo = [exc]
    while todo and len(seen) < limit:
        e = todo.pop(0)
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        todo += [e.__cause__, e.__context__]
        todo += [a for a in getattr(e, "args", ()) if isinstance(a, BaseException)]
        reason = getattr(e, "reason", None)
        if isinstance(reason, BaseException):
            todo.append(reason)


def tls_failure(exc: BaseException, *, server: str = "") -> dict[str, Any] | None:
    """The TLS failure behind ``exc`` (None when it is not one): ``{"kind", "verify_code",
    "reason", "server", "detail"}``; ``detail`` is the raw text, for staff."""
    detail = str(getattr(exc, "message", "") or exc)
    found: dict[str, Any] | None = None
    for e in _chain(exc):
        if isinstance(e, ssl.SSLCertVerificationError):
            code = getattr(e, "verify_code", None)
            found = {
                "kind": _VERIFY_KINDS.get(code or -1, "untrusted"),
                "verify_code": code,
                "reason": str(getattr(e, "verify_message", "") or ""),
            }
            break
        if isinstance(e, ssl.SSLError) and found is None:
            reason = str(getattr(e, "reason", "") or "")
            found = {"kind": _REASON_KINDS.get(reason, "handshake"), "verify_code": None, "reason": reason}
    if found is None:
        for pattern, kind in _TEXT_KINDS:
            if pattern.search(detail):
                found = {"kind": kind, "verify_code": None, "reason": ""}
                break
    if found is None:
        return None
    found.update(server=server, detail=detail)
    return found


def tls_lines(tls: dict[str, Any]) -> list[str]:
    """What went wrong, then what to check, in the active language."""
    server = tls.get("server") or _("the server address in the kubeconfig")
    kind = tls.get("kind")
    if kind == "self_signed":
        what = _(
            "The API server at %(server)s presents a self-signed certificate that the kubeconfig does not trust."
        )
        check = _(
            "Check that the kubeconfig's certificate-authority-data holds the cluster's CA certificate "
            "(base64 of the PEM), and that the server address points at this cluster's API server."
        )
    elif kind == "unknown_issuer":
        what = _(
            "The API server at %(server)s presents a certificate from a CA the kubeconfig does not trust."
        )
        check = _(
            "Check that the kubeconfig's certificate-authority-data holds the CA that signed the API "
            "server's certificate (base64 of the PEM, with any intermediate CA)."
        )
    elif kind == "expired":
        what = _("The API server at %(server)s presents an expired certificate.")
        check = _(
            "Check the clock of this server and of the API server (a clock far ahead makes a valid "
            "certificate look expired); if the certificate really expired, renew it on the cluster."
        )
    elif kind == "not_yet_valid":
        what = _("The API server at %(server)s presents a certificate that is not valid yet.")
        check = _("Check the clock of this server and of the API server: one of them is behind.")
    elif kind == "name_mismatch":
        what = _("The API server's certificate is not issued for the address %(server)s.")
        check = _(
            "Check the server name in the kubeconfig: use a host name or IP address the certificate "
            "lists (its subject alternative names), or set tls-server-name in the kubeconfig's cluster entry."
        )
    elif kind == "revoked":
        what = _("The API server at %(server)s presents a revoked certificate.")
        check = _("Check with the cluster's administrators: the API server needs a new certificate.")
    elif kind == "not_tls":
        what = _("The address %(server)s answers, but not with TLS.")
        check = _(
            "Check the server address in the kubeconfig: its scheme (https) and port must be the API "
            "server's secure port, not a plain-HTTP port or a proxy."
        )
    elif kind == "untrusted":
        what = _("The API server's certificate at %(server)s could not be verified.")
        check = _(
            "Check the kubeconfig's certificate-authority-data, the server name in the kubeconfig, "
            "and the clock of this server."
        )
    else:
        what = _("The TLS handshake with the API server at %(server)s failed.")
        check = _(
            "Check the server address in the kubeconfig, its certificate-authority-data and the clock of this server."
        )
    return [what % {"server": server}, check]
