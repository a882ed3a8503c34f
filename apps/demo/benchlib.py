"""The demo's benchmark library: profiles from the data file, and a library of SYNTHETIC results.

On the simulated cluster nothing is measured, so the demo library is filled the way the simulated
backend fills it at the end of a benchmark job (``apps.benchlib.services.synthetic_throughput``: a
plausible figure from the catalog's peak), three runs per device model in the fleet and profile, on
the whole card and on each active slice template. Every row is marked synthetic and says so on every
page. Each compute-bound profile uses the peak of its own precision (``relevant_peak``: BF16/FP16 tensor
for training, INT8 for quantised inference) and decode-bound serving the memory bandwidth, so cards differ
where their peaks do. A model whose relevant peak is unknown gets nothing ("no data"). Two benchmark jobs
are also submitted, so the running demo shows one being scheduled, reporting and landing in the library.

The migration targets (Ascend 910B3, Hygon DCU Z100) have no peak in the catalog, so nothing can be derived
for them; the cockpit's "Measured evidence per workload" needs a figure on both tracks. The demo posts
them the way a benchmark harness would (``apps.rollout.services.benchmark_run_record``, a run that names
the profile lands in the library as a trusted gray-batch measurement): per (target, profile) a SCENARIO
ratio to the source card's synthetic figure (``EVIDENCE_SCENARIO``). Those ratios are choices of the demo
scenario — like the migration's p99 factors — not datasheet figures and not measurements; the runs'
source is ``simulated:…``, so every page marks them synthetic.
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
    evidence = _migration_evidence(actor)
    submitted = _benchmark_jobs(actor)
    proposals = coefficient_proposals_refresh(actor=actor)
    stdout.write(
        f"benchmark library: profiles {counts}, {made} synthetic measurements, {evidence} simulated "
        f"benchmark runs on the migration targets, {submitted} benchmark jobs, "
        f"{len(proposals)} coefficient proposals"
    )
    return {
        "measurements": made,
        "proposals": len(proposals),
        "benchmark_jobs": submitted,
        "evidence_runs": evidence,
    }


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


# The migration evidence (see the module docstring). Scenario choices, not facts: one target agrees with
# its policy coefficient, one contradicts it, so the cockpit shows both verdicts and a proposal.
EVIDENCE_SOURCE = "simulated:demo-migration-evidence"
# (source model, target model, profile key): target per-card throughput ÷ the source card's.
EVIDENCE_SCENARIO = {
    ("T4", "Ascend 910B3", "llm-serve-7b"): Decimal("4.0"),
    ("T4", "DCU Z100/Z100L", "llm-serve-7b"): Decimal("1.1"),
    ("A100 80GB SXM4", "Ascend 910B3", "llm-train-7b"): Decimal("0.72"),
}


def _migration_evidence(actor) -> int:
    """Simulated benchmark runs of each demo service's profile on its target track's cards (idempotent)."""
    from apps.benchlib.services import _noise, per_card_throughput
    from apps.jobs.models import Allocation
    from apps.rollout.models import BenchmarkRun
    from apps.rollout.services import benchmark_run_record

    if BenchmarkRun.objects.filter(source=EVIDENCE_SOURCE).exists():
        return 0
    now = timezone.now()
    made = 0
    done = set()
    services = MigratedService.objects.filter(workload_profile__isnull=False).select_related(
        "workload_profile", "source_job", "target_job"
    )
    for service in services.order_by("pk"):
        profile = service.workload_profile
        source, target = (_job_model(job) for job in (service.source_job, service.target_job))
        if source is None or target is None:
            continue
        ratio = EVIDENCE_SCENARIO.get((source.name, target.name, profile.key))
        base = per_card_throughput(profile, source)
        if ratio is None or base is None or (target.pk, profile.pk) in done:
            continue
        allocation = Allocation.objects.filter(job=service.target_job).select_related("device__node").first()
        node = allocation.device.node if allocation else None
        if node is None:
            device = Device.objects.filter(device_model=target).select_related("node").first()
            node = device.node if device else None
        if node is None:
            continue
        done.add((target.pk, profile.pk))
        for run in range(RUNS):
            figure = base["per_card"] * ratio * Decimal(str(_noise(f"{service.name}:{run}")))
            benchmark_run_record(
                actor=actor,
                name=f"{profile.key} (demo scenario)",
                node=node,
                job=service.target_job,
                throughput=figure.quantize(Decimal("0.001")),
                unit=profile.unit,
                measured_at=now - timedelta(days=2 * (run + 1)),
                source=EVIDENCE_SOURCE,
                profile=profile,
            )
            made += 1
    return made


def _job_model(job):
    if job is None:
        return None
    if job.device_model_id:
        return job.device_model
    return job.template.device_model if job.template_id else None
