"""Jobs: what a project asks for, in neutral terms, and where it is in its life."""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import F, Q
from django.utils.translation import gettext_lazy as _

from apps.accounts.models import Project
from apps.catalog.models import Isolation
from apps.core.models import BaseModel


class JobState(models.TextChoices):
    PENDING = "pending", _("pending")
    ADMITTED = "admitted", _("admitted")
    SCHEDULED = "scheduled", _("scheduled")
    RUNNING = "running", _("running")
    SUCCEEDED = "succeeded", _("succeeded")
    FAILED = "failed", _("failed")
    PREEMPTED = "preempted", _("preempted")
    CANCELLED = "cancelled", _("cancelled")


# The state machine. Requeue after preemption or a retried failure goes back to PENDING.
TRANSITIONS: dict[str, frozenset[str]] = {
    JobState.PENDING: frozenset({JobState.ADMITTED, JobState.SCHEDULED, JobState.CANCELLED, JobState.FAILED}),
    JobState.ADMITTED: frozenset({JobState.SCHEDULED, JobState.PENDING, JobState.CANCELLED}),
    JobState.SCHEDULED: frozenset(
        {JobState.RUNNING, JobState.PENDING, JobState.FAILED, JobState.CANCELLED, JobState.PREEMPTED}
    ),
    JobState.RUNNING: frozenset(
        {JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.PREEMPTED, JobState.PENDING}
    ),
    JobState.PREEMPTED: frozenset({JobState.PENDING, JobState.CANCELLED}),
    JobState.FAILED: frozenset({JobState.PENDING}),
    JobState.SUCCEEDED: frozenset(),
    JobState.CANCELLED: frozenset(),
}
ACTIVE_STATES = (JobState.SCHEDULED, JobState.RUNNING)
QUEUED_STATES = (JobState.PENDING, JobState.ADMITTED)
FINAL_STATES = (JobState.SUCCEEDED, JobState.CANCELLED)


class PriorityClass(models.TextChoices):
    LOW = "low", _("low")
    NORMAL = "normal", _("normal")
    HIGH = "high", _("high")
    CRITICAL = "critical", _("critical")


PRIORITY_VALUES = {"low": 100, "normal": 500, "high": 800, "critical": 1000}

# The Job fields a submitter may set (job_submit accepts these; the API lists them in this order).
SUBMIT_FIELDS = (
    "name",
    "kind",
    "image",
    "command",
    "env",
    "runtime_requirement",
    "request_kind",
    "template",
    "device_model",
    "vendor",
    "min_memory_mib",
    "required_features",
    "count",
    "compute_units",
    "memory_mib",
    "allowed_vendors",
    "request_template",
    "workload_profile",
    "target_throughput",
    "target_latency_ms",
    "replicas",
    "node_selector",
    "tolerations",
    "gray_opt_in",
    "priority_class",
    "expected_duration_s",
    "checkpoint_dir",
    "max_retries",
    "retry_backoff_s",
)


class Job(BaseModel):
    class Kind(models.TextChoices):
        TRAINING = "training", _("training")
        INFERENCE = "inference", _("inference service")
        FINETUNE = "finetune", _("fine-tune")
        BATCH = "batch", _("batch")
        BENCHMARK = "benchmark", _("benchmark run")

    class RequestKind(models.TextChoices):
        TEMPLATE = "template", _("compute template × count")
        WHOLE_CARDS = "whole_cards", _("whole cards")
        COMPUTE_UNITS = "compute_units", _("compute units + memory")
        REQUEST_TEMPLATE = "request_template", _("device request template")
        PROFILE = "profile", _("workload profile + target throughput")

    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="jobs")
    name = models.CharField(_("name"), max_length=120)
    kind = models.CharField(_("kind"), max_length=12, choices=Kind.choices, default=Kind.TRAINING)
    image = models.CharField(_("image"), max_length=300)
    command = models.JSONField(_("command"), default=list, blank=True)
    env = models.JSONField(_("environment"), default=dict, blank=True)
    # e.g. "cuda 12.4", "cann 8.0.RC3"; checked against each node by the compatibility precheck.
    runtime_requirement = models.CharField(_("runtime requirement"), max_length=60, blank=True)

    request_kind = models.CharField(_("request"), max_length=20, choices=RequestKind.choices)
    # template × count
    template = models.ForeignKey(
        "catalog.ComputeTemplate", null=True, blank=True, on_delete=models.PROTECT, related_name="jobs"
    )
    # whole cards: by model, or by attributes (vendor, minimum memory, features)
    device_model = models.ForeignKey(
        "catalog.DeviceModel", null=True, blank=True, on_delete=models.PROTECT, related_name="jobs"
    )
    vendor = models.CharField(_("vendor"), max_length=20, blank=True)
    min_memory_mib = models.PositiveIntegerField(_("minimum card memory (MiB)"), null=True, blank=True)
    required_features = models.JSONField(_("required features"), default=list, blank=True)
    # count of slices or whole cards per replica
    count = models.PositiveSmallIntegerField(_("count"), default=1, validators=[MinValueValidator(1)])
    # neutral compute units + memory with allowed vendors
    compute_units = models.DecimalField(
        _("compute units"), max_digits=8, decimal_places=3, null=True, blank=True
    )
    memory_mib = models.PositiveIntegerField(_("memory (MiB)"), null=True, blank=True)
    allowed_vendors = models.JSONField(_("allowed vendors"), default=list, blank=True)
    request_template = models.ForeignKey(
        "catalog.DeviceRequestTemplate", null=True, blank=True, on_delete=models.PROTECT, related_name="jobs"
    )
    # workload profile + target: placed on whatever the benchmark library says is cheapest per unit of
    # work (apps.benchlib.recommend); benchmark runs name the profile they measure.
    workload_profile = models.ForeignKey(
        "catalog.WorkloadProfile", null=True, blank=True, on_delete=models.PROTECT, related_name="jobs"
    )
    target_throughput = models.DecimalField(
        _("target throughput"), max_digits=14, decimal_places=3, null=True, blank=True
    )
    target_latency_ms = models.DecimalField(
        _("p99 latency bound (ms)"), max_digits=10, decimal_places=2, null=True, blank=True
    )
    replicas = models.PositiveSmallIntegerField(
        _("replicas"), default=1, validators=[MinValueValidator(1), MaxValueValidator(64)]
    )
    node_selector = models.JSONField(_("node selector"), default=dict, blank=True)
    tolerations = models.JSONField(_("tolerations"), default=list, blank=True)
    gray_opt_in = models.BooleanField(_("may run on gray-release nodes"), default=False)

    priority_class = models.CharField(
        _("priority"), max_length=10, choices=PriorityClass.choices, default=PriorityClass.NORMAL
    )
    # No index of its own: (priority, created_at) below leads with it (issue 31: each index is one more
    # entry for every state change of a job, and a cycle changes thousands).
    priority = models.PositiveIntegerField(default=PRIORITY_VALUES["normal"])
    expected_duration_s = models.PositiveIntegerField(_("expected duration (s)"), null=True, blank=True)
    checkpoint_dir = models.CharField(_("checkpoint directory"), max_length=300, blank=True)
    max_retries = models.PositiveSmallIntegerField(
        _("max retries"), default=0, validators=[MaxValueValidator(20)]
    )
    retry_backoff_s = models.PositiveIntegerField(_("retry backoff (s)"), default=60)
    attempt = models.PositiveSmallIntegerField(default=0)
    # Nodes a retry must avoid (where an earlier attempt failed), and when the next attempt may start.
    excluded_nodes = models.JSONField(default=list, blank=True)
    retry_not_before = models.DateTimeField(null=True, blank=True)
    # The checkpoint the next attempt resumes from (SUANCHI_RESUME_FROM); set on retry and preemption.
    resume_from = models.CharField(max_length=300, blank=True)
    # The fault runbook entry the last failure points at (apps/scheduling/data/runbook.yaml).
    failure_class = models.CharField(max_length=40, blank=True)

    # Indexed by (state, id) and (state, priority, created_at) below, not on its own (see priority).
    state = models.CharField(max_length=12, choices=JobState.choices, default=JobState.PENDING)
    state_reason = models.CharField(max_length=500, blank=True)
    state_changed_at = models.DateTimeField(null=True, blank=True)
    submitted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="submitted_jobs",
    )
    # Compute units per hour the request is worth at submission (coefficient × share × count × replicas).
    requested_cu = models.DecimalField(max_digits=10, decimal_places=4, null=True, blank=True)
    last_trace_id = models.UUIDField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["state", "-priority", "created_at"], name="jobs_job_queue_idx"),
            # The job list's sortable columns (apps.jobs.views.listing.JOB_SORTS): a page of a sorted list
            # of 200,000 jobs walks an index instead of sorting the table (issue 20).
            models.Index(fields=["requested_cu", "id"], name="jobs_job_cu_sort_idx"),
            models.Index(fields=["name", "id"], name="jobs_job_name_sort_idx"),
            models.Index(fields=["state", "id"], name="jobs_job_state_sort_idx"),
            models.Index(fields=["priority", "created_at"], name="jobs_job_priority_sort_idx"),
            # The queue ranking (apps.quotas.selectors.queue_positions, the job list's "#" column): the
            # queued jobs in scheduling order with their project, read from the index alone once the
            # table is vacuumed, instead of every heap page of a 1,000,000-job table (issue 31). The
            # queue board's count per project and pending reason, with the CU asked
            # (apps.scheduling.board.figures._starved), reads it alone too.
            models.Index(
                fields=["-priority", "created_at", "id"],
                include=["project", "state_reason", "requested_cu"],
                condition=Q(state__in=QUEUED_STATES),
                name="jobs_job_queued_rank_idx",
            ),
            # The running jobs per project (the queue board): the active jobs only, a small index.
            models.Index(
                fields=["project"], condition=Q(state__in=ACTIVE_STATES), name="jobs_job_active_project_idx"
            ),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(state__in=[s.value for s in JobState]), name="jobs_job_state_valid"
            ),
            models.CheckConstraint(
                condition=Q(
                    request_kind__in=[
                        "template",
                        "whole_cards",
                        "compute_units",
                        "request_template",
                        "profile",
                    ]
                ),
                name="jobs_job_request_kind_valid",
            ),
            models.CheckConstraint(
                condition=~Q(request_kind="template") | Q(template__isnull=False),
                name="jobs_job_template_request_has_template",
            ),
            models.CheckConstraint(
                condition=~Q(request_kind="compute_units") | (Q(compute_units__gt=Decimal("0"))),
                name="jobs_job_cu_request_positive",
            ),
            models.CheckConstraint(
                condition=~Q(request_kind="request_template") | Q(request_template__isnull=False),
                name="jobs_job_request_template_set",
            ),
            models.CheckConstraint(
                condition=~Q(request_kind="profile")
                | (Q(workload_profile__isnull=False) & Q(target_throughput__gt=Decimal("0"))),
                name="jobs_job_profile_request_set",
            ),
            models.CheckConstraint(condition=Q(count__gte=1), name="jobs_job_count_positive"),
        ]
        verbose_name = _("job")

    def __str__(self) -> str:
        return f"{self.project.slug}/{self.name}"


class JobEvent(models.Model):
    class Kind(models.TextChoices):
        SUBMITTED = "submitted", _("submitted")
        STATE = "state", _("state changed")
        DECISION = "decision", _("scheduling decision")
        PENDING = "pending", _("still pending")
        RELEASED = "released", _("allocation released")
        # Cards held until Kubernetes confirms the attempt's objects gone (then RELEASED).
        RELEASING = "releasing", _("allocation releasing")
        CANCEL = "cancel", _("cancel requested")
        RETRY = "retry", _("retry")
        PREEMPTED = "preempted", _("preempted")
        SCALED = "scaled", _("scaled")

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="events")
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    kind = models.CharField(max_length=12, choices=Kind.choices)
    from_state = models.CharField(max_length=12, blank=True)
    to_state = models.CharField(max_length=12, blank=True)
    message = models.CharField(max_length=1000)
    actor_label = models.CharField(max_length=150, blank=True)
    data = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [
            # The queue board's preemptions of the last day: the few preempted events, not a range of
            # every event of the day on ``created_at`` (two per job; issue 31).
            models.Index(
                fields=["created_at"], condition=Q(kind="preempted"), name="jobs_jobevent_preempted_idx"
            ),
        ]
        verbose_name = _("job event")

    def __str__(self) -> str:
        return f"{self.job_id} {self.kind}: {self.message[:60]}"


class Allocation(models.Model):
    """A job's share of one device for one replica. Active while ``released_at`` is null.

    The engine never over-allocates; the database backs it up: a whole card has at most one active
    allocation (partial unique index), shares and memory are bounded per row, and the scheduling
    service re-checks each device's totals under a row lock before inserting.
    """

    Isolation = Isolation

    job = models.ForeignKey("jobs.Job", on_delete=models.PROTECT, related_name="allocations")
    # The job's project, copied at creation (a job never changes project): the quotas overview and
    # usage sums group a million rows by it without joining jobs. Filled from ``job`` on save();
    # bulk writers set it themselves (NOT NULL: a writer that forgets fails loudly, never undercounts) (``apps.scheduling.allocations.allocation_row``).
    # project and node are copies (of the job's project, of the card's node) and keep no database
    # constraint of their own (jobs 0015): the job's and the card's keys already hold them (a project
    # with jobs, a node with cards cannot be deleted), and their two checks per row at commit, a
    # key-share lock on every node a cycle placed on, were a fifth of a 10,000-node cycle's commits
    # (issue 31 §2). on_delete=PROTECT still guards ORM deletes.
    project = models.ForeignKey(
        "accounts.Project", on_delete=models.PROTECT, related_name="+", db_constraint=False
    )
    device = models.ForeignKey("inventory.Device", on_delete=models.PROTECT, related_name="allocations")
    node = models.ForeignKey(
        "inventory.Node", on_delete=models.PROTECT, related_name="allocations", db_constraint=False
    )
    replica = models.PositiveSmallIntegerField(default=0)
    attempt = models.PositiveSmallIntegerField(default=0)
    whole_card = models.BooleanField(default=False)
    memory_mib = models.PositiveIntegerField()
    # Compute share in milli of one card: 1000 = the whole card.
    compute_milli = models.PositiveIntegerField()
    isolation = models.CharField(max_length=8, choices=Isolation.choices, default=Isolation.HARD)
    partition_profile = models.CharField(max_length=40, blank=True)
    # The MIG GPU instance's start slot (memory-slice index, as nvidia-smi mig -lgipp numbers them) the
    # engine chose on the card's geometry (apps.catalog.mig); null for other slices, whole cards and
    # cards whose geometry is not modelled. A restored snapshot re-creates exactly this layout.
    mig_start = models.PositiveSmallIntegerField(null=True, blank=True)
    # Compute units this row holds: the card model's coefficient on the start day × the share
    # (compute_milli / 1000). Quotas count it; billing multiplies it by hours.
    compute_units = models.DecimalField(max_digits=12, decimal_places=4, default=0)
    # Granted beyond the project's guarantee from idle lendable capacity: preemptible (reclaim).
    borrowed = models.BooleanField(default=False)
    trace_id = models.UUIDField(db_index=True)
    started_at = models.DateTimeField(db_index=True)
    released_at = models.DateTimeField(null=True, blank=True, db_index=True)
    release_reason = models.CharField(max_length=200, blank=True)
    # "Releasing": the job let go of these cards (cancel, retry, preemption) and the deletes of the
    # attempt's objects were sent, but its pods may still run (Terminating, grace period). The row
    # stays active (``released_at`` null: the engine hands nothing out on it) until reconcile sees
    # the objects and pods gone (``apps.scheduling.releasing``).
    releasing_since = models.DateTimeField(null=True, blank=True, db_index=True)

    class Meta:
        # The table keeps the name it had when the model lived in the scheduling app.
        db_table = "scheduling_allocation"
        ordering = ["-started_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["device"],
                condition=Q(released_at__isnull=True, whole_card=True),
                name="scheduling_allocation_one_active_whole_card",
            ),
            # Among live allocations: a service scaled down and up again reuses replica numbers on
            # the same card, and the released rows stay as history.
            models.UniqueConstraint(
                fields=["job", "device", "replica", "attempt"],
                condition=Q(released_at__isnull=True),
                name="scheduling_allocation_unique_slot",
            ),
            models.CheckConstraint(
                condition=Q(compute_milli__gte=1) & Q(compute_milli__lte=1000),
                name="scheduling_allocation_compute_range",
            ),
            models.CheckConstraint(
                condition=Q(whole_card=False) | Q(compute_milli=1000),
                name="scheduling_allocation_whole_card_is_whole",
            ),
            models.CheckConstraint(
                condition=Q(released_at__isnull=True) | Q(released_at__gte=F("started_at")),
                name="scheduling_allocation_release_after_start",
            ),
            models.CheckConstraint(
                condition=Q(isolation__in=["hard", "shared"]), name="scheduling_allocation_isolation_valid"
            ),
        ]
        indexes = [
            models.Index(
                fields=["device"], condition=Q(released_at__isnull=True), name="scheduling_alloc_active_idx"
            ),
            # The allocations admin's order (-started_at, -id): a page walks the index backwards instead
            # of sorting every allocation (issue 31).
            models.Index(fields=["started_at", "id"], name="scheduling_alloc_started_idx"),
        ]
        verbose_name = _("allocation")

    def __str__(self) -> str:
        return f"job {self.job_id} on device {self.device_id} ({self.compute_milli}m, {self.memory_mib} MiB)"

    def save(self, *args, **kwargs):
        if self.project_id is None and self.job_id is not None:
            self.project_id = self.job.project_id
        super().save(*args, **kwargs)
