"""A kubeconfig can never run a program or read a file on the server.

The official client's loader (kubernetes/config/kube_config.py, ``KubeConfigLoader``) turns these
fields of the active context into a subprocess, a file read or a credential fetch:

* ``users[].user.exec``: ``ExecProvider`` runs ``command`` with ``args`` and ``env`` (exec_provider.py);
* ``users[].user.auth-provider``: ``gcp`` runs ``config.cmd-path`` (``CommandTokenSource``) or asks
  ``google.auth.default()`` (credential files, the metadata server); ``oidc`` reads
  ``config.idp-certificate-authority`` and calls the issuer URL to refresh the token;
* ``users[].user.tokenFile``, ``client-certificate``, ``client-key`` and
  ``clusters[].cluster.certificate-authority``: ``FileOrData`` reads (or hands the TLS layer) a path;
* ``load_kube_config`` itself splits its path on ``:`` and merges every file it names
  (``KubeConfigMerger``), and writes the file back after a token refresh (``persist_config``).

So a kubeconfig is read here (one regular file, bounded), checked by :func:`kubeconfig_content_check`
and handed to the client as a dict (``load_kube_config_from_dict``, ``persist_config=False``): the
same check for an upload and for every client the backend builds. Inline credentials are accepted:
``token``, ``username``/``password``, ``client-certificate-data``, ``client-key-data``,
``certificate-authority-data`` (the client writes the data to temporary files of its own). An exec
plugin runs only when its ``command`` is exactly on ``SUANCHI_KUBECONFIG_EXEC_COMMANDS``.
"""

from __future__ import annotations

import os
import re
import stat
from typing import Any

import yaml
from django.conf import settings
from django.utils.translation import gettext as _

from apps.core.errors import ValidationFailed

KUBECONFIG_MAX_BYTES = 256 * 1024

# File references the client reads, and the inline field that replaces each.
FILE_FIELDS: dict[str, dict[str, str]] = {
    "users": {
        "tokenFile": "token",
        "client-certificate": "client-certificate-data",
        "client-key": "client-key-data",
    },
    "clusters": {"certificate-authority": "certificate-authority-data"},
}
# Any other key that names a file or a program (``cmd-path``, ``idp-certificate-authority``, a
# future ``*File``): refused too, whatever the client version does with it.
_FILE_LIKE = re.compile(r"(file|path)$", re.IGNORECASE)
# Variables an allowed exec plugin may not get: they choose which program runs or what it loads.
_EXEC_ENV_REFUSED = re.compile(
    r"^(PATH|LD_.*|DYLD_.*|PYTHON.*|PERL5.*|PERLLIB|RUBY.*|NODE_OPTIONS|NODE_PATH|BASH_ENV|ENV|"
    r"GCONV_PATH|KUBERNETES_EXEC_INFO)$"
)


def _entry(section: str, index: int, item: Any) -> str:
    name = item.get("name") if isinstance(item, dict) else None
    return _("%(section)s[%(index)d] (name %(name)s)") % {
        "section": section,
        "index": index,
        "name": name if isinstance(name, str) and name else "?",
    }


def _exec_problem(entry: str, spec: Any) -> str:
    allowed = [str(c) for c in settings.SUANCHI_KUBECONFIG_EXEC_COMMANDS or []]
    if not allowed:
        return _(
            "%(entry)s: exec is not allowed: it would run a program on the server. Give an inline "
            "token or client-certificate-data and client-key-data instead (a deployment can allow "
            "named credential plugins with SUANCHI_KUBECONFIG_EXEC_COMMANDS)."
        ) % {"entry": entry}
    command = spec.get("command") if isinstance(spec, dict) else None
    if not isinstance(command, str) or command not in allowed:
        return _(
            "%(entry)s: exec command %(command)s is not allowed (SUANCHI_KUBECONFIG_EXEC_COMMANDS "
            "allows: %(allowed)s)."
        ) % {"entry": entry, "command": repr(command), "allowed": ", ".join(allowed)}
    env = spec.get("env") or []
    if not isinstance(env, list):
        return _("%(entry)s: exec env must be a list of name/value pairs.") % {"entry": entry}
    for item in env:
        name = item.get("name") if isinstance(item, dict) else None
        if not isinstance(name, str) or _EXEC_ENV_REFUSED.match(name):
            return _(
                "%(entry)s: exec env %(name)s is not allowed: it changes which program runs or what it loads."
            ) % {"entry": entry, "name": repr(name)}
    return ""


def _field_problems(section: str, index: int, item: Any, body: Any) -> list[str]:
    entry = _entry(section, index, item)
    problems: list[str] = []
    for key in body:
        key_text = str(key)
        inline = FILE_FIELDS[section].get(key_text)
        if section == "users" and key_text == "exec":
            problem = _exec_problem(entry, body[key])
            if problem:
                problems.append(problem)
        elif section == "users" and key_text == "auth-provider":
            problems.append(
                _(
                    "%(entry)s: auth-provider is not allowed: it would run a helper program or fetch "
                    "credentials on the server. Give an inline token instead."
                )
                % {"entry": entry}
            )
        elif inline:
            problems.append(
                _(
                    "%(entry)s: %(field)s is not allowed: it names a file on the server. Put its "
                    "content inline in %(inline)s instead."
                )
                % {"entry": entry, "field": key_text, "inline": inline}
            )
        elif _FILE_LIKE.search(key_text) and not key_text.endswith("-data"):
            problems.append(
                _("%(entry)s: %(field)s is not allowed: it names a file or a program on the server.")
                % {"entry": entry, "field": key_text}
            )
    return problems


def kubeconfig_content_check(doc: Any) -> None:
    """Refuse a kubeconfig (a parsed document) that would make the client run a program or read a
    file: ``ValidationFailed`` naming the field and the users/clusters entry of every problem."""
    if not isinstance(doc, dict):
        raise ValidationFailed(_("The kubeconfig must be a kind: Config document."))
    problems: list[str] = []
    for section, body_key in (("users", "user"), ("clusters", "cluster")):
        entries = doc.get(section) or []
        if not isinstance(entries, list):
            raise ValidationFailed(_("The kubeconfig's %(key)s must be a list.") % {"key": section})
        for index, item in enumerate(entries):
            body = item.get(body_key) if isinstance(item, dict) else None
            if body is None:
                continue
            if not isinstance(body, dict):
                raise ValidationFailed(
                    _("%(entry)s: %(key)s must be a mapping.")
                    % {"entry": _entry(section, index, item), "key": body_key}
                )
            problems += _field_problems(section, index, item, body)
    if problems:
        raise ValidationFailed(" ".join(problems), details={"kubeconfig": problems})


def kubeconfig_parse(data: bytes) -> dict:
    """A kubeconfig's bytes → its document, refused (``ValidationFailed``) when too big, not YAML,
    not ``kind: Config`` or unsafe (:func:`kubeconfig_content_check`). The messages never quote the
    data (a path may name any file: its content must not reach a page or a log)."""
    if len(data) > KUBECONFIG_MAX_BYTES:
        raise ValidationFailed(_("A kubeconfig is at most %(n)d KiB.") % {"n": KUBECONFIG_MAX_BYTES // 1024})
    try:
        doc = yaml.safe_load(data)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        if mark is None:
            raise ValidationFailed(_("The kubeconfig is not YAML.")) from e
        raise ValidationFailed(
            _("The kubeconfig is not YAML (line %(line)d).") % {"line": mark.line + 1}
        ) from e
    if not isinstance(doc, dict) or doc.get("kind") != "Config":
        raise ValidationFailed(_("The kubeconfig must be a kind: Config document."))
    kubeconfig_content_check(doc)
    return doc


def kubeconfig_read(path: str) -> dict:
    """Read one kubeconfig file for a client: a regular file (never a device or a pipe, which could
    block), at most ``KUBECONFIG_MAX_BYTES``, parsed and checked by :func:`kubeconfig_parse`.
    ``ValidationFailed`` when it cannot be used."""
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            raise ValidationFailed(_("The kubeconfig %(path)s is not a regular file.") % {"path": path})
        with open(path, "rb") as fh:
            data = fh.read(KUBECONFIG_MAX_BYTES + 1)
    except (OSError, ValueError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else type(e).__name__
        raise ValidationFailed(
            _("The kubeconfig %(path)s cannot be read: %(reason)s.") % {"path": path, "reason": reason}
        ) from e
    return kubeconfig_parse(data)


def kubeconfig_for_client(path: str | bytes | None) -> dict:
    """The kubeconfig at ``path`` for ``KubernetesBackend`` (None: the client's default,
    ``$KUBECONFIG`` or ~/.kube/config, its first file only) as a checked document
    (:func:`kubeconfig_read`): the one door of every client the backend builds."""
    if not path:
        from kubernetes.config.kube_config import KUBE_CONFIG_DEFAULT_LOCATION

        path = os.path.expanduser(KUBE_CONFIG_DEFAULT_LOCATION.split(os.pathsep)[0])
    return kubeconfig_read(os.fsdecode(path))
