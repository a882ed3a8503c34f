"""Telemetry: metric sources per cluster, per-device rollups with quality metadata, job attribution."""

from __future__ import annotations

from django.db import models
from django.db.models import F, Q
from django.utils.translation import gettext_lazy as _

from apps.core.models import BaseModel
from apps.inventory.models import Cluster, Device, Node
from apps.jobs.models import Job


class Quality(models.TextChoices):
    """Seed 000 §4.1 "metric quality gate": every figure says whether it is exact or estimated."""

    EXACT = "exact", _("exact")
    ESTIMATED = "estimated", _("estimated")


class MetricSource(BaseModel):
    """Where a cluster's utilization comes from: a Prometheus HTTP API or exporter targets."""

    class Kind(models.TextChoices):
        PROMETHEUS = "prometheus", _("Prometheus HTTP API")
        EXPORTER = "exporter", _("exporter targets (scraped directly)")

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="metric_sources")
    name = models.CharField(_("name"), max_length=100)
    kind = models.CharField(_("kind"), max_length=12, choices=Kind.choices, default=Kind.PROMETHEUS)
    # Prometheus base URL, e.g. http://prometheus.monitoring:9090 (the API lives under /api/v1/).
    url = models.CharField(_("Prometheus URL"), max_length=500, blank=True)
    # Exporter /metrics URLs, e.g. ["http://gpu-01:9400/metrics"] (kind = exporter).
    targets = models.JSONField(_("exporter targets"), default=list, blank=True)
    step_seconds = models.PositiveIntegerField(_("query step (s)"), default=10)
    enabled = models.BooleanField(_("enabled"), default=True)
    # Everything before this instant is in complete rollup windows.
    ingested_until = models.DateTimeField(null=True, blank=True)
    last_run_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    last_report = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["cluster__name", "name"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "name"], name="telemetry_metricsource_unique_name"),
            models.CheckConstraint(
                condition=Q(kind__in=["prometheus", "exporter"]), name="telemetry_metricsource_kind_valid"
            ),
            models.CheckConstraint(
                condition=Q(step_seconds__gte=1), name="telemetry_metricsource_step_positive"
            ),
        ]
        verbose_name = _("metric source")

    def __str__(self) -> str:
        return f"{self.cluster.slug}/{self.name}"

    @property
    def label(self) -> str:
        """The ``source`` value written on rollups from this source."""
        return f"{self.kind}:{self.cluster.slug}/{self.name}"

    def clean(self) -> None:
        from django.core.exceptions import ValidationError

        if self.kind == self.Kind.PROMETHEUS and not self.url:
            raise ValidationError({"url": _("A Prometheus source needs the Prometheus URL.")})
        if self.url and not _http_url(self.url):
            # In-cluster service names ("http://prometheus:9090") have no dot: URLField would refuse them.
            raise ValidationError({"url": _("Give an http(s) URL, e.g. http://prometheus.monitoring:9090.")})
        if self.kind == self.Kind.EXPORTER:
            if not isinstance(self.targets, list) or not self.targets:
                raise ValidationError({"targets": _("Give a list of exporter /metrics URLs.")})
            bad = [
                t for t in self.targets if not (isinstance(t, str) and t.startswith(("http://", "https://")))
            ]
            if bad:
                raise ValidationError(
                    {"targets": _("Not an http(s) URL: %(t)s") % {"t": ", ".join(map(str, bad))}}
                )


def _http_url(value: str) -> bool:
    from urllib.parse import urlparse

    parsed = urlparse(value)
    return parsed.scheme in ("http", "https") and bool(parsed.hostname) and " " not in value


class Resolution(models.IntegerChoices):
    FIVE_MINUTES = 300, _("5 minutes")
    HOUR = 3600, _("1 hour")


class DeviceRollup(models.Model):
    """One device (or one MIG / partition instance of it) over one window, from one source.

    Averages are kept as sums and counts so windows merge exactly (hourly = Σ of 5-minute rows);
    ``first_sample_at`` / ``last_sample_at`` make re-ingesting the same samples a no-op.
    """

    Resolution = Resolution

    device = models.ForeignKey(Device, on_delete=models.CASCADE, related_name="rollups")
    # "" = the whole card; else "<profile>/<instance id>", e.g. "3g.40gb/1" (MIG GPU_I_PROFILE/GPU_I_ID).
    partition = models.CharField(max_length=60, blank=True, default="")
    resolution = models.PositiveIntegerField(choices=Resolution.choices, default=Resolution.FIVE_MINUTES)
    window_start = models.DateTimeField()
    source = models.CharField(max_length=200)
    quality = models.CharField(max_length=10, choices=Quality.choices, default=Quality.EXACT)
    scrape_interval_s = models.PositiveIntegerField(null=True, blank=True)
    sample_count = models.PositiveIntegerField(default=0)
    first_sample_at = models.DateTimeField()
    last_sample_at = models.DateTimeField()
    util_sum = models.FloatField(default=0)
    util_n = models.PositiveIntegerField(default=0)
    util_avg = models.FloatField(null=True, blank=True)
    util_max = models.FloatField(null=True, blank=True)
    mem_used_sum = models.FloatField(default=0)
    mem_used_n = models.PositiveIntegerField(default=0)
    mem_used_avg_mib = models.FloatField(null=True, blank=True)
    mem_used_max_mib = models.FloatField(null=True, blank=True)
    mem_total_mib = models.FloatField(null=True, blank=True)
    temp_max_c = models.FloatField(null=True, blank=True)
    power_sum = models.FloatField(default=0)
    power_n = models.PositiveIntegerField(default=0)
    power_avg_w = models.FloatField(null=True, blank=True)
    # Counter increases inside the window, by counter name (resets handled the Prometheus way).
    error_deltas = models.JSONField(default=dict, blank=True)
    # Last raw counter values seen, the baseline for the next window.
    counters_last = models.JSONField(default=dict, blank=True)
    # Health signals seen in the window, e.g. {"xid": [79], "health": "unhealthy", "temp_max": 91}.
    health = models.JSONField(default=dict, blank=True)
    # Pod labels the exporter attached, e.g. [{"namespace": "vision", "pod": "suanchi-12-a0-x7"}].
    pods = models.JSONField(default=list, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-window_start", "device_id"]
        constraints = [
            models.UniqueConstraint(
                fields=["device", "partition", "resolution", "window_start", "source"],
                name="telemetry_devicerollup_unique_window",
            ),
            models.CheckConstraint(
                condition=Q(resolution__in=[300, 3600]), name="telemetry_devicerollup_resolution_valid"
            ),
            models.CheckConstraint(
                condition=Q(quality__in=["exact", "estimated"]), name="telemetry_devicerollup_quality_valid"
            ),
            models.CheckConstraint(
                condition=Q(last_sample_at__gte=F("first_sample_at")),
                name="telemetry_devicerollup_samples_ordered",
            ),
        ]
        indexes = [
            models.Index(fields=["resolution", "window_start"], name="telemetry_rollup_window_idx"),
            # The rollup list's order (newest window first, then card): a page without sorting the table.
            models.Index(fields=["-window_start", "device"], name="telemetry_rollup_recent_idx"),
        ]
        verbose_name = _("device rollup")

    def __str__(self) -> str:
        part = f"/{self.partition}" if self.partition else ""
        return f"device {self.device_id}{part} @ {self.window_start:%Y-%m-%d %H:%M} ({self.resolution}s)"


class JobUtilization(models.Model):
    """A job's part of one device's 5-minute window.

    ``share`` is the fraction of the card the job held, weighted by how much of the window it held it
    (0..1). ``busy_pct`` is the card-busy percentage attributed to the job: the exporter's pod-labelled
    series when it has one (exact), else the card's busy % split by share (estimated).
    """

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="utilization")
    device = models.ForeignKey(Device, on_delete=models.CASCADE, related_name="job_utilization")
    window_start = models.DateTimeField()
    source = models.CharField(max_length=200)
    quality = models.CharField(max_length=10, choices=Quality.choices)
    share = models.FloatField()
    busy_pct = models.FloatField(null=True, blank=True)
    mem_used_avg_mib = models.FloatField(null=True, blank=True)
    project_id_snapshot = models.PositiveIntegerField(db_index=True)

    class Meta:
        ordering = ["window_start", "job_id", "device_id"]
        constraints = [
            models.UniqueConstraint(
                fields=["job", "device", "window_start", "source"], name="telemetry_jobutilization_unique"
            ),
            models.CheckConstraint(
                condition=Q(share__gte=0) & Q(share__lte=1), name="telemetry_jobutilization_share_range"
            ),
            models.CheckConstraint(
                condition=Q(quality__in=["exact", "estimated"]), name="telemetry_jobutilization_quality_valid"
            ),
        ]
        # The period's rows (the edges a report reads beside the job summaries; their rebuild).
        indexes = [models.Index(fields=["window_start", "source"], name="telemetry_jobutil_window_idx")]
        verbose_name = _("job utilization")

    def __str__(self) -> str:
        return f"job {self.job_id} on device {self.device_id} @ {self.window_start:%Y-%m-%d %H:%M}"


class UtilizationSums(models.Model):
    """The sums a fleet rollup and a card summary both keep of the whole-card rollups they add up: how
    many of those rows were estimated, Σ and count of utilization samples, the peak."""

    estimated = models.PositiveIntegerField()  # rows of which estimated
    util_sum = models.FloatField()
    util_n = models.BigIntegerField()
    util_max = models.FloatField(null=True)

    class Meta:
        abstract = True


class FleetRollup(UtilizationSums):
    """Σ of one node's whole-card rollups (one vendor and model of card) over one window, from one source.

    Written at ingest time, in the transaction that writes the device rollups, by recomputing the
    touched nodes' rows of the touched windows (idempotent: the same samples ingested twice give the
    same rows). The fleet report reads these: one row per node and window instead of one per card
    (issue 20). ``vendor`` and ``model_label`` are the card's at ingest time (the migration's backfill:
    at migration time); pool, node and cluster are read through ``node``.
    """

    resolution = models.PositiveIntegerField(choices=Resolution.choices)
    window_start = models.DateTimeField()
    source = models.CharField(max_length=200)
    node = models.ForeignKey("inventory.Node", on_delete=models.CASCADE, related_name="fleet_rollups")
    vendor = models.CharField(max_length=20)
    # Device.model_label as the report computed it: the catalogue model's name, else the raw name, else "?".
    model_label = models.CharField(max_length=200)
    cards = models.PositiveIntegerField()  # whole-card rows (one per card: the key includes the source)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["resolution", "window_start", "source", "node", "vendor", "model_label"],
                name="telemetry_fleetrollup_unique",
            ),
        ]
        indexes = [models.Index(fields=["resolution", "window_start"], name="telemetry_fleet_window_idx")]
        verbose_name = _("fleet rollup")

    def __str__(self) -> str:
        return f"node {self.node_id} {self.vendor}/{self.model_label} @ {self.window_start:%Y-%m-%d %H:%M}"


class FleetTotal(UtilizationSums):
    """Σ of the fleet rollups of one window and source per vendor and model of card: the whole fleet's
    rows of a window, a handful instead of one per node (issue 31). The fleet report's series by vendor
    or model and its physical utilization read these; rebuilt with the fleet rollups of the window
    (``rollups.fleet_totals_rebuild``), so exact and idempotent."""

    resolution = models.PositiveIntegerField(choices=Resolution.choices)
    window_start = models.DateTimeField()
    source = models.CharField(max_length=200)
    vendor = models.CharField(max_length=20)
    model_label = models.CharField(max_length=200)
    cards = models.PositiveIntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["resolution", "window_start", "source", "vendor", "model_label"],
                name="telemetry_fleettotal_unique",
            ),
        ]
        verbose_name = _("fleet total")

    def __str__(self) -> str:
        return f"{self.vendor}/{self.model_label} @ {self.window_start:%Y-%m-%d %H:%M} ({self.resolution}s)"


class BucketSums(UtilizationSums):
    """The sums of one source's rollups of one resolution over a bucket (``SUMMARY_SPANS``: an hour of
    5-minute rows, a day (UTC) of hourly rows), per card or per node."""

    resolution = models.PositiveIntegerField(choices=Resolution.choices)  # of the rollups summed
    bucket_start = models.DateTimeField()
    source = models.CharField(max_length=200)

    class Meta:
        abstract = True


class CardSummary(BucketSums):
    """Σ of one card's whole-card rollups of one source over a bucket: an hour of 5-minute rows, a day
    (UTC) of hourly rows (``SUMMARY_SPANS``).

    The per-card period summary of the fleet report (issue 31): the idle cards and the cards with
    telemetry of a period read the buckets that lie wholly inside it from here (one row per card and
    hour, not twelve) and only the period's ragged edges from the rollups. Rebuilt with the fleet
    rollups (``rollups.card_summaries_rebuild``), from the device rollups, so it is exact and idempotent.
    """

    device = models.ForeignKey(Device, on_delete=models.CASCADE, related_name="+")
    row_count = models.PositiveIntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["resolution", "bucket_start", "source", "device"], name="telemetry_cardsummary_unique"
            ),
        ]
        verbose_name = _("card summary")

    def __str__(self) -> str:
        return f"device {self.device_id} @ {self.bucket_start:%Y-%m-%d %H:%M} ({self.resolution}s rows)"


class NodeSummary(BucketSums):
    """Σ of one node's fleet rollups of one source over a bucket (``SUMMARY_SPANS``): the busiest nodes
    of the fleet report read the buckets wholly inside the period from these, a row per node, and only
    the ragged edges from the fleet rollups (issue 31). Rebuilt with the fleet rollups
    (``rollups.node_summaries_rebuild``), so exact and idempotent."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="+")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["resolution", "bucket_start", "source", "node"], name="telemetry_nodesummary_unique"
            ),
        ]
        verbose_name = _("node summary")

    def __str__(self) -> str:
        return f"node {self.node_id} @ {self.bucket_start:%Y-%m-%d %H:%M} ({self.resolution}s rows)"


class JobSummary(models.Model):
    """Σ of the job utilization rows of one project (as attributed) and source over an hour (UTC).

    The effective utilization of the fleet report and the members' project figures (issue 31) read the
    hours that lie wholly inside a period from here (a row per project and hour, not one per job, card
    and window) and only the period's ragged edges from ``JobUtilization``. Rebuilt by the attribution
    that writes those rows (``attribution.job_summaries_rebuild``), so it is exact and idempotent.
    """

    bucket_start = models.DateTimeField()
    source = models.CharField(max_length=200)
    project_id_snapshot = models.PositiveIntegerField()
    row_count = models.PositiveIntegerField()
    estimated = models.PositiveIntegerField()  # rows of which estimated
    busy_sum = models.FloatField()  # Σ busy_pct (rows without one count 0)
    share_sum = models.FloatField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["bucket_start", "source", "project_id_snapshot"], name="telemetry_jobsummary_unique"
            ),
        ]
        verbose_name = _("job utilization summary")

    def __str__(self) -> str:
        return f"project {self.project_id_snapshot} @ {self.bucket_start:%Y-%m-%d %H:%M} ({self.source})"


# The bucket a card summary spans, by the resolution of the rollups it sums.
SUMMARY_SPANS = {Resolution.FIVE_MINUTES: 3600, Resolution.HOUR: 86400}
