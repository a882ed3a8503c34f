"""Admin console for scheduling records (staff only): allocations and decision traces, read-only.

Both are written by the scheduling cycle and the release services only; the admin shows them.
"""

from __future__ import annotations

import json

from django.contrib import admin
from django.contrib.admin.views.main import ChangeList
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _

from apps.core.admin import ReadOnlyAdminMixin
from apps.inventory.models import Node
from apps.jobs.models import Allocation, Job
from apps.scheduling.models import DecisionTrace


def _pretty(value) -> str:
    if value in (None, "", [], {}):
        return "—"
    text = json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False, default=str)
    return format_html('<pre style="white-space: pre-wrap; margin: 0">{}</pre>', text)


class ActiveFilter(admin.SimpleListFilter):
    title = _("status")
    parameter_name = "active"

    def lookups(self, request, model_admin):
        return (("yes", _("active")), ("no", _("released")))

    def queryset(self, request, queryset):
        if self.value() == "yes":
            return queryset.filter(released_at__isnull=True)
        if self.value() == "no":
            return queryset.filter(released_at__isnull=False)
        return queryset


class JobFilter(admin.SimpleListFilter):
    """Allocations of one job (``?job__id__exact=<id>``, as the job pages link). Only the chosen job is
    listed: a list of every job (200,000 at scale) is neither readable nor cheap."""

    title = _("job")
    parameter_name = "job__id__exact"

    def lookups(self, request, model_admin):
        value = self.value()
        if not value or not str(value).isdigit():
            return []
        job = Job.objects.select_related("project").filter(pk=int(value)).first()
        return [(str(job.pk), str(job))] if job else []

    def queryset(self, request, queryset):
        value = self.value()
        if value and str(value).isdigit():
            return queryset.filter(job_id=int(value))
        return queryset


class NodeFilter(admin.SimpleListFilter):
    """Allocations on one node (``?node__id__exact=<id>``, the parameter the related-only filter used).
    Only the chosen node is listed: every node holding an allocation (thousands at scale) made each
    page of the list render thousands of links (issue 20); search by node name finds the others."""

    title = _("node")
    parameter_name = "node__id__exact"

    def lookups(self, request, model_admin):
        value = self.value()
        if not value or not str(value).isdigit() or int(value) >= 2**63:
            return []
        node = Node.objects.filter(pk=int(value)).first()
        return [(str(node.pk), str(node))] if node else []

    def queryset(self, request, queryset):
        value = self.value()
        if value and str(value).isdigit() and int(value) < 2**63:
            return queryset.filter(node_id=int(value))
        return queryset


class _AllocationChangeList(ChangeList):
    """The list reads only the columns it shows and the names the related rows print as: the jobs,
    nodes and cards joined for 100 rows otherwise bring every JSON column along (env, labels, taints,
    partitions …), decoded and thrown away (issue 31: the list at 1,000,000 allocations)."""

    def get_queryset(self, request, exclude_parameters=None):
        return (
            super()
            .get_queryset(request, exclude_parameters)
            .only(
                *AllocationAdmin.list_display,
                "job__name",
                "job__project__slug",
                "node__name",
                "device__vendor",
                "device__index",
                "device__node__name",
            )
        )


@admin.register(Allocation)
class AllocationAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = (
        "id",
        "job",
        "node",
        "device",
        "replica",
        "attempt",
        "whole_card",
        "memory_mib",
        "compute_milli",
        "isolation",
        "started_at",
        "released_at",
    )
    list_filter = (
        ActiveFilter,
        "whole_card",
        "isolation",
        NodeFilter,
        JobFilter,
    )
    search_fields = ("job__name", "node__name", "device__uuid", "=trace_id")
    list_select_related = ("job__project", "node", "device__node")  # Device.__str__ reads its node
    date_hierarchy = "started_at"
    ordering = ("-started_at", "-id")

    def get_changelist(self, request, **kwargs):
        return _AllocationChangeList


@admin.register(DecisionTrace)
class DecisionTraceAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("trace_id", "job", "outcome", "policy", "queue_position", "duration_us", "created_at")
    list_filter = ("outcome", "policy")
    search_fields = ("=trace_id", "job__name", "explanation")
    list_select_related = ("job__project",)
    date_hierarchy = "created_at"
    ordering = ("-created_at", "-id")
    fields = (
        "trace_id",
        "job",
        "cycle_id",
        "created_at",
        "policy",
        "outcome",
        "queue_position",
        "duration_us",
        "explanation",
        "steps_pretty",
        "candidates_pretty",
        "placement_pretty",
    )
    readonly_fields = fields

    @admin.display(description=_("steps"))
    def steps_pretty(self, obj: DecisionTrace) -> str:
        return _pretty(obj.steps)

    @admin.display(description=_("candidates"))
    def candidates_pretty(self, obj: DecisionTrace) -> str:
        return _pretty(obj.candidates)

    @admin.display(description=_("placement"))
    def placement_pretty(self, obj: DecisionTrace) -> str:
        return _pretty(obj.placement)
