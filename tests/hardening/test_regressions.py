"""Regression tests for the bugs the API fuzzing found (tests/hardening/test_fuzz_api.py), one per fix."""

from __future__ import annotations

import pytest
from drf_spectacular.generators import SchemaGenerator

from apps.inventory.models import DeviceEvent
from apps.jobs.models import Job
from apps.scheduling.services import scheduling_cycle_run
from tests.fixtures.jobs import submit_whole_cards

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def schema(django_db_setup, django_db_blocker):
    with django_db_blocker.unblock():
        return SchemaGenerator().get_schema(request=None, public=True)


def response_schema(schema, path, method="get", code="200", media="application/json"):
    return schema["paths"][path][method]["responses"][code]["content"][media]["schema"]


def component(schema, name):
    return schema["components"]["schemas"][name]


@pytest.fixture
def member_client(api_client, tenants):
    api_client.force_authenticate(tenants["member"])
    return api_client


@pytest.fixture
def one_job(tenants, fleet, a100):
    job = submit_whole_cards(tenants["project"], tenants["member"], a100, name="train", image="pytorch:2.3")
    scheduling_cycle_run()
    return job


# 1. /api/accounts/me/ answered one object but the schema said an array.
def test_me_is_documented_as_one_object(schema, member_client, tenants):
    assert response_schema(schema, "/api/accounts/me/") == {"$ref": "#/components/schemas/Me"}
    body = member_client.get("/api/accounts/me/").json()
    assert body["username"] == tenants["member"].username


# 2-4. Detail actions answering a plain list were documented as paginated pages with list filters.
@pytest.mark.parametrize(
    "path",
    [
        "/api/accounts/projects/{id}/members/",
        "/api/jobs/jobs/{id}/events/",
        "/api/jobs/jobs/{id}/allocations/",
    ],
)
def test_detail_actions_that_answer_a_list_are_documented_as_a_list(schema, path):
    body = response_schema(schema, path)
    assert body["type"] == "array"
    params = {p["name"] for p in schema["paths"][path]["get"].get("parameters", [])}
    assert params == {"id"}  # no page / ordering / filter parameters that do nothing


def test_job_events_and_allocations_are_plain_lists(member_client, one_job):
    events = member_client.get(f"/api/jobs/jobs/{one_job.pk}/events/").json()
    allocations = member_client.get(f"/api/jobs/jobs/{one_job.pk}/allocations/").json()
    assert isinstance(events, list) and events
    assert isinstance(allocations, list) and len(allocations) == 1


# 5. Node topology answered {node, devices, links, rdma_nics} but was documented as a page of links.
def test_node_topology_is_documented_as_its_object(schema, member_client, fleet):
    ref = response_schema(schema, "/api/inventory/nodes/{id}/topology/")["$ref"].rsplit("/", 1)[1]
    assert set(component(schema, ref)["properties"]) == {"node", "devices", "links", "rdma_nics"}
    body = member_client.get(f"/api/inventory/nodes/{fleet['gpu-01'].pk}/topology/").json()
    assert body["node"] == "gpu-01" and len(body["devices"]) == 4


# 6-19. Read-only relations that may be empty answered null but were documented as non-null strings.
@pytest.mark.parametrize(
    ("component_name", "field"),
    [
        ("Job", "template"),
        ("Job", "device_model"),
        ("Job", "request_template"),
        ("Job", "submitted_by"),
        ("Allocation", "device_uuid"),
        ("Device", "device_model"),
        ("Device", "owner_project"),
        ("Node", "pool"),
        ("Pool", "owner_project"),
        ("ComputeCoefficient", "created_by"),
        ("Quota", "department"),
        ("Quota", "project"),
        ("Quota", "device_model"),
        ("UsageEntry", "device_model"),
        ("UsageEntry", "template"),
    ],
)
def test_empty_relations_are_documented_as_nullable(schema, component_name, field):
    assert component(schema, component_name)["properties"][field].get("nullable") is True


def test_a_whole_card_job_shows_a_null_template(member_client, one_job):
    body = member_client.get(f"/api/jobs/jobs/{one_job.pk}/").json()
    assert body["template"] is None and body["device_model"] == "a100-80gb-sxm4"


# 20-21. Row reports (top nodes, idle cards) answered arrays, documented as objects; CSV undocumented.
@pytest.mark.parametrize("path", ["/api/telemetry/reports/top-nodes/", "/api/telemetry/reports/idle-cards/"])
def test_row_reports_are_documented_as_arrays_with_a_csv_variant(schema, path):
    assert response_schema(schema, path)["type"] == "array"
    assert "text/csv" in schema["paths"][path]["get"]["responses"]["200"]["content"]


# 22. The ledger export answers XLSX too.
def test_the_ledger_export_documents_xlsx(schema, staff_user, api_client, fleet):
    content = schema["paths"]["/api/inventory/devices/export/"]["get"]["responses"]["200"]["content"]
    xlsx = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
    assert xlsx in content
    api_client.force_authenticate(staff_user)
    assert api_client.get("/api/inventory/devices/export/?format=xlsx")["Content-Type"] == xlsx


# 23. A report period with an offset PostgreSQL refuses (ISO 8601 allows ±23:59) was a 500.
def test_a_report_period_with_a_large_offset_is_converted_not_a_500(api_client, staff_user):
    api_client.force_authenticate(staff_user)
    response = api_client.get(
        "/api/telemetry/reports/idle-cards/", {"start": "2026-10-25T08:31:15-22:17", "end": ""}
    )
    assert response.status_code == 200, response.content


def test_a_report_period_out_of_range_is_a_400(api_client, staff_user):
    api_client.force_authenticate(staff_user)
    response = api_client.get("/api/telemetry/reports/figures/", {"start": "0001-01-01T00:10:00+23:00"})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid"


# 24. A date-time filter with such an offset (device events ?since=) was a 500.
def test_a_date_time_filter_with_a_large_offset_filters_in_utc(member_client, fleet):
    node = fleet["gpu-01"]
    DeviceEvent.objects.create(node=node, kind=DeviceEvent.Kind.REGISTERED, message="x")
    response = member_client.get("/api/inventory/device-events/", {"since": "2000-06-29T06:06:23+23:54"})
    assert response.status_code == 200, response.content
    assert response.json()["count"] >= 1
    far = member_client.get("/api/inventory/device-events/", {"since": "8082-06-29T06:06:23-21:14"})
    assert far.status_code == 200 and far.json()["count"] == 0


# 25. A NUL character in a slug (scrape upload's cluster, a job's project) reached PostgreSQL: 500.
def test_a_nul_character_in_input_is_a_400(api_client, staff_user, tenants, fleet):
    api_client.force_authenticate(staff_user)
    response = api_client.post(
        "/api/telemetry/scrapes/", {"source": "x", "cluster": "\x00\x16"}, format="json"
    )
    assert response.status_code == 400, response.content
    assert response.json()["error"]["code"] == "invalid"
    api_client.force_authenticate(tenants["member"])
    before = Job.objects.count()
    response = api_client.post(
        "/api/jobs/jobs/",
        {"project": "secret\x00", "name": "n", "image": "i", "request_kind": "whole_cards"},
        format="json",
    )
    assert response.status_code == 400
    assert Job.objects.count() == before


# 26. Billing periods were paginated unordered (Meta.ordering is dropped by the Count annotation).
def test_billing_periods_are_listed_newest_first(api_client, staff_user):
    from datetime import date

    from apps.billing import selectors
    from apps.billing.models import BillingPeriod

    for month in (date(2026, 9, 1), date(2026, 11, 1), date(2026, 10, 1)):
        BillingPeriod.objects.create(month=month)
    assert selectors.period_list().ordered
    api_client.force_authenticate(staff_user)
    rows = api_client.get("/api/billing/periods/").json()["results"]
    assert [r["month"][:7] for r in rows] == ["2026-11", "2026-10", "2026-09"]
