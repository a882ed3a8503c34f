"""The accelerator ledger (台账): clusters, pools, nodes, devices, links, events, node reports."""

from __future__ import annotations

import fnmatch
import re
from decimal import Decimal

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _
from django.utils.translation import pgettext_lazy

from apps.accounts.models import ApiToken, Project
from apps.catalog.models import DeviceModel, Vendor
from apps.core.conf import suanchi_setting
from apps.core.models import BaseModel


class Cluster(BaseModel):
    class Backend(models.TextChoices):
        SIMULATED = "simulated", _("simulated")
        KUBERNETES = "kubernetes", _("Kubernetes")

    class PluginMode(models.TextChoices):
        PLAIN = "plain", _("plain device plugin")
        MIG_MIXED = "mig-mixed", _("NVIDIA MIG, mixed strategy")
        MIG_SINGLE = "mig-single", _("NVIDIA MIG, single strategy")
        HAMI = "hami", _("HAMi (memory / cores)")
        ASCEND_VNPU = "ascend-vnpu", _("Ascend vNPU templates")
        DRA = "dra", _("Dynamic Resource Allocation")
        HCU = "hcu", _("Hygon HCU device plugin (whole cards)")
        HCU_DRA = "hcu-dra", _("Hygon HCU DRA driver dra.hygon.com (whole cards and vHCUs)")
        ASCEND_DRA = "ascend-dra", _("HAMi's Ascend DRA driver ascend.project-hami.io (whole chips, shares)")

    name = models.CharField(max_length=100, unique=True)
    slug = models.SlugField(unique=True)
    backend = models.CharField(max_length=20, choices=Backend.choices, default=Backend.SIMULATED)
    kubeconfig_path = models.CharField(max_length=500, blank=True)
    kube_context = models.CharField(max_length=200, blank=True)
    in_cluster = models.BooleanField(default=False, help_text=_("use the pod's service account"))
    # vendor slug -> PluginMode value, e.g. {"nvidia": "mig-mixed", "huawei": "ascend-vnpu"}
    device_plugin_modes = models.JSONField(default=dict, blank=True)
    description = models.TextField(blank=True)
    # Connection state, written by apps.clusters.connect / apps.clusters.sync (never typed in).
    last_checked_at = models.DateTimeField(null=True, blank=True)
    # The last "Test connection" answer: {"ok", "server_version", "verbs", "plugins", "problems"}.
    last_check = models.JSONField(default=dict, blank=True)
    last_synced_at = models.DateTimeField(null=True, blank=True)
    # The last cluster sync's summary: {"nodes", "created", "events", "error"}.
    last_sync = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(backend__in=["simulated", "kubernetes"]), name="inventory_cluster_backend_valid"
            ),
        ]
        verbose_name = _("cluster")

    # Set (not stored) by the upload form and service: the path is the secret file that is written
    # once the row is valid, so it need not exist yet when ``clean`` runs.
    kubeconfig_upload_pending = False

    def __str__(self) -> str:
        return self.name

    def plugin_mode(self, vendor: str) -> str:
        return self.device_plugin_modes.get(vendor, self.PluginMode.PLAIN)

    def clean(self) -> None:
        from django.core.exceptions import ValidationError

        modes = self.device_plugin_modes
        if not isinstance(modes, dict):
            raise ValidationError({"device_plugin_modes": _("Give an object: vendor → device-plugin mode.")})
        errors = []
        for vendor, mode in modes.items():
            if vendor not in Vendor.values:
                errors.append(
                    _("unknown vendor %(v)r (known: %(k)s)") % {"v": vendor, "k": ", ".join(Vendor.values)}
                )
            elif mode not in self.PluginMode.values:
                errors.append(
                    _("unknown mode %(m)r for %(v)s (known: %(k)s)")
                    % {"m": mode, "v": vendor, "k": ", ".join(self.PluginMode.values)}
                )
        if self.backend == self.Backend.KUBERNETES and not (self.kubeconfig_path or self.in_cluster):
            errors.append(_("a Kubernetes cluster needs a kubeconfig path or in-cluster credentials"))
        by_field: dict[str, list] = {"device_plugin_modes" if modes else "backend": errors} if errors else {}
        path_problem = kubeconfig_path_problem(
            self.kubeconfig_path, must_exist=not self.kubeconfig_upload_pending
        )
        if path_problem:
            by_field["kubeconfig_path"] = [path_problem]
        if by_field:
            raise ValidationError(by_field)


def kubeconfig_path_problem(path: str, *, must_exist: bool = True) -> str:
    """Why a Cluster's kubeconfig path cannot be used ("" when it can). A path is an absolute path
    of a regular file inside ``SUANCHI_SECRETS_DIR``: no ``..``, and resolved (symlinks followed) it
    stays inside. The deployment's own ``KUBECONFIG`` (the first start's default cluster) is trusted
    configuration and passes as it is; what any kubeconfig may contain is checked when it is loaded
    (``apps.clusters.kubeconfig_safety``)."""
    from pathlib import Path, PurePath

    if not path:
        return ""
    trusted = (suanchi_setting("KUBECONFIG", None) or "").strip()
    if trusted and path == trusted:
        return ""
    root_text = suanchi_setting("SECRETS_DIR")
    if "\x00" in path or not PurePath(path).is_absolute():
        return _("The kubeconfig path must be an absolute path inside %(dir)s (SUANCHI_SECRETS_DIR).") % {
            "dir": root_text
        }
    if ".." in PurePath(path).parts:
        return _('The kubeconfig path must not contain "..".')
    root = Path(root_text).resolve()
    resolved = Path(path).resolve()
    if resolved == root or not resolved.is_relative_to(root):
        return _(
            "The kubeconfig path %(path)s is outside %(dir)s (SUANCHI_SECRETS_DIR), or a link out of it."
        ) % {"path": path, "dir": root_text}
    if must_exist and not resolved.is_file():
        if resolved.exists():
            return _("The kubeconfig path %(path)s is not a regular file.") % {"path": path}
        return _("The kubeconfig path %(path)s does not exist.") % {"path": path}
    return ""


class Pool(BaseModel):
    """A resource pool (资源池) of nodes inside a cluster, e.g. training, inference."""

    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="pools")
    name = models.CharField(max_length=100)
    slug = models.SlugField()
    description = models.TextField(blank=True)
    owner_project = models.ForeignKey(
        Project, null=True, blank=True, on_delete=models.PROTECT, related_name="owned_pools"
    )
    # Compute-share overcommit for shared slices only (memory is never overcommitted).
    overcommit_factor = models.DecimalField(
        max_digits=3,
        decimal_places=2,
        default=Decimal("1.00"),
        validators=[MinValueValidator(Decimal("1.00")), MaxValueValidator(Decimal("1.50"))],
    )

    class Meta:
        ordering = ["cluster__name", "name"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "slug"], name="inventory_pool_unique_slug"),
            models.CheckConstraint(
                condition=Q(overcommit_factor__gte=Decimal("1.00"))
                & Q(overcommit_factor__lte=Decimal("1.50")),
                name="inventory_pool_overcommit_range",
            ),
        ]
        verbose_name = _("pool")

    def __str__(self) -> str:
        return f"{self.cluster.slug}/{self.slug}"


# Kubernetes node names are DNS subdomain names (RFC 1123): at most 253 characters, lowercase
# alphanumerics, '-' and '.', starting and ending with an alphanumeric character.
# https://kubernetes.io/docs/concepts/overview/working-with-objects/names/#dns-subdomain-names
# Kubernetes checks them label by label (k8s.io/apimachinery/pkg/util/validation, IsDNS1123Subdomain:
# dns1123SubdomainFmt is a label "[a-z0-9]([-a-z0-9]*[a-z0-9])?", then ("." label)*), so "a..b", ".a"
# and "a." are not names. It checks the 253 characters of the whole name but not RFC 1035's 63 per
# label, and neither do we: a name the API server accepts must not make cluster sync refuse a cluster.
NODE_NAME_MAX_LENGTH = 253
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
# An agent token's node pattern: the same characters plus the wildcard "*" (any run of characters).
_NODE_PATTERN = re.compile(r"[-a-z0-9.*]+")


def node_name_problem(name: str) -> str | None:
    """Why ``name`` is not a valid Kubernetes node name (translated), or None when it is. The one
    check for every way a node name comes in: node reports, the API, the admin and its forms, the
    ledger import and cluster sync (Node.name's validator)."""
    if not name:
        return str(_("A node name may not be empty."))
    if len(name) > NODE_NAME_MAX_LENGTH:
        return str(_("A node name has at most %(max)d characters; this one has %(n)d.")) % {
            "max": NODE_NAME_MAX_LENGTH,
            "n": len(name),
        }
    shown = repr(name[:80])
    for label in name.split("."):
        if not label:
            return str(
                _(
                    "%(name)s is not a valid node name: it has an empty DNS label (a leading or "
                    "trailing '.', or '..'); every part between dots needs a letter or digit."
                )
            ) % {"name": shown}
        if not _DNS_LABEL.fullmatch(label):
            return str(
                _(
                    "%(name)s is not a valid node name: Kubernetes node names are DNS subdomain names "
                    "(RFC 1123): lowercase letters, digits, '-' and '.', starting and ending with a "
                    "letter or digit."
                )
            ) % {"name": shown}
    return None


def validate_node_name(value: str) -> None:
    problem = node_name_problem(value)
    if problem is not None:
        raise ValidationError(problem, code="invalid_node_name")


def validate_node_pattern(value: str) -> None:
    if value and (len(value) > NODE_NAME_MAX_LENGTH or not _NODE_PATTERN.fullmatch(value)):
        raise ValidationError(
            _(
                "A node pattern is a node name in which '*' stands for any characters "
                "(lowercase letters, digits, '-', '.' and '*' only)."
            ),
            code="invalid_node_pattern",
        )


class Node(BaseModel):
    class Status(models.TextChoices):
        READY = "ready", _("ready")
        MAINTENANCE = "maintenance", _("maintenance")
        QUARANTINED = "quarantined", _("quarantined")
        DRAINING = "draining", _("draining")
        RETIRED = "retired", _("retired")

    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="nodes")
    pool = models.ForeignKey(Pool, null=True, blank=True, on_delete=models.PROTECT, related_name="nodes")
    name = models.CharField(max_length=NODE_NAME_MAX_LENGTH, validators=[validate_node_name])
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.READY, db_index=True)
    # A node an agent token registered takes no work until staff approve it (node_approve) or a
    # cluster sync confirms Kubernetes has a node of that name (node_confirm_in_cluster).
    pending_approval = models.BooleanField(
        default=False,
        db_index=True,
        help_text=_("registered by a node agent; takes no work until approved"),
    )
    # The agent token whose report registered the node (None: staff, a ledger import, cluster sync,
    # or a token deleted since). An unbound token marks cards lost only on nodes it registered.
    registered_by_token = models.ForeignKey(
        "AgentToken",
        null=True,
        blank=True,
        editable=False,
        on_delete=models.SET_NULL,
        related_name="registered_nodes",
    )
    status_reason = models.CharField(max_length=300, blank=True)
    cpu_arch = models.CharField(max_length=20, blank=True, help_text="x86_64 / aarch64")
    cpu_model = models.CharField(max_length=120, blank=True)
    cpu_cores = models.PositiveIntegerField(null=True, blank=True)
    memory_mib = models.PositiveBigIntegerField(null=True, blank=True)
    os_image = models.CharField(max_length=120, blank=True)
    kernel_version = models.CharField(max_length=80, blank=True)
    container_runtime = models.CharField(max_length=80, blank=True)
    # Driver and runtime versions as the vendor tools report them.
    driver_version = models.CharField(max_length=60, blank=True)
    cuda_version = models.CharField(
        max_length=20, blank=True, help_text=_("highest CUDA the driver supports")
    )
    cann_version = models.CharField(max_length=30, blank=True)
    rocm_version = models.CharField(max_length=30, blank=True)
    dtk_version = models.CharField(max_length=30, blank=True)
    # Kubernetes node labels and taints ({"key", "value", "effect"}) as the ledger wants them.
    labels = models.JSONField(default=dict, blank=True)
    taints = models.JSONField(default=list, blank=True)
    # RDMA NICs: [{"name": "mlx5_0", "numa_node": 0, "link": "RoCE"}]
    rdma_nics = models.JSONField(default=list, blank=True)
    # Topology domain, outermost first.
    zone = models.CharField(max_length=60, blank=True)
    rack = models.CharField(max_length=60, blank=True)
    switch = models.CharField(max_length=60, blank=True, help_text=_("top-of-rack / leaf switch"))
    last_report_at = models.DateTimeField(null=True, blank=True)
    # Set by the staleness check when the node agent stops reporting; cleared by the next report.
    report_overdue_since = models.DateTimeField(null=True, blank=True)
    notes = models.TextField(blank=True)

    class Meta:
        ordering = ["cluster__name", "name"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "name"], name="inventory_node_unique_name"),
            models.CheckConstraint(
                condition=Q(status__in=["ready", "maintenance", "quarantined", "draining", "retired"]),
                name="inventory_node_status_valid",
            ),
        ]
        # The device list's order (node name, index) walks this index instead of sorting every card.
        indexes = [models.Index(fields=["name"], name="inventory_node_name_idx")]
        verbose_name = _("node")

    def __str__(self) -> str:
        return self.name

    @property
    def schedulable(self) -> bool:
        return self.status == self.Status.READY and not self.pending_approval


class Device(BaseModel):
    class Health(models.TextChoices):
        HEALTHY = "healthy", _("healthy")
        DEGRADED = "degraded", _("degraded")
        LOST = "lost", _("lost")
        RETIRED = "retired", _("retired")

    class PoolStatus(models.TextChoices):
        PRODUCTION = "production", _("production")
        GRAY = "gray", _("gray")
        QUARANTINE = "quarantine", _("quarantine")
        # A retired card is in no pool any more (set by the ledger's retire, never chosen).
        RETIRED = "retired", _("retired")

    node = models.ForeignKey(Node, on_delete=models.PROTECT, related_name="devices")
    vendor = models.CharField(max_length=20, choices=Vendor.choices, db_index=True)
    device_model = models.ForeignKey(
        DeviceModel, null=True, blank=True, on_delete=models.PROTECT, related_name="devices"
    )
    # What the tool printed; kept even when the model is recognised.
    raw_model_name = models.CharField(max_length=150, blank=True)
    model_unrecognized = models.BooleanField(default=False, db_index=True)
    index = models.PositiveIntegerField()
    uuid = models.CharField(max_length=100, null=True, blank=True)
    serial = models.CharField(max_length=100, blank=True, db_index=True)
    pci_bus_id = models.CharField(max_length=40, blank=True)
    numa_node = models.IntegerField(null=True, blank=True)
    memory_mib = models.PositiveIntegerField(null=True, blank=True, help_text=_("as reported by the tool"))
    firmware_version = models.CharField(max_length=80, blank=True)
    health = models.CharField(max_length=10, choices=Health.choices, default=Health.HEALTHY, db_index=True)
    health_reason = models.CharField(max_length=300, blank=True)
    pool_status = models.CharField(max_length=12, choices=PoolStatus.choices, default=PoolStatus.PRODUCTION)
    owner_project = models.ForeignKey(
        Project, null=True, blank=True, on_delete=models.PROTECT, related_name="owned_devices"
    )
    # Cordoned: no new allocation on this card; work already running on it continues.
    cordoned = models.BooleanField(default=False)
    cordon_reason = models.CharField(max_length=300, blank=True)
    # Devices sharing a group are tightly coupled (NVLink/NVSwitch clique, HCCS ring, xGMI hive).
    topology_group = models.CharField(max_length=60, blank=True)
    # The PCIe switch the card sits behind ("pix-GPU0"), derived by topology reports from PIX cells
    # (vendors.adapter.pix_switch_ids); "" when no report shows one. Compared within a node only.
    pcie_switch = models.CharField(max_length=60, blank=True)
    mig_enabled = models.BooleanField(default=False)
    # Partition state as reported, e.g. MIG instances [{"profile": "3g.40gb", "gi_id": 1}].
    partitions = models.JSONField(default=list, blank=True)
    # GPU-instance profiles the card offers, from nvidia-smi mig -lgip (name, memory, instances) and
    # -lgipp (placements), merged by profile id: [{"id": 9, "name": "3g.20gb", "memory_mib": 20091,
    # "max_instances": 2, "free_instances": 2, "placements": [{"start": 0, "size": 4}, ...]}, ...].
    # Fields a listing does not print stay None until the other listing fills them in.
    mig_profiles = models.JSONField(default=list, blank=True)
    # The MIG devices the NVIDIA DRA driver publishes for this card, learned by cluster sync from its
    # ResourceSlices (cmd/gpu-kubelet-plugin/deviceinfo.go MigDeviceInfo.GetDevice: the MIG device's
    # own ``uuid``, ``profile``, and one ``memorySlice<i>`` capacity per memory slice it holds):
    # [{"uuid": "MIG-…", "profile": "1g.10gb", "start": 0, "size": 1, "device": "gpu-0-mig-…"}, ...].
    # A MIG claim selects the instance the ledger allocated by this uuid (apps.clusters.manifests).
    # An AMD card: what the AMD GPU DRA driver publishes for it, the whole card or its partitions
    # [{"device": "gpu-32-160", "type": "amdgpu-partition", "profile": "dpx_nps1"}, ...]: a claim for
    # a mode the card is not in is refused (apps.clusters.manifests.amd_mode_refusal).
    dra_mig_devices = models.JSONField(default=list, blank=True)
    last_seen_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["node__name", "index"]
        constraints = [
            models.UniqueConstraint(
                fields=["node", "vendor", "index"],
                # A lost card keeps its index in the history; a replacement in the same slot may take it.
                condition=~Q(health__in=["retired", "lost"]),
                name="inventory_device_unique_index",
            ),
            models.UniqueConstraint(
                fields=["uuid"],
                condition=Q(uuid__isnull=False) & ~Q(uuid=""),
                name="inventory_device_unique_uuid",
            ),
            models.CheckConstraint(
                condition=Q(health__in=["healthy", "degraded", "lost", "retired"]),
                name="inventory_device_health_valid",
            ),
            models.CheckConstraint(
                condition=Q(pool_status__in=["production", "gray", "quarantine", "retired"]),
                name="inventory_device_pool_status_valid",
            ),
            models.CheckConstraint(
                condition=Q(model_unrecognized=False) | Q(device_model__isnull=True),
                name="inventory_device_unrecognized_has_no_model",
            ),
        ]
        indexes = [
            models.Index(fields=["pci_bus_id"], name="inventory_device_pci_idx"),
            # The in-service cards per model, read from the index alone (the fleet report's free
            # capacity: the cards no active allocation holds, issue 31).
            models.Index(
                fields=["device_model", "id"],
                condition=Q(health__in=["healthy", "degraded"]),
                name="inventory_device_serving_idx",
            ),
            # The in-service cards per node, vendor and model, counted from the index alone (the
            # quota book's capacity per class: a few rows per node, then joined to the nodes).
            models.Index(
                fields=["node", "vendor", "device_model"],
                condition=Q(health__in=["healthy", "degraded"]),
                name="inventory_device_capacity_idx",
            ),
        ]
        verbose_name = _("device")

    def __str__(self) -> str:
        return f"{self.node.name}#{self.vendor}{self.index}"

    @property
    def model_label(self) -> str:
        return self.device_model.name if self.device_model_id else (self.raw_model_name or "?")


class DeviceLink(models.Model):
    """How two devices on one node talk: NV# (bonded NVLinks), PIX/PXB/PHB/NODE/SYS, HCCS, xGMI."""

    class Kind(models.TextChoices):
        NVLINK = "NV", "NVLink"
        PIX = "PIX", _("same PCIe switch")
        PXB = "PXB", _("multiple PCIe switches")
        PHB = "PHB", _("PCIe host bridge")
        NODE = "NODE", _("same NUMA node")
        SYS = "SYS", _("cross NUMA (SMP interconnect)")
        HCCS = "HCCS", "HCCS"
        XGMI = "XGMI", "xGMI"
        MLULINK = "MLULINK", "MLU-Link"

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="links")
    device_a = models.ForeignKey(Device, on_delete=models.CASCADE, related_name="links_out")
    device_b = models.ForeignKey(Device, on_delete=models.CASCADE, related_name="links_in")
    kind = models.CharField(max_length=8, choices=Kind.choices)
    # Raw matrix cell, e.g. "NV12", "PIX".
    link = models.CharField(max_length=12)
    nvlink_count = models.PositiveSmallIntegerField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["node", "device_a__index", "device_b__index"]
        constraints = [
            models.UniqueConstraint(fields=["device_a", "device_b"], name="inventory_devicelink_unique_pair"),
            models.CheckConstraint(
                condition=~Q(device_a=models.F("device_b")), name="inventory_devicelink_distinct"
            ),
        ]
        verbose_name = _("device link")

    def __str__(self) -> str:
        return f"{self.device_a_id}-{self.device_b_id} {self.link}"


class DeviceEvent(models.Model):
    """Ledger history: version changes, health changes, lost / found, moves, maintenance, ..."""

    class Kind(models.TextChoices):
        REGISTERED = "registered", _("registered")
        VERSION_CHANGED = "version_changed", _("version changed")
        HEALTH_CHANGED = "health_changed", _("health changed")
        LOST = "lost", _("lost")
        FOUND = "found", _("found")
        MOVED = "moved", _("moved")
        MAINTENANCE = "maintenance", _("maintenance")
        QUARANTINE = "quarantine", _("quarantine")
        RETIRED = "retired", _("retired")
        STATUS_CHANGED = "status_changed", _("status changed")
        MODEL_UNRECOGNIZED = "model_unrecognized", _("model unrecognized")
        IMPORTED = "imported", _("imported")
        REPORT_OVERDUE = "report_overdue", _("reports overdue")
        REPORTS_RESUMED = "reports_resumed", _("reports resumed")
        # Its own context: the bare msgid "updated" is the timestamp column (更新时间), issue 21 §5.
        UPDATED = "updated", pgettext_lazy("device event kind", "updated")
        NOT_READY = "not_ready", _("NotReady in Kubernetes")
        CORDON = "cordon", _("cordon")
        CONFLICT = "conflict", _("conflict")

    class Severity(models.TextChoices):
        INFO = "info", _("info")
        WARNING = "warning", _("warning")
        CRITICAL = "critical", _("critical")

    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    node = models.ForeignKey(Node, on_delete=models.PROTECT, related_name="events")
    device = models.ForeignKey(Device, null=True, blank=True, on_delete=models.PROTECT, related_name="events")
    kind = models.CharField(max_length=24, choices=Kind.choices, db_index=True)
    severity = models.CharField(max_length=10, choices=Severity.choices, default=Severity.INFO)
    message = models.CharField(max_length=500)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    actor_label = models.CharField(max_length=150, blank=True)
    report = models.ForeignKey(
        "NodeReport", null=True, blank=True, on_delete=models.SET_NULL, related_name="events"
    )

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = _("device event")

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}"


class NodeReport(models.Model):
    """A raw tool output received for a node (from the agent, the API or the command).

    Identical consecutive reports of one kind for one node share a row: ``repeat_count`` and
    ``last_received_at`` move, the raw text is stored once.
    """

    class Kind(models.TextChoices):
        NVIDIA_SMI_XML = "nvidia-smi-xml", "nvidia-smi -q -x"
        NVIDIA_SMI_CSV = "nvidia-smi-csv", "nvidia-smi --query-gpu --format=csv"
        NVIDIA_TOPO = "nvidia-topo", "nvidia-smi topo -m"
        NPU_SMI = "npu-smi", "npu-smi info"
        ROCM_SMI_JSON = "rocm-smi-json", "rocm-smi --showallinfo --json"
        HY_SMI = "hy-smi", "hy-smi"
        CNMON = "cnmon", "cnmon"
        CNMON_INFO = "cnmon-info", "cnmon info"
        NPU_SMI_TOPO = "npu-smi-topo", "npu-smi info -t topo"
        ROCM_SMI_TOPO = "rocm-smi-topo", "rocm-smi --showtopo [--json]"
        HY_SMI_TOPO = "hy-smi-topo", "hy-smi --showtopo"
        NVIDIA_SMI_MIG_LGIP = "nvidia-smi-mig-lgip", "nvidia-smi mig -lgip"
        NVIDIA_SMI_MIG_LGIPP = "nvidia-smi-mig-lgipp", "nvidia-smi mig -lgipp"
        MX_SMI = "mx-smi", "mx-smi (MetaX)"
        IXSMI = "ixsmi", "ixsmi (Iluvatar CoreX)"
        XPU_SMI = "xpu-smi", "xpu-smi (Kunlunxin)"
        EFSMI = "efsmi", "efsmi (Enflame)"
        MTHREADS_GMI = "mthreads-gmi", "mthreads-gmi (Moore Threads)"

    received_at = models.DateTimeField(auto_now_add=True, db_index=True)
    last_received_at = models.DateTimeField(null=True, blank=True)
    repeat_count = models.PositiveIntegerField(default=1)
    node = models.ForeignKey(Node, on_delete=models.PROTECT, related_name="reports")
    kind = models.CharField(max_length=20, choices=Kind.choices)
    sha256 = models.CharField(max_length=64)
    size_bytes = models.PositiveIntegerField()
    raw_text = models.TextField()
    actor_label = models.CharField(max_length=150, blank=True)
    # {"created": n, "updated": n, "lost": n, "found": n, "events": n, "links": n, "changed": bool}
    summary = models.JSONField(default=dict)

    class Meta:
        ordering = ["-received_at", "-id"]
        verbose_name = _("node report")

    def __str__(self) -> str:
        return f"{self.node.name} {self.kind} @ {self.received_at:%Y-%m-%d %H:%M}"


class AgentToken(BaseModel):
    """A node agent's token: it may post node reports for one cluster and nothing else.

    ``node_pattern`` binds it to one node ("gpu-a01") or to the nodes a pattern matches
    ("gpu-a*"); a report for any other node is refused. A token without a pattern (every token
    made before bindings existed) may report for any node of its cluster, but a node it registers
    arrives pending approval, and it may mark cards lost (掉卡) only on the nodes it registered
    (apps.inventory.services.agent_losses). Every node an agent registers arrives pending approval.
    """

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="agent_tokens")
    name = models.CharField(max_length=100)
    node_pattern = models.CharField(
        max_length=NODE_NAME_MAX_LENGTH,
        blank=True,
        validators=[validate_node_pattern],
        help_text=_(
            "The node (or nodes, '*' = any characters) this token reports for; empty: any node of "
            "the cluster, new nodes arrive pending approval."
        ),
    )
    prefix = models.CharField(max_length=12)
    key_hash = models.CharField(max_length=64, unique=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked = models.BooleanField(default=False)

    class Meta:
        ordering = ["cluster__name", "name"]
        verbose_name = _("agent token")

    def __str__(self) -> str:
        return f"{self.cluster.slug}: {self.name}"

    hash_key = staticmethod(ApiToken.hash_key)

    @property
    def is_unbound(self) -> bool:
        """No pattern, or one of wildcards only ("*"): the token may report for any node."""
        return not self.node_pattern.strip("*")

    def covers(self, node_name: str) -> bool:
        """Whether this token may report for ``node_name`` (in its own cluster)."""
        if not self.node_pattern:
            return True
        # Only "*" is special: the pattern's characters exclude fnmatch's "?" and "[".
        return fnmatch.fnmatchcase(node_name, self.node_pattern)
