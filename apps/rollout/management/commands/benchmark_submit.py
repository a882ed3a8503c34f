"""python manage.py benchmark_submit --profile P --project SLUG [--user NAME] (--per-model | --batch NAME) [--json]

Submit benchmark runs (jobs of kind "benchmark") for the library: one whole card of every device model in
the fleet (``--per-model``), or one whole card per node of a gray batch (``--batch``), kept on the batch by its
label. Each run reports its throughput at the end (``POST /api/jobs/jobs/<id>/throughput/``;
the simulated backend reports a synthetic figure) and lands in the benchmark library."""

import json

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from apps.accounts.models import Project
from apps.catalog.models import DeviceModel, WorkloadProfile
from apps.core.errors import ApplicationError
from apps.inventory.models import Device
from apps.jobs.models import Job
from apps.rollout.models import GrayBatch
from apps.scheduling.lifecycle import job_submit

IMAGE = "registry.example.com/suanchi/bench:1"


class Command(BaseCommand):
    help = (
        "Submit benchmark runs for the benchmark library (one card per model, or every node of a gray batch)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--profile", required=True)
        parser.add_argument("--project", required=True, help="project slug the runs are billed to")
        parser.add_argument("--user", help="submitting user (default: the first admin of the project)")
        where = parser.add_mutually_exclusive_group(required=True)
        where.add_argument("--per-model", action="store_true")
        where.add_argument("--batch", help="gray batch name")
        parser.add_argument("--image", default=IMAGE)
        parser.add_argument("--json", action="store_true")

    def handle(self, *args, **options):
        profile = WorkloadProfile.objects.filter(key=options["profile"]).first()
        project = Project.objects.filter(slug=options["project"]).first()
        if profile is None:
            raise CommandError(f"unknown workload profile {options['profile']!r}")
        if project is None:
            raise CommandError(f"unknown project {options['project']!r}")
        users = get_user_model().objects
        user = (
            users.filter(username=options["user"]).first()
            if options["user"]
            else users.filter(memberships__project=project, memberships__role__in=("admin", "member")).first()
        )
        if user is None:
            raise CommandError("no user to submit as: give --user (a member of the project)")
        targets = []  # (label, device model, node selector)
        if options["per_model"]:
            in_fleet = Device.objects.exclude(health=Device.Health.RETIRED).values("device_model_id")
            for model in DeviceModel.objects.filter(pk__in=in_fleet).order_by("vendor", "name"):
                targets.append((model.slug, model, {}))
        else:
            batch = GrayBatch.objects.filter(name=options["batch"]).first()
            if batch is None:
                raise CommandError(f"unknown gray batch {options['batch']!r}")
            for node in batch.nodes.order_by("name"):
                device = (
                    node.devices.exclude(device_model__isnull=True).select_related("device_model").first()
                )
                if device is not None:
                    targets.append((node.name, device.device_model, {"kubernetes.io/hostname": node.name}))
        made, refused = [], []
        for label, model, selector in targets:
            try:
                job = job_submit(
                    project=project,
                    actor=user,
                    name=f"bench-{profile.key}-{label}"[:120],
                    kind=Job.Kind.BENCHMARK,
                    image=options["image"],
                    request_kind=Job.RequestKind.WHOLE_CARDS,
                    device_model=model,
                    count=1,
                    workload_profile=profile,
                    node_selector=selector,
                    gray_opt_in=bool(options["batch"]),
                )
            except ApplicationError as exc:
                refused.append({"target": label, "reason": exc.message})
                continue
            made.append({"target": label, "job": job.pk})
        if options["json"]:
            self.stdout.write(json.dumps({"submitted": made, "refused": refused}, ensure_ascii=False))
            return
        for row in made:
            self.stdout.write(f"submitted job {row['job']} on {row['target']}")
        for row in refused:
            self.stdout.write(f"refused {row['target']}: {row['reason']}")
