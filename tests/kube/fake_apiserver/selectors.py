"""Label and field selectors (k8s.io/apimachinery/pkg/labels, pkg/fields)."""

from __future__ import annotations

import re

from tests.kube.fake_apiserver.names import label_value_errors, qualified_name_errors
from tests.kube.fake_apiserver.resources import ApiError


def _split_requirements(selector: str) -> list[str]:
    """Requirements are separated by commas outside parentheses (``a in (x,y),b``)."""
    parts, depth, current = [], 0, ""
    for ch in selector:
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
            continue
        depth += {"(": 1, ")": -1}.get(ch, 0)
        current += ch
    parts.append(current)
    return [p.strip() for p in parts if p.strip()]


def parse_label_selector(selector: str) -> list[tuple[str, str, object]]:
    """k8s.io/apimachinery/pkg/labels/selector.go Parse: ``a=b``, ``a==b``, ``a!=b``, ``a`` (exists),
    ``!a`` (absent), set-based ``a in (x,y)`` / ``a notin (x,y)``; comma-separated = AND. Keys must
    be qualified names and values label values (else 400 ``unable to parse requirement``).
    Returns [(key, op, value)], op in = != exists !exists in notin (value a set for in/notin)."""
    reqs: list[tuple[str, str, object]] = []
    for part in _split_requirements(selector):
        m = re.fullmatch(r"(\S+)\s+(in|notin)\s*\((.*)\)", part)
        if m:
            values = {v.strip() for v in m.group(3).split(",") if v.strip()}
            if not values:
                raise ApiError(
                    400,
                    "BadRequest",
                    f"unable to parse requirement: for 'in', 'notin' operators, values set can't be empty: {part!r}",
                )
            reqs.append((m.group(1), m.group(2), values))
        elif "!=" in part:
            k, v = part.split("!=", 1)
            reqs.append((k.strip(), "!=", v.strip()))
        elif "==" in part:
            k, v = part.split("==", 1)
            reqs.append((k.strip(), "=", v.strip()))
        elif "=" in part:
            k, v = part.split("=", 1)
            reqs.append((k.strip(), "=", v.strip()))
        elif part.startswith("!"):
            reqs.append((part[1:].strip(), "!exists", None))
        elif re.search(r"[\s()<>]", part):
            raise ApiError(
                400,
                "BadRequest",
                f"unable to parse requirement: found '{part}', expected: !, identifier, or 'end of string'",
            )
        else:
            reqs.append((part, "exists", None))
    for key, _, value in reqs:
        errors = qualified_name_errors(key) if key else ["name part must be non-empty"]
        for v in value if isinstance(value, set) else ([value] if isinstance(value, str) else []):
            errors += label_value_errors(v)
        if errors:
            raise ApiError(
                400,
                "BadRequest",
                f"unable to parse requirement: invalid label key or value {key!r}: {errors[0]}",
            )
    return reqs


def labels_match(labels: dict, reqs) -> bool:
    for key, op, value in reqs:
        if op == "=" and labels.get(key) != value:
            return False
        if op == "!=" and labels.get(key) == value:
            return False
        if op == "exists" and key not in labels:
            return False
        if op == "!exists" and key in labels:
            return False
        if op == "in" and labels.get(key) not in value:
            return False
        if op == "notin" and key in labels and labels[key] in value:
            return False
    return True


# Event field selectors (pkg/registry/core/event/strategy.go ToSelectableFields, a subset).
_EVENT_FIELDS = (
    "involvedObject.kind",
    "involvedObject.name",
    "involvedObject.namespace",
    "involvedObject.uid",
    "reason",
    "type",
)


# Pod field selectors (pkg/registry/core/pod/strategy.go PodToSelectableFields): what
# ``kubectl describe node`` asks for (spec.nodeName, status.phase!=…).
_POD_FIELDS = (
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    "status.nominatedNodeName",
)


def _field_match(obj: dict, selector: str) -> bool:
    # A kind-less object is the check of a selector before any object is matched: each kind's
    # fields are allowed then, and refused later for the other kinds' objects.
    kind = obj.get("kind")
    for part in (p.strip() for p in selector.split(",")):
        if not part:
            continue
        m = re.fullmatch(r"([A-Za-z.]+)\s*(==|!=|=)\s*(.*)", part)
        field = m.group(1) if m else ""
        if not m or not (
            field in ("metadata.name", "metadata.namespace")
            or (kind in ("Event", None) and field in _EVENT_FIELDS)
            or (kind in ("Pod", None) and field in _POD_FIELDS)
            # resource.k8s.io ResourceSliceSelectorNodeName / ResourceSliceSelectorDriver
            or (kind in ("ResourceSlice", None) and field in ("spec.nodeName", "spec.driver"))
        ):
            raise ApiError(
                400, "BadRequest", f'field label not supported: "{part.split("=")[0].rstrip("!")}"'
            )
        field, op, value = m.groups()
        if field.startswith("metadata."):
            actual = obj["metadata"].get(field.split(".")[1], "")
        elif field == "spec.hostNetwork":
            actual = "true" if (obj.get("spec") or {}).get("hostNetwork") is True else "false"
        elif field == "status.podIP":
            ips = (obj.get("status") or {}).get("podIPs") or [
                {"ip": (obj.get("status") or {}).get("podIP", "")}
            ]
            actual = ips[0].get("ip", "")
        else:
            actual = obj
            for bit in field.split("."):
                actual = (actual or {}).get(bit, "") if isinstance(actual, dict) else ""
        if (actual == value) != (op != "!="):
            return False
    return True
