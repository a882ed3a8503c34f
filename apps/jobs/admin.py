"""Admin console for jobs (staff only, as Django's admin is). It sits with the job models; as a web
module it calls the job lifecycle (scheduling), a layer above the jobs app.

A job's state never changes here by editing: state, reason, attempts and timestamps are read-only,
and the only state change offered is the "cancel" action, which calls the job lifecycle
(so every change has its JobEvent and ChangeRecord). Jobs are created through the submit page or
the API (the service validates the request against the catalog and the fleet), never here.
"""

from __future__ import annotations

from django.contrib import admin, messages
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

from apps.core.audit import change_record_create, snapshot
from apps.core.errors import ApplicationError
from apps.jobs.models import FINAL_STATES, Job, JobEvent
from apps.scheduling.lifecycle import job_cancel

# Fields a staff member may correct on a submitted job: none of them moves it in the state machine
# or changes what the scheduler places.
EDITABLE_FIELDS = ("name", "checkpoint_dir", "expected_duration_s", "max_retries", "retry_backoff_s")


class JobEventInline(admin.TabularInline):
    model = JobEvent
    extra = 0
    can_delete = False
    ordering = ("created_at", "id")
    fields = ("created_at", "kind", "from_state", "to_state", "message", "actor_label")
    readonly_fields = fields
    show_change_link = False

    def has_add_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:
        return False


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = (
        "name",
        "project",
        "state",
        "request_kind",
        "priority_class",
        "requested_cu",
        "created_at",
    )
    list_filter = ("state", "kind", "project")
    search_fields = ("name",)
    list_select_related = ("project",)
    date_hierarchy = "created_at"
    ordering = ("-created_at", "-id")
    inlines = (JobEventInline,)
    actions = ("cancel_jobs",)
    fieldsets = (
        (None, {"fields": ("project", "name", "kind", "submitted_by", "created_at", "updated_at")}),
        (
            _("State"),
            {
                "fields": (
                    "state",
                    "state_reason",
                    "state_changed_at",
                    "attempt",
                    "last_trace_id",
                    "started_at",
                    "finished_at",
                )
            },
        ),
        (
            _("Request"),
            {
                "fields": (
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
                    "replicas",
                    "requested_cu",
                    "node_selector",
                    "tolerations",
                    "gray_opt_in",
                )
            },
        ),
        (_("Container"), {"fields": ("image", "command", "env", "runtime_requirement")}),
        (
            _("Scheduling"),
            {
                "fields": (
                    "priority_class",
                    "priority",
                    "expected_duration_s",
                    "checkpoint_dir",
                    "max_retries",
                    "retry_backoff_s",
                )
            },
        ),
    )

    def get_readonly_fields(self, request: HttpRequest, obj=None):
        names = [field for fieldset in self.fieldsets for field in fieldset[1]["fields"]]
        return [name for name in names if name not in EDITABLE_FIELDS]

    def save_model(self, request: HttpRequest, obj: Job, form, change: bool) -> None:
        changed = [name for name in form.changed_data if name in EDITABLE_FIELDS]
        before = snapshot(Job.objects.get(pk=obj.pk), changed) if change and changed else None
        super().save_model(request, obj, form, change)
        if changed:
            change_record_create(
                actor=request.user,
                action="job.admin_edit",
                obj=obj,
                before=before,
                after=snapshot(obj, changed),
            )

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # jobs are submitted through the service (page or API), which validates them

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:
        return False  # jobs are history: cancel them instead

    @admin.action(description=_("Cancel the selected jobs (releases their cards)"), permissions=["change"])
    def cancel_jobs(self, request: HttpRequest, queryset):
        done = 0
        for job in queryset.select_related("project"):
            if job.state in FINAL_STATES:
                continue
            try:
                job_cancel(job=job, actor=request.user, reason="cancelled from the admin console")
            except ApplicationError as exc:
                self.message_user(request, f"{job}: {exc.message}", messages.ERROR)
            else:
                done += 1
        if done:
            self.message_user(request, _("Jobs cancelled: %(count)d") % {"count": done}, messages.SUCCESS)
