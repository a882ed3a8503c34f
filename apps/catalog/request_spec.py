"""DeviceRequestTemplate documents (seed 000 §3.2): parse, validate, normalise and render. No queries.

The shape, as in the seed::

    apiVersion: scheduling.example.io/v1      # or suanchi.io/v1
    kind: DeviceRequestTemplate
    metadata:
      name: mixed-train-template
    spec:
      devices:
        - type: GPU                # GPU | NPU | DCU | MLU | HPU
          model: A100-NVL-40G      # optional; kept exactly as written
          count: 1                 # a positive integer
          shared: false            # optional, default false
          needs: [RDMA]            # optional capabilities
      topologyPolicy:
        placement: sameNode        # sameNode | sameSwitch | any (default any)
        preferred: sameSwitch      # sameNUMA | sameNode | sameSwitch | any (optional)

Errors carry a path ("spec.devices[1].count") and all of them are reported at once. Unknown keys
are errors (they would be lost on export); unknown capability names in ``needs`` are kept and
reported as warnings.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import yaml

API_VERSIONS = ("suanchi.io/v1", "scheduling.example.io/v1")
DEFAULT_API_VERSION = "suanchi.io/v1"
KIND = "DeviceRequestTemplate"
DEVICE_TYPES = ("GPU", "NPU", "DCU", "MLU", "HPU")
PLACEMENTS = ("sameNode", "sameSwitch", "any")
PREFERENCES = ("sameNUMA", "sameNode", "sameSwitch", "any")
# Capabilities a device group may need, by folded spelling -> canonical spelling.
KNOWN_NEEDS = {
    n.casefold(): n
    for n in ("RDMA", "RoCE", "InfiniBand", "NVLink", "NVSwitch", "HCCS", "xGMI", "MLULink", "MIG", "vNPU")
}
MAX_TEXT_BYTES = 64 * 1024
MAX_DEVICE_GROUPS = 16
MAX_COUNT = 1024

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_TOP_KEYS = ("apiVersion", "kind", "metadata", "spec")
_METADATA_KEYS = ("name", "labels", "annotations")
_SPEC_KEYS = ("devices", "topologyPolicy")
_DEVICE_KEYS = ("type", "model", "count", "shared", "needs")
_POLICY_KEYS = ("placement", "preferred")


class SpecError(Exception):
    """Invalid document: ``errors`` is a list of (path, message)."""

    def __init__(self, errors: list[tuple[str, str]]) -> None:
        super().__init__("; ".join(f"{path}: {message}" for path, message in errors))
        self.errors = errors


class DocumentSyntaxError(Exception):
    """Not parseable YAML; ``line`` and ``column`` are 1-based when known."""

    def __init__(self, message: str, *, line: int | None = None, column: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.column = column


@dataclass
class Document:
    api_version: str
    name: str
    metadata: dict[str, Any]  # labels / annotations (name is separate)
    spec: dict[str, Any]
    warnings: list[str] = field(default_factory=list)


# ------------------------------------------------------------------ parsing


def document_parse(text: str) -> Any:
    """YAML (or JSON) text -> Python data; DocumentSyntaxError naming the line on bad syntax."""
    if not isinstance(text, str) or not text.strip():
        raise DocumentSyntaxError("the document is empty")
    if len(text.encode("utf-8")) > MAX_TEXT_BYTES:
        raise DocumentSyntaxError(f"the document is larger than {MAX_TEXT_BYTES // 1024} KiB")
    try:
        return yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        column = mark.column + 1 if mark is not None else None
        problem = exc.problem or exc.context or "invalid YAML"
        where = f"line {line}, column {column}" if line is not None else "an unknown place"
        raise DocumentSyntaxError(f"YAML syntax error at {where}: {problem}", line=line, column=column)
    except yaml.YAMLError as exc:  # pragma: no cover - unmarked errors are rare
        raise DocumentSyntaxError(f"YAML syntax error: {exc}")


# ------------------------------------------------------------------ validation


def _unknown_keys(value: dict, allowed: tuple[str, ...], path: str, errors: list[tuple[str, str]]) -> None:
    for key in value:
        if key not in allowed:
            errors.append((f"{path}.{key}", f"unknown field (allowed: {', '.join(allowed)})"))


def _string_map(value: Any, path: str, errors: list[tuple[str, str]]) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str | int | float) and not isinstance(v, bool)
        for k, v in value.items()
    ):
        errors.append((path, "must be a mapping of strings to strings"))
        return {}
    return {k: str(v) for k, v in value.items()}


def _device(raw: Any, path: str, errors: list[tuple[str, str]], warnings: list[str]) -> dict[str, Any]:
    if not isinstance(raw, dict):
        errors.append((path, "must be a mapping with type, count and optionally model, shared, needs"))
        return {}
    _unknown_keys(raw, _DEVICE_KEYS, path, errors)
    device: dict[str, Any] = {}

    kind = raw.get("type")
    if kind is None:
        errors.append((f"{path}.type", f"required: one of {', '.join(DEVICE_TYPES)}"))
    elif not isinstance(kind, str) or kind.strip().upper() not in DEVICE_TYPES:
        errors.append((f"{path}.type", f"unknown device type {kind!r}: use one of {', '.join(DEVICE_TYPES)}"))
    else:
        device["type"] = kind.strip().upper()

    if "model" in raw and raw["model"] is not None:
        model = raw["model"]
        # YAML reads a bare 3090 as a number: a model name is text either way.
        if isinstance(model, bool) or not isinstance(model, str | int):
            errors.append((f"{path}.model", "must be a model name (text)"))
        elif not str(model).strip():
            errors.append((f"{path}.model", "must not be empty (leave it out for any model of the type)"))
        elif len(str(model)) > 100:
            errors.append((f"{path}.model", "at most 100 characters"))
        else:
            device["model"] = str(model).strip()

    count = raw.get("count")
    if count is None:
        errors.append((f"{path}.count", "required: a positive integer"))
    elif isinstance(count, bool) or not isinstance(count, int) or count < 1:
        errors.append((f"{path}.count", "must be a positive integer"))
    elif count > MAX_COUNT:
        errors.append((f"{path}.count", f"at most {MAX_COUNT}"))
    else:
        device["count"] = count

    shared = raw.get("shared", False)
    if not isinstance(shared, bool):
        errors.append((f"{path}.shared", "must be true or false"))
    else:
        device["shared"] = shared

    needs = raw.get("needs", [])
    if needs is None:
        needs = []
    if not isinstance(needs, list) or not all(isinstance(n, str) and n.strip() for n in needs):
        errors.append((f"{path}.needs", "must be a list of capability names, e.g. [RDMA]"))
    else:
        normalised: list[str] = []
        for need in needs:
            canonical = KNOWN_NEEDS.get(need.strip().casefold())
            if canonical is None:
                canonical = need.strip()
                warnings.append(
                    f"{path}.needs: {canonical!r} is not a capability Suanchi knows "
                    f"({', '.join(KNOWN_NEEDS.values())}); kept as written"
                )
            if canonical not in normalised:
                normalised.append(canonical)
        device["needs"] = normalised
    return device


def _policy(raw: Any, path: str, errors: list[tuple[str, str]]) -> dict[str, str]:
    if raw is None:
        return {"placement": "any"}
    if not isinstance(raw, dict):
        errors.append((path, "must be a mapping with placement and optionally preferred"))
        return {}
    _unknown_keys(raw, _POLICY_KEYS, path, errors)
    policy: dict[str, str] = {}
    placement = raw.get("placement", "any")
    if placement not in PLACEMENTS:
        errors.append(
            (f"{path}.placement", f"unknown placement {placement!r}: use one of {', '.join(PLACEMENTS)}")
        )
    else:
        policy["placement"] = placement
    if "preferred" in raw:
        preferred = raw["preferred"]
        if preferred not in PREFERENCES:
            errors.append(
                (
                    f"{path}.preferred",
                    f"unknown preference {preferred!r}: use one of {', '.join(PREFERENCES)}",
                )
            )
        else:
            policy["preferred"] = preferred
    return policy


def _spec(raw: Any, path: str, errors: list[tuple[str, str]], warnings: list[str]) -> dict[str, Any]:
    if not isinstance(raw, dict):
        errors.append((path, "required: a mapping with devices and topologyPolicy"))
        return {}
    _unknown_keys(raw, _SPEC_KEYS, path, errors)
    devices = raw.get("devices")
    spec: dict[str, Any] = {}
    if not isinstance(devices, list) or not devices:
        errors.append((f"{path}.devices", "required: a non-empty list of device groups"))
    elif len(devices) > MAX_DEVICE_GROUPS:
        errors.append((f"{path}.devices", f"at most {MAX_DEVICE_GROUPS} device groups"))
    else:
        spec["devices"] = [
            _device(item, f"{path}.devices[{index}]", errors, warnings) for index, item in enumerate(devices)
        ]
    spec["topologyPolicy"] = _policy(raw.get("topologyPolicy"), f"{path}.topologyPolicy", errors)
    return spec


def spec_validate(spec: Any) -> tuple[dict[str, Any], list[str]]:
    """A spec (the part under ``spec:``) -> (normalised spec, warnings); SpecError on any error."""
    errors: list[tuple[str, str]] = []
    warnings: list[str] = []
    normalised = _spec(spec, "spec", errors, warnings)
    if errors:
        raise SpecError(errors)
    return normalised, warnings


def document_validate(data: Any) -> Document:
    """Parsed data -> Document (normalised); SpecError listing every problem with its path."""
    errors: list[tuple[str, str]] = []
    warnings: list[str] = []
    if not isinstance(data, dict):
        raise SpecError([("(document)", "must be a mapping with apiVersion, kind, metadata and spec")])
    _unknown_keys(data, _TOP_KEYS, "(document)", errors)
    errors[:] = [(path.removeprefix("(document)."), message) for path, message in errors]

    api_version = data.get("apiVersion")
    if api_version not in API_VERSIONS:
        errors.append(("apiVersion", f"must be one of {', '.join(API_VERSIONS)} (got {api_version!r})"))
    kind = data.get("kind")
    if kind != KIND:
        errors.append(("kind", f"must be {KIND} (got {kind!r})"))

    metadata = data.get("metadata")
    name = ""
    extra: dict[str, Any] = {}
    if not isinstance(metadata, dict):
        errors.append(("metadata", "required: a mapping with name"))
    else:
        _unknown_keys(metadata, _METADATA_KEYS, "metadata", errors)
        raw_name = metadata.get("name")
        if not isinstance(raw_name, str) or not raw_name:
            errors.append(("metadata.name", "required"))
        elif len(raw_name) > 253 or not _DNS_SUBDOMAIN.match(raw_name):
            errors.append(
                (
                    "metadata.name",
                    "must be a DNS-1123 name: lower-case letters, digits, '-' and '.', "
                    "alphanumeric at both ends, at most 253 characters",
                )
            )
        else:
            name = raw_name
        for key in ("labels", "annotations"):
            if key in metadata:
                value = _string_map(metadata[key], f"metadata.{key}", errors)
                if value:
                    extra[key] = value

    spec = _spec(data.get("spec"), "spec", errors, warnings)
    if errors:
        raise SpecError(errors)
    return Document(api_version=api_version, name=name, metadata=extra, spec=spec, warnings=warnings)


# ------------------------------------------------------------------ rendering


class _FlowList(list):
    """A list of scalars written inline: ``needs: [RDMA]``."""


class _Dumper(yaml.SafeDumper):
    def increase_indent(self, flow: bool = False, indentless: bool = False):
        # Indent block sequences under their key (kubectl style), not flush with it.
        return super().increase_indent(flow, False)

    def ignore_aliases(self, data: Any) -> bool:
        return True


_Dumper.add_representer(
    _FlowList,
    lambda dumper, value: dumper.represent_sequence("tag:yaml.org,2002:seq", value, flow_style=True),
)


def document_dict(*, api_version: str, name: str, metadata: dict[str, Any], spec: dict[str, Any]) -> dict:
    """The document as plain data, keys in the seed's order."""
    meta: dict[str, Any] = {"name": name}
    for key in ("labels", "annotations"):
        if metadata.get(key):
            meta[key] = dict(metadata[key])
    devices = []
    for device in spec.get("devices") or []:
        item = {key: device[key] for key in _DEVICE_KEYS if key in device}
        devices.append(item)
    policy = {
        key: spec["topologyPolicy"][key] for key in _POLICY_KEYS if key in spec.get("topologyPolicy", {})
    }
    return {
        "apiVersion": api_version,
        "kind": KIND,
        "metadata": meta,
        "spec": {"devices": devices, "topologyPolicy": policy},
    }


def yaml_dump(data: Any) -> str:
    """YAML in the seed's style: block mappings, inline lists of scalars, keys in the given order."""

    def flow(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: flow(v) for k, v in value.items()}
        if isinstance(value, list):
            items = [flow(v) for v in value]
            if all(not isinstance(v, dict | list) for v in items):
                return _FlowList(items)
            return items
        return value

    return yaml.dump(
        flow(data), Dumper=_Dumper, sort_keys=False, allow_unicode=True, default_flow_style=False, width=100
    )


def json_dump(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False, indent=2) + "\n"
