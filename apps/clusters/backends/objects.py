"""How an object is compared and patched (client-side apply with a last-applied record, resource
quantities as the API server stores them) and equality-based label selectors."""

from __future__ import annotations

import copy
import json
import re
from typing import Any


def is_subset(desired: Any, live: Any) -> bool:
    """True when every field set in ``desired`` has the same value in ``live`` (the server may add
    defaults and status; lists must have the same length, compared item by item)."""
    if isinstance(desired, dict):
        return isinstance(live, dict) and all(is_subset(v, live.get(k)) for k, v in desired.items())
    if isinstance(desired, list):
        return isinstance(live, list) and len(desired) == len(live) and all(map(is_subset, desired, live))
    if (
        isinstance(desired, int | float)
        and isinstance(live, str)
        or isinstance(desired, str)
        and isinstance(live, int | float)
    ):
        return str(desired) == str(live)  # quantities: 1 vs "1"
    return desired == live


def owned_patch(desired: dict) -> dict:
    """The fields Suanchi owns on an object: labels, annotations, and spec (and data for the rare
    kinds that carry it)."""
    meta = desired.get("metadata") or {}
    patch: dict = {"metadata": {}}
    for key in ("labels", "annotations"):
        if meta.get(key):
            patch["metadata"][key] = meta[key]
    for key in ("spec", "data"):
        if key in desired:
            patch[key] = desired[key]
    return patch


# What Suanchi last applied to an object (its owned fields, JSON), as kubectl's client-side apply
# keeps ``kubectl.kubernetes.io/last-applied-configuration`` (Kubernetes docs "Declarative Management
# of Kubernetes Objects Using Configuration Files" → "How apply calculates differences and merges
# changes"): a key that was applied and is no longer desired is sent as null, because a JSON merge
# patch (RFC 7386 §2) keeps every key the patch does not mention.
LAST_APPLIED_ANNOTATION = "suanchi.io/last-applied"

_BINARY_SUFFIXES = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL_SUFFIXES = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_QUANTITY = re.compile(r"^([+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+))([eE][+-]?[0-9]+|[KMGTPE]i|[numkMGTPE]?)$")


def canonical_quantity(value: Any) -> Any:
    """A resource Quantity as kube-apiserver stores it (k8s.io/apimachinery/pkg/api/resource
    Quantity.String: ``1000m`` → ``1``, ``0.5`` → ``500m``, ``1024Mi`` → ``1Gi``, ``1000`` → ``1k``);
    anything that is not a quantity is returned as it is (the server will say what is wrong)."""
    from decimal import ROUND_CEILING, Decimal

    m = _QUANTITY.match(str(value).strip()) if isinstance(value, str | int) else None
    if m is None or isinstance(value, bool):
        return value
    number, suffix = Decimal(m.group(1)), m.group(2)
    binary = suffix in _BINARY_SUFFIXES
    if binary:
        amount = number * 1024 ** _BINARY_SUFFIXES[suffix]
    elif suffix[:1] in ("e", "E"):
        amount = number * Decimal(10) ** int(suffix[1:])
    else:
        amount = number * Decimal(10) ** _DECIMAL_SUFFIXES[suffix]
    if amount == 0:
        return "0"
    if binary and amount == amount.to_integral_value():
        for suffix, power in sorted(_BINARY_SUFFIXES.items(), key=lambda kv: -kv[1]):
            if abs(amount) >= 1024**power and amount % 1024**power == 0:
                return f"{int(amount // 1024**power)}{suffix}"
        return str(int(amount))
    nanos = (amount * Decimal(10) ** 9).to_integral_value(rounding=ROUND_CEILING)
    for suffix, exp in sorted(_DECIMAL_SUFFIXES.items(), key=lambda kv: -kv[1]):
        scale = Decimal(10) ** (exp + 9)
        if nanos % scale == 0:
            return f"{int(nanos // scale)}{suffix}"
    return f"{int(nanos)}n"


def normalised(obj: Any, key: str = "") -> Any:
    """``obj`` as the API server would store and return it, for comparison: quantities of
    ``resources.limits`` / ``requests`` and a ResourceQuota's ``hard`` canonical, an empty
    ``env[].value`` dropped (k8s.io/api core/v1 EnvVar ``value,omitempty``)."""
    if isinstance(obj, dict):
        if key in ("limits", "requests", "hard"):
            return {k: canonical_quantity(v) for k, v in obj.items()}
        return {k: normalised(v, k) for k, v in obj.items()}
    if isinstance(obj, list):
        items = [normalised(v) for v in obj]
        if key == "env":
            items = [
                {k: v for k, v in item.items() if not (k == "value" and v == "")}
                if isinstance(item, dict)
                else item
                for item in items
            ]
        return items
    return obj


def _removals(last: Any, desired: Any, live: Any) -> dict:
    """Null for each key Suanchi applied before (``last``), no longer desires, and the live object
    still has; nested maps recurse (lists are replaced whole by a merge patch anyway)."""
    out: dict = {}
    if not (isinstance(last, dict) and isinstance(live, dict)):
        return out
    desired = desired if isinstance(desired, dict) else {}
    for k, v in last.items():
        if k not in live:
            continue
        if k not in desired:
            out[k] = None
        elif isinstance(v, dict) and isinstance(desired[k], dict):
            inner = _removals(v, desired[k], live[k])
            if inner:
                out[k] = inner
    return out


def _deep_merge(a: dict, b: dict) -> dict:
    out = copy.deepcopy(a)
    for k, v in b.items():
        out[k] = _deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def with_last_applied(desired: dict) -> dict:
    """``desired`` (normalised) with the last-applied annotation recording its owned fields."""
    body = normalised(copy.deepcopy(desired))
    owned = owned_patch(body)
    record = json.dumps(owned, sort_keys=True, separators=(",", ":"))
    body.setdefault("metadata", {}).setdefault("annotations", {})
    body["metadata"]["annotations"] = {
        **(body["metadata"]["annotations"] or {}),
        LAST_APPLIED_ANNOTATION: record,
    }
    return body


def apply_patch(desired: dict, live: dict) -> dict | None:
    """The merge patch that brings ``live`` to ``desired`` for the fields Suanchi owns, or None when
    it is already there (compared after normalisation; nothing is written for a no-op). Keys of the
    last applied configuration that are no longer desired are removed (null)."""
    body = with_last_applied(desired)
    patch = owned_patch(body)
    annotations = (live.get("metadata") or {}).get("annotations") or {}
    try:
        last = json.loads(annotations.get(LAST_APPLIED_ANNOTATION) or "{}")
    except ValueError:
        last = {}
    removals = _removals(last, patch, live) if isinstance(last, dict) else {}
    if not removals and is_subset(patch, live):
        return None
    return _deep_merge(patch, removals)


def differs(desired: dict, live: dict) -> bool:
    return apply_patch(desired, live) is not None


def parse_selector(selector: str | None) -> list[tuple[str, str, str | None]]:
    """Equality-based label selector: ``a=b``, ``a==b``, ``a!=b``, ``a``, ``!a``, comma = AND."""
    reqs: list[tuple[str, str, str | None]] = []
    for part in (p.strip() for p in (selector or "").split(",")):
        if not part:
            continue
        if "!=" in part:
            k, v = part.split("!=", 1)
            reqs.append((k.strip(), "!=", v.strip()))
        elif "=" in part:
            k, v = re.split(r"==?", part, maxsplit=1)
            reqs.append((k.strip(), "=", v.strip()))
        elif part.startswith("!"):
            reqs.append((part[1:].strip(), "!exists", None))
        else:
            reqs.append((part, "exists", None))
    return reqs


def selector_matches(labels: dict, reqs) -> bool:
    for key, op, value in reqs:
        if (
            (op == "=" and labels.get(key) != value)
            or (op == "!=" and labels.get(key) == value)
            or (op == "exists" and key not in labels)
            or (op == "!exists" and key in labels)
        ):
            return False
    return True
