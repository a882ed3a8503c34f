"""Admin of the ledger rows: clusters, pools, nodes and devices (their actions call the ledger
services and the scheduling-level node status change)."""

from __future__ import annotations

from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db.models import Count, Q, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from apps.catalog.models import DeviceModel
from apps.core.admin import run_each
from apps.core.audit import change_record_create, snapshot
from apps.core.errors import ApplicationError, ValidationFailed
from apps.core.models import BackgroundRun
from apps.core.runs import run_progress_read
from apps.inventory.admin.common import (
    NODE_EDITABLE_FIELDS,
    DeviceEventHistoryInline,
    LedgerImportForm,
    NodeDeviceInline,
    NodeEventHistoryInline,
    _each_action,
    _page_context,
    _reason_action,
)
from apps.inventory.models import (
    Cluster,
    Device,
    DeviceEvent,
    Node,
    Pool,
)
from apps.inventory.services.discovery import node_approve
from apps.inventory.services.ledger import (
    BACKGROUND_IMPORT_ROWS,
    DEVICE_EDITABLE_FIELDS,
    IMPORT_COLUMNS,
    IMPORT_RUN_KIND,
    READ_ONLY_COLUMNS,
    device_cordon,
    device_pool_status_set,
    device_retire,
    device_update,
    ledger_export,
    ledger_import_csv,
    ledger_import_request,
)
from apps.scheduling.faults import node_moved, node_status_change

# --------------------------------------------------------------------------------------------------
# clusters and pools


class NodeCountAdmin(admin.ModelAdmin):
    """A model admin whose rows show (and sort by) how many nodes they hold."""

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(node_count=Count("nodes", distinct=True))

    @admin.display(description=_("nodes"), ordering="node_count")
    def node_count(self, obj: Cluster | Pool) -> int:
        return obj.node_count


@admin.register(Cluster)
class ClusterAdmin(NodeCountAdmin):
    list_display = ("name", "slug", "backend", "node_count")
    list_filter = ("backend",)
    search_fields = ("name", "slug")
    prepopulated_fields = {"slug": ("name",)}


@admin.register(Pool)
class PoolAdmin(NodeCountAdmin):
    list_display = ("name", "slug", "cluster", "owner_project", "overcommit_factor", "node_count")
    list_filter = ("cluster",)
    list_select_related = ("cluster", "owner_project")
    search_fields = ("name", "slug", "cluster__slug")
    prepopulated_fields = {"slug": ("name",)}


class PoolListFilter(admin.RelatedFieldListFilter):
    """Pool choices in one query (a pool's name includes its cluster's slug)."""

    def field_choices(self, field, request, model_admin):
        return [(pool.pk, str(pool)) for pool in Pool.objects.select_related("cluster")]


# --------------------------------------------------------------------------------------------------
# nodes and devices


class LedgerRowAdmin(admin.ModelAdmin):
    """Nodes and devices: they arrive from node reports (agents) or the ledger CSV import and are
    retired, never deleted; only ``editable_fields`` are edited by hand. Both export the ledger."""

    editable_fields: tuple[str, ...] = ()

    def get_readonly_fields(self, request, obj=None):
        editable = set(self.editable_fields)
        return [f.name for f in self.model._meta.fields if f.name not in editable and f.name != "id"]

    def has_add_permission(self, request) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def export_devices(self, queryset: QuerySet) -> QuerySet[Device]:
        """The devices the export actions write for the selected rows."""
        return queryset

    # The "History" page lists the ledger events (DeviceEvent) before Django's own change log: state
    # changes go through the ledger services, which write events, not admin LogEntry rows.
    object_history_template = "admin/inventory/object_history.html"
    history_event_filter = "node"
    HISTORY_EVENT_LIMIT = 200

    def history_view(self, request, object_id, extra_context=None):
        obj = self.get_object(request, unquote(object_id))
        extra = dict(extra_context or {})
        if obj is not None:
            events = (
                DeviceEvent.objects.filter(**{self.history_event_filter: obj})
                .select_related("device", "device__node")
                .order_by("-created_at", "-id")
            )
            extra.update(
                ledger_events=list(events[: self.HISTORY_EVENT_LIMIT]),
                ledger_event_count=events.count(),
                show_device=self.history_event_filter == "node",
            )
        return super().history_view(request, object_id, extra_context=extra)

    def _export(self, queryset: QuerySet, fmt: str) -> HttpResponse:
        content, content_type, filename = ledger_export(devices=self.export_devices(queryset), fmt=fmt)
        response = HttpResponse(content, content_type=content_type)
        response["Content-Disposition"] = f'attachment; filename="{filename}"'
        return response

    @admin.action(description=_("Export selected as CSV"), permissions=["view"])
    def export_csv(self, request, queryset):
        return self._export(queryset, "csv")

    @admin.action(description=_("Export selected as XLSX"), permissions=["view"])
    def export_xlsx(self, request, queryset):
        return self._export(queryset, "xlsx")


@admin.register(Node)
class NodeAdmin(LedgerRowAdmin):
    list_display = (
        "name",
        "cluster",
        "pool",
        "status",
        "pending_approval",
        "driver_version",
        "cann_version",
        "device_count",
        "last_report_at",
    )
    list_filter = ("status", "pending_approval", "cluster", ("pool", PoolListFilter), "cpu_arch")
    list_select_related = ("cluster", "pool", "pool__cluster")
    search_fields = ("name", "devices__uuid", "devices__serial")
    inlines = (NodeDeviceInline, NodeEventHistoryInline)
    actions = (
        "approve",
        "maintenance_on",
        "maintenance_off",
        "quarantine",
        "release_from_quarantine",
        "retire",
        "export_csv",
        "export_xlsx",
    )
    fieldsets = (
        (
            None,
            {
                "fields": (
                    "cluster",
                    "name",
                    "pool",
                    "status",
                    "pending_approval",
                    "status_reason",
                    "taints",
                    "labels",
                )
            },
        ),
        (_("Topology"), {"fields": ("zone", "rack", "switch", "rdma_nics")}),
        (
            _("Host"),
            {"fields": ("cpu_arch", "cpu_model", "cpu_cores", "memory_mib", "os_image", "kernel_version")},
        ),
        (
            _("Driver and runtime"),
            {
                "fields": (
                    "container_runtime",
                    "driver_version",
                    "cuda_version",
                    "cann_version",
                    "rocm_version",
                    "dtk_version",
                )
            },
        ),
        (None, {"fields": ("notes", "last_report_at", "created_at", "updated_at")}),
    )

    editable_fields = NODE_EDITABLE_FIELDS

    def get_queryset(self, request):
        in_service = ~Q(devices__health=Device.Health.RETIRED)
        return (
            super()
            .get_queryset(request)
            .annotate(device_count=Count("devices", filter=in_service, distinct=True))
        )

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        if db_field.name == "pool":
            kwargs["queryset"] = Pool.objects.select_related("cluster")
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    @admin.display(description=_("devices"), ordering="device_count")
    def device_count(self, obj: Node) -> int:
        return obj.device_count

    def save_model(self, request, obj, form, change):
        # Descriptive fields only (status goes through the actions); audited like a service would.
        fields = [name for name in form.changed_data if name in NODE_EDITABLE_FIELDS]
        before = snapshot(Node.objects.get(pk=obj.pk), fields) if change else {}
        super().save_model(request, obj, form, change)
        after = snapshot(obj, fields)
        changed = [name for name in fields if before.get(name) != after[name]]
        if changed:
            change_record_create(
                actor=request.user,
                action="node.admin_edit",
                obj=obj,
                before={k: before[k] for k in changed},
                after={k: after[k] for k in changed},
            )

    # -- actions -----------------------------------------------------------------------------------

    @admin.action(description=_("Approve (admit nodes pending approval)"), permissions=["change"])
    def approve(self, request, queryset):
        pending = queryset.filter(pending_approval=True)
        run_each(
            self,
            request,
            pending,
            lambda n: node_approve(node=n, actor=request.user),
            _("Approved"),
        )
        skipped = queryset.filter(pending_approval=False).count()
        if skipped:
            self.message_user(
                request,
                ngettext(
                    "%(n)d node was not pending approval.", "%(n)d nodes were not pending approval.", skipped
                )
                % {"n": skipped},
                messages.WARNING,
            )

    @_reason_action(
        description=_("Maintenance on"), title=_("Put nodes in maintenance"), done=_("Maintenance on")
    )
    def maintenance_on(self, node: Node, reason: str, actor) -> Node:
        # Asks for a reason like every other state change (issue 21), kept as the node's status reason.
        return node_status_change(node=node, status=Node.Status.MAINTENANCE, reason=reason, actor=actor)

    @admin.action(description=_("Maintenance off (back to ready)"), permissions=["change"])
    def maintenance_off(self, request, queryset):
        run_each(
            self,
            request,
            queryset.filter(status=Node.Status.MAINTENANCE),
            lambda n: node_status_change(node=n, status=Node.Status.READY, actor=request.user),
            _("Maintenance off"),
        )
        skipped = queryset.exclude(status=Node.Status.MAINTENANCE).count()
        if skipped:
            self.message_user(
                request,
                ngettext(
                    "%(n)d node was not in maintenance.", "%(n)d nodes were not in maintenance.", skipped
                )
                % {"n": skipped},
                messages.WARNING,
            )

    @_reason_action(description=_("Quarantine"), title=_("Quarantine nodes"), done=_("Quarantined"))
    def quarantine(self, node: Node, reason: str, actor) -> Node:
        return node_status_change(node=node, status=Node.Status.QUARANTINED, reason=reason, actor=actor)

    @_reason_action(
        description=_("Release from quarantine"),
        title=_("Release nodes from quarantine"),
        done=_("Released from quarantine"),
    )
    def release_from_quarantine(self, node: Node, reason: str, actor) -> Node:
        if node.status != Node.Status.QUARANTINED:
            raise ValidationFailed(f"node {node.name} is {node.status}, not quarantined")
        return node_status_change(node=node, status=Node.Status.READY, reason=reason, actor=actor)

    @_reason_action(description=_("Retire"), title=_("Retire nodes and all their devices"), done=_("Retired"))
    def retire(self, node: Node, reason: str, actor) -> Node:
        return node_status_change(node=node, status=Node.Status.RETIRED, reason=reason, actor=actor)

    def export_devices(self, queryset: QuerySet[Node]) -> QuerySet[Device]:
        return Device.objects.filter(node_id__in=list(queryset.values_list("pk", flat=True)))


@admin.register(Device)
class DeviceAdmin(LedgerRowAdmin):
    change_list_template = "admin/inventory/device/change_list.html"
    list_display = (
        "node",
        "vendor",
        "index",
        "model_label",
        "uuid",
        "serial",
        "health",
        "pool_status",
        "owner_project",
    )
    list_filter = ("vendor", "health", "pool_status", "model_unrecognized", "device_model", "node__cluster")
    list_select_related = ("node", "device_model", "owner_project")
    search_fields = ("uuid", "serial", "node__name", "pci_bus_id")
    inlines = (DeviceEventHistoryInline,)
    history_event_filter = "device"
    actions = (
        "quarantine",
        "return_to_production",
        "cordon",
        "uncordon",
        "retire",
        "export_csv",
        "export_xlsx",
    )
    fieldsets = (
        (None, {"fields": ("node", "vendor", "index", "uuid", "serial", "pci_bus_id", "numa_node")}),
        (
            _("Model"),
            {
                "fields": (
                    "device_model",
                    "raw_model_name",
                    "model_unrecognized",
                    "memory_mib",
                    "mig_enabled",
                    "partitions",
                )
            },
        ),
        (_("Ledger"), {"fields": ("owner_project", "topology_group", "firmware_version")}),
        (
            _("State"),
            {
                "fields": (
                    "health",
                    "health_reason",
                    "pool_status",
                    "cordoned",
                    "cordon_reason",
                    "last_seen_at",
                    "created_at",
                    "updated_at",
                )
            },
        ),
    )

    editable_fields = DEVICE_EDITABLE_FIELDS

    def get_form(self, request, obj=None, change=False, **kwargs):
        form = super().get_form(request, obj, change=change, **kwargs)
        if obj is not None and "device_model" in form.base_fields:
            form.base_fields["device_model"].queryset = DeviceModel.objects.filter(vendor=obj.vendor)
        return form

    @admin.display(description=_("model"), ordering="device_model__name")
    def model_label(self, obj: Device) -> str:
        return obj.model_label

    # -- edits go through device_update --------------------------------------------------------------

    def save_model(self, request, obj, form, change):
        fields = {
            name: form.cleaned_data[name] for name in form.changed_data if name in DEVICE_EDITABLE_FIELDS
        }
        if not fields:
            return
        try:
            device_update(device=obj, actor=request.user, **fields)
        except ApplicationError as exc:
            request._ledger_save_error = exc.message

    def log_change(self, request, obj, message):
        if getattr(request, "_ledger_save_error", None):
            return None
        return super().log_change(request, obj, message)

    def response_change(self, request, obj):
        error = getattr(request, "_ledger_save_error", None)
        if error:
            self.message_user(request, error, messages.ERROR)
            return HttpResponseRedirect(request.get_full_path())
        return super().response_change(request, obj)

    # -- actions -----------------------------------------------------------------------------------

    @_reason_action(description=_("Quarantine"), title=_("Quarantine devices"), done=_("Quarantined"))
    def quarantine(self, device: Device, reason: str, actor) -> Device:
        return device_pool_status_set(
            device=device, pool_status=Device.PoolStatus.QUARANTINE, reason=reason, actor=actor
        )

    @_each_action(description=_("Return to production"), done=_("In production"))
    def return_to_production(self, device: Device, actor) -> Device:
        return device_pool_status_set(device=device, pool_status=Device.PoolStatus.PRODUCTION, actor=actor)

    @_reason_action(
        description=_("Cordon (no new allocations)"), title=_("Cordon devices"), done=_("Cordoned")
    )
    def cordon(self, device: Device, reason: str, actor) -> Device:
        return device_cordon(device=device, cordoned=True, reason=reason, actor=actor)

    @_each_action(description=_("Lift cordon"), done=_("Cordon lifted"))
    def uncordon(self, device: Device, actor) -> Device:
        return device_cordon(device=device, cordoned=False, actor=actor)

    @_reason_action(description=_("Retire"), title=_("Retire devices"), done=_("Retired"))
    def retire(self, device: Device, reason: str, actor) -> Device:
        return device_retire(device=device, reason=reason, actor=actor)

    # -- import view -------------------------------------------------------------------------------

    def get_urls(self):
        info = self.opts.app_label, self.opts.model_name
        return [
            path("import/", self.admin_site.admin_view(self.import_view), name="{}_{}_import".format(*info)),
            path(
                "import/<int:run_id>/",
                self.admin_site.admin_view(self.import_progress_view),
                name="{}_{}_import_progress".format(*info),
            ),
            *super().get_urls(),
        ]

    def import_progress_view(self, request: HttpRequest, run_id: int) -> HttpResponse:
        """A queued import: its progress (polled at /runs/<id>/ by static/js/run-progress.js), then
        its report or the rows that failed."""
        if not self.has_change_permission(request):
            raise PermissionDenied
        run = get_object_or_404(BackgroundRun, pk=run_id, kind=IMPORT_RUN_KIND)
        result = run.result or {}
        failed = run.status == BackgroundRun.Status.FAILED
        context = _page_context(
            self,
            request,
            _("Ledger import #%(n)d") % {"n": run.pk},
            run=run,
            rows=run.params.get("rows", 0),
            dry_run=bool(run.params.get("dry_run")),
            progress=run_progress_read(run),
            report=result.get("report") or None,
            errors=result.get("errors", []) if failed else [],
            error_message=run.error if failed else "",
            changelist_url=reverse("admin:inventory_device_changelist"),
        )
        return TemplateResponse(request, "admin/inventory/ledger_import_progress.html", context)

    def import_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_change_permission(request):
            raise PermissionDenied
        report = None
        errors: list[dict] = []
        error_message = ""
        if request.method == "POST":
            form = LedgerImportForm(request.POST, request.FILES)
            if form.is_valid():
                data = form.cleaned_data["file"].read()
                if data.count(b"\n") > BACKGROUND_IMPORT_ROWS:
                    # A large file: a worker imports it; the progress page follows it.
                    run = ledger_import_request(
                        data=data, actor=request.user, dry_run=form.cleaned_data["dry_run"]
                    )
                    return HttpResponseRedirect(
                        reverse("admin:inventory_device_import_progress", args=[run.pk])
                    )
                try:
                    report = ledger_import_csv(
                        data=data,
                        actor=request.user,
                        dry_run=form.cleaned_data["dry_run"],
                        on_node_moved=node_moved,
                    )
                except ValidationFailed as exc:
                    error_message = exc.message
                    details = exc.details if isinstance(exc.details, dict) else {}
                    errors = details.get("rows") or [{"line": "", "column": "", "message": exc.message}]
                except ApplicationError as exc:
                    error_message = exc.message
                else:
                    if report.dry_run:
                        self.message_user(request, _("Dry run: nothing was written."), messages.WARNING)
                    else:
                        self.message_user(request, _("Ledger imported."), messages.SUCCESS)
        else:
            form = LedgerImportForm()
        context = _page_context(
            self,
            request,
            _("Import ledger CSV"),
            form=form,
            report=report,
            errors=errors,
            error_message=error_message,
            import_columns=IMPORT_COLUMNS,
            read_only_columns=READ_ONLY_COLUMNS,
            changelist_url=reverse("admin:inventory_device_changelist"),
        )
        return TemplateResponse(request, "admin/inventory/ledger_import.html", context)
