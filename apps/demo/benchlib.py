"""The demo's benchmark library: profiles from the data file, and a library of SYNTHETIC results.

On the simulated cluster nothing is measured, so the demo library is filled the way the simulated
backend fills it at the end of a benchmark job (``apps.benchlib.services.synthetic_throughput``: a
plausible figure from the catalog's peak), three runs per device model in the fleet and profile, on
the whole card and on each active slice template. Every row is marked synthetic and says so on every
page. A model whose catalog peak is unknown gets nothing ("no data"). Two benchmark jobs are also
submitted, so the running demo shows one being scheduled, reporting and landing in the library.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

from django.db import transaction
from django.utils import timezone

from apps.benchlib.models import Measurement
from apps.benchlib.services import coefficient_proposals_refresh, synthetic_throughput
from apps.catalog.models import ComputeTemplate, DeviceModel, WorkloadProfile
from apps.catalog.workloads import workload_profile_sync
from apps.inventory.models import Device
from apps.migration.models import MigratedService

LABEL = "demo: simulated benchmark run"
RUNS = 3


@transaction.atomic
def load(*, actor, stdout) -> dict:
    counts = workload_profile_sync(actor=actor)
    made = 0
    if not Measurement.objects.filter(source_label__startswith=LABEL).exists():
        in_fleet = Device.objects.exclude(health=Device.Health.RETIRED).values("device_model_id")
        models = list(DeviceModel.objects.filter(pk__in=in_fleet))
        now = timezone.now()
        rows = []
        for profile in WorkloadProfile.objects.all():
            for model in models:
                shapes = [(None, Decimal(100))] + [
                    (t, Decimal(t.compute_share))
                    for t in ComputeTemplate.objects.filter(device_model=model, is_retired=False)
                    if Decimal(t.compute_share) < 100
                ]
                for template, share in shapes:
                    if (
                        profile.memory_mib
                        and (template.memory_mib if template else model.memory_mib or 0) < profile.memory_mib
                    ):
                        continue
                    for run in range(RUNS):
                        seed = (
                            f"demo:{profile.key}:{model.slug}:{template.slug if template else 'whole'}:{run}"
                        )
                        result = synthetic_throughput(profile, model, share, seed=seed)
                        if result is None:
                            break
                        throughput, latency = result
                        rows.append(
                            Measurement(
                                profile=profile,
                                device_model=model,
                                template=template,
                                compute_share=share,
                                cards=1,
                                throughput=throughput,
                                p99_latency_ms=latency,
                                runs=1,
                                synthetic=True,
                                source=Measurement.Source.BENCHMARK,
                                source_label=f"{LABEL} {run + 1}",
                                measured_at=now - timedelta(days=3 * (run + 1)),
                            )
                        )
        Measurement.objects.bulk_create(rows)
        made = len(rows)
    for service in MigratedService.objects.filter(workload_profile__isnull=True):
        key = "llm-serve-7b" if service.kind == MigratedService.Kind.INFERENCE else "llm-train-7b"
        service.workload_profile = WorkloadProfile.objects.filter(key=key).first()
        service.save(update_fields=["workload_profile", "updated_at"])
    submitted = _benchmark_jobs(actor)
    proposals = coefficient_proposals_refresh(actor=actor)
    stdout.write(
        f"benchmark library: profiles {counts}, {made} synthetic measurements, {submitted} benchmark jobs, "
        f"{len(proposals)} coefficient proposals"
    )
    return {"measurements": made, "proposals": len(proposals), "benchmark_jobs": submitted}


# (project, user, model, profile): one card per model on demand, the way staff would start them.
BENCHMARK_JOBS = [
    ("vision", "alice", "T4", "detection-infer"),
    ("online-inference", "bob", "A100 80GB SXM4", "llm-serve-7b"),
]


def _benchmark_jobs(actor) -> int:
    from django.contrib.auth import get_user_model

    from apps.accounts.models import Project
    from apps.core.errors import ApplicationError
    from apps.jobs.models import Job
    from apps.scheduling.lifecycle import job_submit

    made = 0
    for slug, username, model_name, key in BENCHMARK_JOBS:
        project = Project.objects.filter(slug=slug).first()
        user = get_user_model().objects.filter(username=username).first()
        model = DeviceModel.objects.filter(name=model_name).first()
        profile = WorkloadProfile.objects.filter(key=key).first()
        if None in (project, user, model, profile):
            continue
        name = f"bench-{key}-{model.slug}"[:120]
        if Job.objects.filter(project=project, name=name).exists():
            continue
        try:
            job_submit(
                project=project,
                actor=user,
                name=name,
                kind=Job.Kind.BENCHMARK,
                image="registry.example.com/suanchi/bench:1",
                request_kind=Job.RequestKind.WHOLE_CARDS,
                device_model=model,
                count=1,
                workload_profile=profile,
                expected_duration_s=600,
            )
        except ApplicationError:
            continue  # a smaller fleet: no card of that model
        made += 1
    return made
