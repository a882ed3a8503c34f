from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from django.contrib import admin, messages
from django.http import HttpRequest
from django.utils.translation import gettext as _

from apps.core.errors import ApplicationError
from apps.core.models import BackgroundRun, ChangeRecord


class ReadOnlyAdminMixin:
    """No adding, changing or deleting, for model admins and inlines alike (rows written only by the
    services: history, ledgers, traces). Django's admin still shows them to users with view
    permission (docs: ref/contrib/admin/#django.contrib.admin.ModelAdmin.has_change_permission)."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


def run_each(
    modeladmin: admin.ModelAdmin,
    request: HttpRequest,
    queryset: Iterable[Any],
    call: Callable[[Any], Any],
    done: str,
) -> int:
    """Run ``call(obj)`` (a service) for each selected row of an admin action. Each refusal
    (an ``ApplicationError``) is reported on its own with the row and its reason, the others go on;
    the successes are reported together as "<done>: <count>". Returns that count."""
    ok = 0
    for obj in queryset:
        try:
            call(obj)
        except ApplicationError as exc:
            modeladmin.message_user(request, f"{obj}: {exc.message}", messages.ERROR)
        else:
            ok += 1
    if ok:
        modeladmin.message_user(
            request, _("%(done)s: %(count)d") % {"done": done, "count": ok}, messages.SUCCESS
        )
    return ok


@admin.register(ChangeRecord)
class ChangeRecordAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("created_at", "actor_label", "action", "object_repr", "task_id")
    list_filter = ("action", "content_type")
    search_fields = ("object_repr", "object_id", "actor_label", "task_id")
    readonly_fields = [f.name for f in ChangeRecord._meta.fields]


@admin.register(BackgroundRun)
class BackgroundRunAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Read-only: runs change only through apps.core.runs (their owners' services)."""

    list_display = (
        "created_at",
        "kind",
        "status",
        "progress_done",
        "progress_total",
        "actor_label",
        "finished_at",
    )
    list_filter = ("kind", "status")
    search_fields = ("kind", "actor_label", "error")
    # params can hold a whole uploaded file (a ledger CSV): not shown in the admin.
    exclude = ("params",)
    readonly_fields = [f.name for f in BackgroundRun._meta.fields if f.name != "params"]
