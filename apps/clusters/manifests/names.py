"""The names Suanchi gives what it renders: labels and annotations, the kinds it applies with their
apiVersion, DNS-1123 names and label values, a workload's and a project's namespace's names."""

from __future__ import annotations

import re
from typing import Any

from apps.clusters import sharing

MANAGED_BY_KEY = "app.kubernetes.io/managed-by"
MANAGED_BY = "suanchi"
LABEL_JOB = "suanchi.io/job"
LABEL_PROJECT = "suanchi.io/project"
LABEL_ATTEMPT = "suanchi.io/attempt"
ANN_TRACE = "suanchi.io/trace-id"
ANN_UUIDS = "suanchi.io/device-uuids"
ANN_PLACEMENT = "suanchi.io/placement"
ANN_EXPECTED_DURATION = "suanchi.io/expected-duration-seconds"
LABEL_WORKLOAD = "suanchi.io/workload"
HAMI_UUID_ANNOTATION = sharing.HAMI_SHARES["nvidia"].uuid_annotation
QUOTA_NAME = "suanchi-quota"
HOSTNAME_LABEL = "kubernetes.io/hostname"

# Object kinds Suanchi applies, with their apiVersion (used by render_manifests and the tests).
API_VERSIONS = {
    "Namespace": "v1",
    "ResourceQuota": "v1",
    "Job": "batch/v1",
    "Deployment": "apps/v1",
    "Node": "v1",
    "Service": "v1",
    "ConfigMap": "v1",
    "ResourceClaim": "resource.k8s.io/v1",
    "ResourceClaimTemplate": "resource.k8s.io/v1",
    "DeviceClass": "resource.k8s.io/v1",
}


_DNS_INVALID = re.compile(r"[^a-z0-9-]+")
_LABEL_INVALID = re.compile(r"[^A-Za-z0-9._-]+")
_LABEL_KEY_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$")


def dns_label(text: object, *, max_length: int = 63, fallback: str = "x") -> str:
    """A DNS-1123 label: lowercase [a-z0-9-], alphanumeric at both ends, at most ``max_length``."""
    value = _DNS_INVALID.sub("-", str(text).lower())
    value = re.sub(r"-{2,}", "-", value)[:max_length].strip("-")
    return value or fallback


def label_value(text: object) -> str:
    """A valid label value: at most 63 of [A-Za-z0-9._-], alphanumeric at both ends ("" allowed)."""
    value = _LABEL_INVALID.sub("-", str(text))
    value = value[:63]
    return value.strip("-._")


def valid_label_key(key: str) -> bool:
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return False
    return bool(_LABEL_KEY_NAME.match(name))


def workload_name(job: Any, attempt: int | None = None) -> str:
    """``suanchi-<job id>`` (Deployment) or ``suanchi-<job id>-a<attempt>`` (batch Job)."""
    base = f"suanchi-{dns_label(job.pk, max_length=40)}"
    return base if attempt is None else f"{base}-a{int(attempt)}"


def project_namespace(project: Any) -> str:
    return dns_label(project.namespace or project.slug)


def common_labels(job: Any) -> dict[str, str]:
    return {
        MANAGED_BY_KEY: MANAGED_BY,
        LABEL_JOB: label_value(job.pk),
        LABEL_PROJECT: label_value(job.project.slug),
    }
