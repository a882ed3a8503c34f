"""The runtime precheck of a job against the fleet: which nodes' drivers cannot run its runtime
requirement (``cuda 12.4``, ``cann 8.0.RC3``, …), with the reason per node.

Used by the scheduling cycle (cached per cycle), the submit check and the submit preview, so the three
never disagree (issue 21 §3b: a runtime no node supports is refused at submit, not left pending).
"""

from __future__ import annotations

from apps.inventory import compat
from apps.inventory.models import Node
from apps.jobs.models import Job


def job_vendors(job: Job) -> set[str]:
    """The vendors a job's request can land on (empty: any)."""
    if job.request_kind == Job.RequestKind.TEMPLATE:
        return {job.template.device_model.vendor}
    if job.request_kind == Job.RequestKind.WHOLE_CARDS:
        return {job.device_model.vendor} if job.device_model_id else ({job.vendor} if job.vendor else set())
    if job.request_kind in (Job.RequestKind.COMPUTE_UNITS, Job.RequestKind.PROFILE):
        return set(job.allowed_vendors or [])
    return {c["vendor"] for r in job.request_template.resolution or [] for c in r.get("candidates", [])}


class Prechecks:
    """Runtime precheck answers per (requirement, vendor), computed once per cycle or request."""

    def __init__(self, nodes: list[Node] | None = None) -> None:
        self._nodes = nodes
        self.cache: dict[tuple[str, str], dict[str, str]] = {}

    @property
    def nodes(self) -> list[Node]:
        """Loaded on first use: most cycles have no job with a runtime requirement."""
        if self._nodes is None:
            self._nodes = list(Node.objects.exclude(status=Node.Status.RETIRED))
        return self._nodes

    def failures(self, job: Job, vendors: set[str] | None = None) -> dict[str, str]:
        requirement = (job.runtime_requirement or "").strip()
        if not requirement:
            return {}
        vendors = job_vendors(job) if vendors is None else vendors
        out: dict[str, str] = {}
        for vendor in sorted(vendors) or [""]:
            key = (requirement, vendor)
            if key not in self.cache:
                answers = {}
                for node in self.nodes:
                    result = compat.node_precheck(node, requirement, vendor=vendor or None)
                    if not result.ok:
                        answers[node.name] = result.reason
                self.cache[key] = answers
            for name, reason in self.cache[key].items():
                out.setdefault(name, reason)
        return out
