"""One strict schema check for every object Suanchi renders (kubernetes-validate ships the schemas;
nothing is downloaded).

Every object must be strict-valid for each Kubernetes minor a cluster may run: 1.34 (where
``resource.k8s.io/v1`` DRA went GA), 1.35 and 1.36. Objects that use no DRA must also be valid for
1.30, the oldest minor Suanchi supports (1.30 has only ``v1alpha2`` DRA, whose pod
``resourceClaims[]`` took a ``source``, so DRA objects and pods using claims are not checked there).
"""

from __future__ import annotations

import kubernetes_validate

DRA_API_VERSION = "resource.k8s.io/v1"
SUPPORTED_VERSIONS = ("1.34.0", "1.35.0", "1.36.0")
OLDEST_VERSION = "1.30.0"


def uses_dra(obj: dict) -> bool:
    pod = obj.get("spec", {}).get("template", {}).get("spec", {}) or obj.get("spec", {})
    return obj.get("apiVersion") == DRA_API_VERSION or bool(pod.get("resourceClaims"))


def versions_for(obj: dict) -> tuple[str, ...]:
    return SUPPORTED_VERSIONS if uses_dra(obj) else (OLDEST_VERSION, *SUPPORTED_VERSIONS)


def assert_strict_valid(obj: dict) -> None:
    """Raise (kubernetes_validate's ValidationError, naming the field) unless ``obj`` is strict-valid
    for every version in :func:`versions_for`."""
    for version in versions_for(obj):
        minor = version.rsplit(".", 1)[0]
        assert kubernetes_validate.validate(obj, version, strict=True) == minor, (version, obj["metadata"])
