"""Every CSV / XLSX export is safe from spreadsheet formula injection (OWASP "CSV Injection").

The walk finds the exports itself — API operations whose OpenAPI responses are CSV, XLSX, a zip of
them or a download with a csv/xlsx ``format``; page routes that serve .csv/.zip files or downloads;
admin export actions — and fails when one is not in ``ENDPOINTS`` below, so a new export is walked
from its first day. Objects are named to start with each trigger (= + - @ tab CR), every export is
downloaded, and no cell may start with a trigger unescaped; XLSX cells are never formulas.
"""

from __future__ import annotations

import csv
import io
import zipfile
from datetime import date, timedelta
from decimal import Decimal

import pytest
from django.contrib import admin
from django.core.management import call_command
from django.urls import get_resolver, reverse
from django.urls.resolvers import URLPattern, URLResolver
from django.utils import timezone

from apps.accounts.models import Department, Project
from apps.billing.models import Bill, BillingPeriod, BillLine
from apps.catalog.models import DeviceModel
from apps.core.exports import FORMULA_TRIGGERS, is_plain_number
from apps.inventory.models import Node
from apps.jobs.models import Job
from apps.migration.models import MigratedService, MigrationPlan
from apps.telemetry.models import DeviceRollup

pytestmark = pytest.mark.django_db

CSV = "text/csv"
XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
ZIP = "application/zip"

# API path (as in /api/schema/) -> query strings to download (True: user-named text must appear).
ENDPOINTS: dict[str, list[tuple[str, bool]]] = {
    "/api/billing/bills/{id}/export/": [("format=csv", True), ("format=xlsx", True)],
    "/api/billing/periods/{id}/export/": [("", True)],
    "/api/inventory/devices/export/": [("format=csv", True), ("format=xlsx", True)],
    "/api/migration/services/export/": [("days=30", True)],
    "/api/telemetry/jobs/{id}/": [("format=csv", False)],
    "/api/telemetry/projects/{id}/": [("format=csv", False)],
    "/api/telemetry/reports/comparison/": [("format=csv", False)],
    "/api/telemetry/reports/figures/": [("format=csv", False)],
    "/api/telemetry/reports/fleet/": [("format=csv&group_by=node", True)],
    "/api/telemetry/reports/fragmentation/": [("format=csv", False)],
    "/api/telemetry/reports/idle-cards/": [("format=csv&threshold=100", True)],
    "/api/telemetry/reports/top-nodes/": [("format=csv", True)],
}
# Page routes (namespace:name) that download a file.
PAGES = {
    "billing:bill-download": [("csv", True), ("xlsx", True), ("pdf", None)],
    "billing:period-export": [(None, True)],
    "migration:export-services": [(None, True)],
    "migration:export-vendor-share": [(None, False)],
}
# Admin actions that export.
ADMIN_ACTIONS = {
    (app, model, action)
    for app, model in (("inventory", "device"), ("inventory", "node"))
    for action in ("export_csv", "export_xlsx")
}

NAMES = {
    "department": "+dept SUM(A1)",
    "project": "=2+3 vision",
    "model": '=HYPERLINK("http://evil.example","x")',
    "node": "-node cmd|' /C calc'!A0",
    "job": "@SUM(1+1)",
    "plan": "\t=plan",
    "service": "\r=service",
    "line": "=1+1 line",
}


def _export_operations() -> set[str]:
    from drf_spectacular.generators import SchemaGenerator

    schema = SchemaGenerator().get_schema(request=None, public=True)
    found = set()
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            if method != "get":
                continue
            types = {t for r in operation.get("responses", {}).values() for t in r.get("content", {})}
            formats = {
                value
                for p in operation.get("parameters", [])
                if p["name"] == "format"
                for value in p.get("schema", {}).get("enum", [])
            }
            if types & {CSV, XLSX, ZIP} or formats & {"csv", "xlsx"}:
                found.add(path)
    return found


def _page_downloads() -> set[str]:
    found = set()

    def walk(patterns, namespace=""):
        for p in patterns:
            if isinstance(p, URLResolver):
                if p.namespace in ("admin", "api") or str(p.pattern).startswith("api/"):
                    continue
                walk(p.url_patterns, f"{namespace}{p.namespace}:" if p.namespace else namespace)
            elif isinstance(p, URLPattern):
                route = str(p.pattern)
                if any(mark in route for mark in (".csv", ".xlsx", ".zip", "download", "export")):
                    found.add(f"{namespace}{p.name}")

    walk(get_resolver().url_patterns)
    return found


def _admin_exports() -> set[tuple[str, str, str]]:
    found = set()
    for model, model_admin in admin.site._registry.items():
        for action in model_admin.actions or ():
            name = action if isinstance(action, str) else action.__name__
            if "export" in name:
                found.add((model._meta.app_label, model._meta.model_name, name))
    return found


def test_the_walk_knows_every_export():
    assert _export_operations() == set(ENDPOINTS), "an export endpoint is missing from the walk"
    assert _page_downloads() == set(PAGES), "an export page is missing from the walk"
    assert _admin_exports() == ADMIN_ACTIONS, "an admin export is missing from the walk"


def _rename_with_triggers() -> dict:
    project = Project.objects.get(slug="vision")
    Department.objects.filter(pk=project.department_id).update(name=NAMES["department"])
    Project.objects.filter(pk=project.pk).update(name=NAMES["project"])
    # A card with telemetry, so the utilization reports list its node and model.
    measured = DeviceRollup.objects.select_related("device").order_by("pk").first().device
    DeviceModel.objects.filter(pk=measured.device_model_id).update(name=NAMES["model"])
    Node.objects.filter(pk=measured.node_id).update(name=NAMES["node"])
    job = Job.objects.filter(project=project).order_by("pk").first()
    Job.objects.filter(pk=job.pk).update(name=NAMES["job"])
    MigrationPlan.objects.update(name=NAMES["plan"])
    service = MigratedService.objects.order_by("pk").first()
    MigratedService.objects.filter(pk=service.pk).update(name=NAMES["service"])
    # A draft bill (live names) in a draft month, with a line and amounts that are negative numbers.
    month = date(2020, 1, 1)
    period = BillingPeriod.objects.create(month=month, state=BillingPeriod.State.DRAFT)
    bill = Bill.objects.create(
        project=project,
        period=period,
        month=month,
        usage_amount=Decimal("10.00"),
        adjustments_amount=Decimal("-12.50"),
        total=Decimal("-2.50"),
    )
    BillLine.objects.create(bill=bill, group="adjustment", label=NAMES["line"], amount=Decimal("-12.50"))
    BillLine.objects.create(bill=bill, group="job", label=NAMES["job"], amount=Decimal("10.00"))
    return {"bill": bill, "period": period, "job": job, "project": project}


def _cells(content: bytes, content_type: str, filename: str = "") -> list[tuple[str, object, bool]]:
    """(kind, value, escaped-by-flag) of every cell of a CSV / XLSX / zip of them."""
    if content_type.startswith(ZIP) or filename.endswith(".zip"):
        cells = []
        with zipfile.ZipFile(io.BytesIO(content)) as archive:
            for name in archive.namelist():
                if name.endswith((".csv", ".xlsx")):
                    cells += _cells(archive.read(name), "", name)
        return cells
    if content_type.startswith(XLSX) or filename.endswith(".xlsx"):
        from openpyxl import load_workbook

        workbook = load_workbook(io.BytesIO(content))
        cells = []
        for sheet in workbook.worksheets:
            for row in sheet.iter_rows():
                for cell in row:
                    assert cell.data_type != "f", f"formula cell {cell.coordinate}: {cell.value!r}"
                    if cell.value is not None:
                        cells.append(("xlsx", cell.value, bool(cell.quotePrefix)))
        return cells
    text = content.decode("utf-8-sig")
    return [("csv", value, False) for row in csv.reader(io.StringIO(text, newline="")) for value in row]


def _assert_safe(cells, where: str, *, expect_escaped: bool) -> None:
    escaped = 0
    for kind, value, flagged in cells:
        if not isinstance(value, str):
            continue  # a typed XLSX number (or date) is never a formula
        if value.startswith("'") and value[1:2] in FORMULA_TRIGGERS:
            escaped += 1
        elif value.startswith(FORMULA_TRIGGERS) and not is_plain_number(value):
            assert kind == "xlsx" and flagged, f"{where}: unescaped formula-like cell {value!r}"
            escaped += 1
    if expect_escaped:
        assert escaped, f"{where}: no user-named cell reached this export (the walk proves nothing)"


def test_every_export_neutralizes_formula_triggers(client, api_client, staff_user, capsys):
    call_command("load_demo")
    capsys.readouterr()
    made = _rename_with_triggers()
    api_client.force_authenticate(staff_user)
    client.force_login(staff_user)
    now = timezone.now()
    window = f"start={(now - timedelta(days=7)).isoformat()}&end={now.isoformat()}".replace("+", "%2B")
    baseline = (
        f"baseline_start={(now - timedelta(days=14)).isoformat()}&baseline_end="
        + (now - timedelta(days=7)).isoformat()
    )
    baseline = baseline.replace("+", "%2B")
    ids = {
        "/api/billing/bills/{id}/export/": made["bill"].pk,
        "/api/billing/periods/{id}/export/": made["period"].pk,
        "/api/telemetry/jobs/{id}/": made["job"].pk,
        "/api/telemetry/projects/{id}/": made["project"].pk,
    }
    for path, queries in ENDPOINTS.items():
        for query, expect in queries:
            url = path.replace("{id}", str(ids.get(path, "")))
            if "telemetry/reports" in path:
                query = f"{query}&{window}"
            if "comparison" in path:
                query = f"{query}&{baseline}"
            response = api_client.get(f"{url}?{query}")
            assert response.status_code == 200, (url, query, response.content[:300])
            _assert_safe(
                _cells(response.content, response["Content-Type"]), f"{url}?{query}", expect_escaped=expect
            )
    for fmt, expect in PAGES["billing:bill-download"]:
        response = client.get(reverse("billing:bill-download", args=[made["bill"].pk, fmt]))
        assert response.status_code == 200
        if expect is not None:
            _assert_safe(
                _cells(response.content, response["Content-Type"]), f"page bill {fmt}", expect_escaped=expect
            )
    for name in ("billing:period-export", "migration:export-services", "migration:export-vendor-share"):
        args = [made["period"].pk] if name == "billing:period-export" else []
        response = client.get(reverse(name, args=args))
        assert response.status_code == 200, name
        (_query, expect) = PAGES[name][0]
        _assert_safe(_cells(response.content, response["Content-Type"]), name, expect_escaped=expect)
    from apps.inventory.models import Device

    for app, model, action in sorted(ADMIN_ACTIONS):
        rows = Device if model == "device" else Node
        response = client.post(
            reverse(f"admin:{app}_{model}_changelist"),
            {"action": action, "_selected_action": list(rows.objects.values_list("pk", flat=True))},
        )
        assert response.status_code == 200, action
        _assert_safe(
            _cells(response.content, response["Content-Type"]), f"admin {model} {action}", expect_escaped=True
        )
