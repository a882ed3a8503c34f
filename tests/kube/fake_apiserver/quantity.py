"""Quantities (k8s.io/apimachinery/pkg/api/resource) and what decoding does to a stored body."""

from __future__ import annotations

import re
from decimal import ROUND_CEILING, Decimal

# -- quantities (k8s.io/apimachinery/pkg/api/resource) -----------------------------------------------
_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_QUANTITY_RE = re.compile(r"^([+-]?[0-9.]+)([eE][+-]?[0-9]+|[KMGTPE]i|[numkMGTPE]?)$")


def parse_quantity(text) -> tuple[Decimal, str]:
    """A Quantity string → (value, "binary" | "decimal"); ValueError when it is not one."""
    m = _QUANTITY_RE.match(str(text).strip())
    if not m or m.group(1) in ("", ".", "+", "-"):
        raise ValueError(
            f"quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$': {text!r}"
        )
    number, suffix = Decimal(m.group(1)), m.group(2)
    if suffix in _BINARY:
        return number * (1024 ** _BINARY[suffix]), "binary"
    if suffix[:1] in ("e", "E"):
        return number * (Decimal(10) ** int(suffix[1:])), "decimal"
    return number * (Decimal(10) ** _DECIMAL[suffix]), "decimal"


def format_quantity(value: Decimal, fmt: str = "decimal") -> str:
    """Quantity.String(): the canonical form — BinarySI integers with the largest exact power of
    1024 (``1024Mi`` → ``1Gi``), everything else DecimalSI with the largest exact power of 1000
    (``1000`` → ``1k``, ``0.5`` → ``500m``, ``1000m`` → ``1``), rounded up to nano units."""
    if value == 0:
        return "0"
    if fmt == "binary" and value == value.to_integral_value() and abs(value) >= 1024:
        for suffix, power in sorted(_BINARY.items(), key=lambda kv: -kv[1]):
            if value % (1024**power) == 0:
                return f"{int(value // (1024**power))}{suffix}"
    if fmt == "binary" and value == value.to_integral_value():
        return str(int(value))
    nanos = (value * Decimal(10) ** 9).to_integral_value(rounding=ROUND_CEILING)
    for suffix, exp in sorted(_DECIMAL.items(), key=lambda kv: -kv[1]):
        scale = Decimal(10) ** (exp + 9)
        if nanos % scale == 0:
            return f"{int(nanos // scale)}{suffix}"
    return f"{int(nanos)}n"  # pragma: no cover - n always divides


def canonical_quantity(text) -> str:
    value, fmt = parse_quantity(text)
    return format_quantity(value, fmt)


_NATIVE_COMPUTE = ("cpu", "memory", "ephemeral-storage")


def _is_extended(name: str) -> bool:
    """v1helper.IsExtendedResourceName: a domain-qualified name outside ``kubernetes.io`` that is not
    a ``requests.`` quota name (``nvidia.com/gpu``, ``huawei.com/Ascend910``)."""
    if "/" not in name or name.startswith("requests."):
        return False
    domain = name.split("/", 1)[0]
    return not (domain == "kubernetes.io" or domain.endswith(".kubernetes.io"))


def pod_quota_usage(pod: dict) -> dict[str, Decimal]:
    """pkg/quota/v1/evaluator/core/pods.go PodUsageFunc: what one non-terminal pod counts against a
    ResourceQuota — ``pods`` / ``count/pods``, ``requests.cpu`` (and ``cpu``), ``limits.cpu``, the same
    for memory and ephemeral-storage, and ``requests.<extended>`` for extended resources (never
    ``limits.<extended>``: Kubernetes docs "Resource Quotas" → "Resource quota for extended
    resources"). Requests are the containers' sum or the largest init container's, whichever is
    more (resourcehelper.PodRequests); a request left out defaults to its limit (SetDefaults_Pod)."""
    spec = pod.get("spec") or {}

    def totals(containers, field: str) -> dict[str, Decimal]:
        out: dict[str, Decimal] = {}
        for c in containers or []:
            res = c.get("resources") or {}
            values = dict(res.get("limits") or {}) if field == "requests" else {}
            values.update(res.get(field) or {})
            for name, q in values.items():
                out[name] = out.get(name, Decimal(0)) + parse_quantity(q)[0]
        return out

    usage: dict[str, Decimal] = {"pods": Decimal(1), "count/pods": Decimal(1)}
    for field in ("requests", "limits"):
        summed = totals(spec.get("containers"), field)
        for init in spec.get("initContainers") or []:
            for name, q in totals([init], field).items():
                summed[name] = max(summed.get(name, Decimal(0)), q)
        for name, q in summed.items():
            if name in _NATIVE_COMPUTE:
                usage[f"{field}.{name}"] = q
                if field == "requests":
                    usage[name] = q
            elif field == "requests" and _is_extended(name):
                usage[f"requests.{name}"] = q
    return usage


def _quota_counts(pod: dict) -> bool:
    """QuotaV1Pod: a Succeeded / Failed pod no longer counts."""
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def server_normalise(obj, key: str = ""):
    """What decoding into the Go types does to a body before it is stored: quantities under
    ``resources.limits`` / ``requests`` and a ResourceQuota's ``hard`` become canonical
    (Quantity.String), an empty ``env[].value`` disappears (EnvVar ``value,omitempty``)."""
    if isinstance(obj, dict):
        if key in ("limits", "requests", "hard"):
            out = {}
            for k, v in obj.items():
                try:
                    out[k] = canonical_quantity(v)
                except (ValueError, ArithmeticError):
                    out[k] = v  # left for validation to refuse
            return out
        return {k: server_normalise(v, k) for k, v in obj.items()}
    if isinstance(obj, list):
        items = [server_normalise(v) for v in obj]
        if key == "env":
            items = [
                {k: v for k, v in i.items() if not (k == "value" and v == "")} if isinstance(i, dict) else i
                for i in items
            ]
        return items
    return obj
