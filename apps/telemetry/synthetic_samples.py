"""Synthetic utilization for simulated clusters, so a fresh install shows a living fleet.

Every minute (the telemetry beat task) each card of a simulated cluster gets six 10-second samples:
cards held by a running job are busy (a level that depends on the job, with some noise) and use most
of the memory their allocations hold; other cards idle. Samples carry the job's pod, so attribution
is exact, and go through the same ``samples_ingest`` as real exporters, marked *estimated* under the
source ``simulated:<cluster>``. Timestamps sit on a 10-second grid, so a repeated minute is
recognised as already ingested. Nothing here claims a vendor spec: power is left unknown.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections import defaultdict

from django.utils import timezone

from apps.clusters.manifests import dns_label, workload_name
from apps.inventory.models import Cluster, Device
from apps.jobs.models import Allocation, JobState
from apps.telemetry.ingest import samples_ingest
from apps.telemetry.samples import Sample

STEP_S = 10
WINDOW_S = 60


def _noise(*parts: object) -> float:
    """A deterministic value in [0, 1) for the given key (same minute, same card → same reading)."""
    digest = hashlib.sha256("/".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:4], "big") / 2**32


def synthetic_samples(cluster: Cluster, *, now: dt.datetime | None = None) -> list[Sample]:
    now = now or timezone.now()
    end = int(now.timestamp()) // STEP_S * STEP_S
    instants = [end - WINDOW_S + STEP_S * (i + 1) for i in range(WINDOW_S // STEP_S)]
    devices = list(
        Device.objects.filter(node__cluster=cluster)
        .exclude(health__in=[Device.Health.RETIRED, Device.Health.LOST])
        .select_related("device_model", "node")
    )
    held: dict[int, list[Allocation]] = defaultdict(list)
    for allocation in Allocation.objects.filter(
        device__in=devices, released_at__isnull=True, job__state=JobState.RUNNING
    ).select_related("job__project"):
        held[allocation.device_id].append(allocation)
    samples = []
    for device in devices:
        total = (device.device_model.memory_mib if device.device_model else None) or device.memory_mib
        allocations = held.get(device.pk, [])
        for at in instants:
            if allocations:
                share = sum(a.compute_milli for a in allocations) / 1000
                level = 0.45 + 0.45 * _noise("job", allocations[0].job_id)  # 45-90 % busy per job
                busy = min(100.0, 100 * share * level * (0.9 + 0.2 * _noise(device.pk, at)))
                memory = sum(a.memory_mib for a in allocations) * (0.7 + 0.2 * _noise("m", device.pk, at))
            else:
                busy = 3 * _noise(device.pk, at)
                memory = 0.0
            sample = Sample(
                at=float(at),
                device_id=device.pk,
                utilization_pct=round(busy, 2),
                memory_used_mib=round(min(memory, total or memory), 1),
                memory_total_mib=total,
                temperature_c=round(32 + busy * 0.4 + 3 * _noise("t", device.pk, at), 1),
            )
            if len(allocations) == 1:
                job = allocations[0].job
                sample.namespace = dns_label(job.project.namespace or job.project.slug)
                sample.pod = f"{workload_name(job, job.attempt)}-sim"
            samples.append(sample)
    return samples


def simulated_telemetry_emit(*, now: dt.datetime | None = None) -> dict:
    """Emit and ingest one minute of samples for every simulated cluster."""
    out = {}
    for cluster in Cluster.objects.filter(backend=Cluster.Backend.SIMULATED).order_by("pk"):
        samples = synthetic_samples(cluster, now=now)
        if not samples:
            continue
        report = samples_ingest(
            samples=samples,
            source=f"simulated:{cluster.slug}",
            quality="estimated",
            scrape_interval_s=STEP_S,
            cluster=cluster,
            actor="simulator",
            now=now,
        )
        out[cluster.slug] = report.as_dict()
    return out
