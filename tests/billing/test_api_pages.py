"""API and pages: members see only their projects' bills; staff run the console; bad input is precise."""

from __future__ import annotations

from datetime import date
from decimal import Decimal

from django.urls import reverse

from apps.billing import services
from apps.billing.models import Adjustment, Bill, BillingPeriod, RateCard
from tests.fixtures.billing import local

SEP = date(2026, 9, 1)


def test_a_member_lists_only_their_projects_bills(
    api_client, closed_september, django_assert_max_num_queries
):
    alice, mine, theirs = closed_september
    api_client.force_authenticate(alice)
    with django_assert_max_num_queries(6):
        response = api_client.get("/api/billing/bills/")
    assert response.status_code == 200
    assert [b["id"] for b in response.json()["results"]] == [mine.pk]
    # Another project's bill is a 404: tests/billing/test_api_contract.py.
    entries = api_client.get("/api/billing/usage-entries/").json()["results"]
    assert entries and {e["project"] for e in entries} == {"vision"}
    detail = api_client.get(f"/api/billing/bills/{mine.pk}/").json()
    assert detail["total"] == "20.00" and {line["group"] for line in detail["lines"]} == {"resource", "job"}


def test_staff_see_every_bill_and_the_month_filter_is_checked(api_client, staff_user, closed_september):
    api_client.force_authenticate(staff_user)
    assert api_client.get("/api/billing/bills/?month=2026-09").json()["count"] == 2
    bad = api_client.get("/api/billing/bills/?month=2026-13")
    assert bad.status_code == 400 and "YYYY-MM" in bad.json()["error"]["message"]


def test_editing_a_finalized_bill_is_a_409_and_changes_nothing(api_client, staff_user, closed_september):
    _alice, mine, _theirs = closed_september
    api_client.force_authenticate(staff_user)
    response = api_client.patch(f"/api/billing/bills/{mine.pk}/", {"total": "1.00"}, format="json")
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "bill_finalized"
    assert Bill.objects.get(pk=mine.pk).total == Decimal("20.00")
    assert api_client.post(f"/api/billing/bills/{mine.pk}/finalize/").status_code == 409


def test_rate_card_api_refuses_overlaps_and_negative_prices(api_client, staff_user, a100):
    api_client.force_authenticate(staff_user)
    ok = api_client.post(
        "/api/billing/rate-cards/",
        {
            "name": "A100",
            "scope": "device_model",
            "device_model": a100.slug,
            "price_per_cu_hour": "15",
            "effective_from": "2026-01-01",
        },
        format="json",
    )
    assert ok.status_code == 201, ok.json()
    clash = api_client.post(
        "/api/billing/rate-cards/",
        {
            "name": "A100 again",
            "scope": "device_model",
            "device_model": a100.slug,
            "price_per_cu_hour": "9",
            "effective_from": "2026-06-01",
        },
        format="json",
    )
    assert clash.status_code == 409 and clash.json()["error"]["code"] == "rate_card_overlap"
    negative = api_client.post(
        "/api/billing/rate-cards/",
        {"name": "neg", "price_per_cu_hour": "-1", "effective_from": "2026-01-01"},
        format="json",
    )
    assert negative.status_code == 400 and "price_per_cu_hour" in negative.json()["error"]["details"]
    no_target = api_client.post(
        "/api/billing/rate-cards/",
        {"name": "t", "scope": "template", "price_per_cu_hour": "1", "effective_from": "2026-01-01"},
        format="json",
    )
    assert no_target.status_code == 400 and "template" in no_target.json()["error"]["details"]
    assert RateCard.objects.count() == 1


def test_closing_through_the_api_refuses_a_month_that_has_not_ended(api_client, staff_user):
    api_client.force_authenticate(staff_user)
    month = services.current_month().strftime("%Y-%m")
    response = api_client.post("/api/billing/periods/close/", {"month": month}, format="json")
    assert response.status_code == 400 and response.json()["error"]["code"] == "month_not_ended"
    assert not BillingPeriod.objects.filter(state="closed").exists()
    bad = api_client.post("/api/billing/periods/close/", {"month": "September"}, format="json")
    assert bad.status_code == 400


def test_staff_adjust_through_the_api(api_client, staff_user, closed_september):
    _alice, mine, _theirs = closed_september
    api_client.force_authenticate(staff_user)
    response = api_client.post(
        "/api/billing/adjustments/",
        {"project": "vision", "amount": "-2.50", "reason": "goodwill", "corrects_bill": mine.pk},
        format="json",
    )
    assert response.status_code == 201, response.json()
    assert response.json()["month"] == "2026-10"
    bad = api_client.post(
        "/api/billing/adjustments/", {"project": "vision", "amount": "0", "reason": "x"}, format="json"
    )
    assert bad.status_code == 400 and "amount" in bad.json()["error"]["details"]
    assert Adjustment.objects.count() == 1


def test_the_month_zip_holds_every_bill_in_every_format(api_client, staff_user, closed_september):
    import io
    import zipfile

    api_client.force_authenticate(staff_user)
    period = BillingPeriod.objects.get(month=SEP)
    response = api_client.get(f"/api/billing/periods/{period.pk}/export/")
    assert response.status_code == 200
    names = sorted(zipfile.ZipFile(io.BytesIO(response.content)).namelist())
    assert names == sorted(
        f"{slug}-2026-09.{ext}" for slug in ("vision", "secret-llm") for ext in ("csv", "xlsx", "pdf")
    )


# ------------------------------------------------------------------ pages


def test_my_bills_page_shows_only_my_projects_and_the_cost_chart(client, closed_september):
    alice, mine, theirs = closed_september
    client.force_login(alice)
    page = client.get(reverse("billing:bills"))
    assert page.status_code == 200
    html = page.content.decode()
    assert reverse("billing:bill-detail", args=[mine.pk]) in html
    assert reverse("billing:bill-detail", args=[theirs.pk]) not in html
    assert "secret-llm" not in html
    assert "billing-cost-chart" in html
    detail = client.get(reverse("billing:bill-detail", args=[mine.pk])).content.decode()
    assert "20.00 CNY" in detail and "mine-job" in detail
    assert client.get(reverse("billing:bill-detail", args=[theirs.pk])).status_code == 404
    assert client.get(reverse("billing:bill-download", args=[theirs.pk, "csv"])).status_code == 404
    download = client.get(reverse("billing:bill-download", args=[mine.pk, "xlsx"]))
    assert download.status_code == 200 and download["Content-Disposition"].endswith('vision-2026-09.xlsx"')
    jobs = client.get(reverse("billing:job-costs") + "?month=2026-09").content.decode()
    assert "mine-job" in jobs and "their-job" not in jobs


def test_the_console_is_for_staff_only(client, closed_september, staff_user):
    alice, _mine, _theirs = closed_september
    client.force_login(alice)
    for name in ("billing:console", "billing:ledger", "billing:adjustments", "billing:rate-cards"):
        assert client.get(reverse(name)).status_code == 404
    client.force_login(staff_user)
    for name in ("billing:console", "billing:ledger", "billing:adjustments", "billing:rate-cards"):
        assert client.get(reverse(name)).status_code == 200
    ledger = client.get(reverse("billing:ledger") + "?q=their-job").content.decode()
    assert "their-job" in ledger and "mine-job" not in ledger


def test_the_page_filter_bars_are_the_api_filtersets_forms(client, closed_september, staff_user):
    """One filtering idiom: the bills page and the ledger filter with the API's FilterSets and
    render their forms, with the same query parameters as before."""
    alice, mine, theirs = closed_september
    client.force_login(staff_user)
    ledger = client.get(reverse("billing:ledger") + "?late=true&project=" + theirs.project.slug)
    html = ledger.content.decode()
    for name in ("q", "project", "month", "late"):
        assert f'name="{name}"' in html
    assert 'name="allocation"' not in html  # an API-only filter is not on the page
    assert 'value="true" selected' in html and "their-job" not in html  # no late entries
    on_time = client.get(reverse("billing:ledger") + "?late=false&project=" + theirs.project.slug)
    assert "their-job" in on_time.content.decode() and "Reset" in on_time.content.decode()
    bills = client.get(reverse("billing:bills") + "?month=2026-13").content.decode()
    assert "2026-13" in bills and reverse("billing:bill-detail", args=[mine.pk]) not in bills
    september = client.get(reverse("billing:bills") + "?month=2026-09&project=" + mine.project.slug)
    html = september.content.decode()
    assert reverse("billing:bill-detail", args=[mine.pk]) in html
    assert reverse("billing:bill-detail", args=[theirs.pk]) not in html


def test_the_console_records_an_adjustment_and_shows_precise_errors(client, staff_user, closed_september):
    _alice, mine, _theirs = closed_september
    client.force_login(staff_user)
    bad = client.post(
        reverse("billing:adjustments"), {"project": mine.project_id, "amount": "0", "reason": "oops"}
    )
    assert bad.status_code == 200 and "non-zero" in bad.content.decode()
    assert not Adjustment.objects.exists()
    good = client.post(
        reverse("billing:adjustments"),
        {"project": mine.project_id, "amount": "-3.00", "reason": "lost card", "corrects_bill": mine.pk},
    )
    assert good.status_code == 302
    assert Adjustment.objects.get().month == date(2026, 10, 1)


def test_the_console_close_starts_a_close_and_the_worker_finishes_it(
    client, staff_user, devices, make_project, make_job, make_allocation
):
    from worker.tasks.billing import month_close_task

    project = make_project("vision")
    make_allocation(make_job(project), devices[0], local(2026, 9, 1, 0), local(2026, 9, 1, 1))
    client.force_login(staff_user)
    response = client.post(
        reverse("billing:console-close"), {"month": "2026-09", "idle_policy": "none", "finalize": "on"}
    )
    period = BillingPeriod.objects.get(month=SEP)
    assert response.status_code == 302 and response["Location"] == reverse(
        "billing:period-progress", args=[period.pk]
    )
    assert period.state == "closing"
    run = period.close_run
    assert run.kind == "billing.month_close" and run.actor == staff_user
    waiting = client.get(reverse("billing:period-progress", args=[period.pk])).content.decode()
    assert f'data-url="/runs/{run.pk}/"' in waiting and "<script>" not in waiting
    progress = client.get(f"/runs/{run.pk}/").json()
    assert progress["status"] == "queued" and progress["percent"] == 0
    month_close_task.run(period.pk)
    progress = client.get(f"/runs/{run.pk}/").json()
    assert (progress["status"], progress["percent"], progress["done"]) == ("succeeded", 100, 1)
    period.refresh_from_db()
    assert period.state == "closed" and (period.progress_done, period.progress_total) == (1, 1)
    assert client.get(reverse("billing:period-progress", args=[period.pk])).status_code == 200
    not_ended = client.post(
        reverse("billing:console-close"),
        {"month": services.current_month().strftime("%Y-%m"), "idle_policy": "none"},
        follow=True,
    )
    assert "has not ended" in not_ended.content.decode()


def test_the_admin_month_close_action_redirects_to_its_progress(
    client, staff_user, devices, make_project, make_job, make_allocation
):
    project = make_project("vision")
    make_allocation(make_job(project), devices[0], local(2026, 9, 1, 0), local(2026, 9, 1, 1))
    services.metering_run(start=local(2026, 9, 1), end=local(2026, 9, 2))
    period = BillingPeriod.objects.get(month=SEP)  # metering opened it
    client.force_login(staff_user)
    response = client.post(
        reverse("admin:billing_billingperiod_changelist"),
        {"action": "close_months", "_selected_action": [period.pk]},
    )
    assert response.status_code == 302
    assert response["Location"] == reverse("billing:period-progress", args=[period.pk])
    period.refresh_from_db()
    assert period.state == "closing"
    for name in ("billingperiod", "bill", "usageentry", "ratecard", "adjustment"):
        assert client.get(reverse(f"admin:billing_{name}_changelist")).status_code == 200


def test_the_ledgers_job_filter_lists_exactly_that_jobs_entries(api_client, staff_user, closed_september):
    # the ledger has no index on job (billing 0013): the filter goes through the job's allocations
    from apps.billing.models import UsageEntry

    api_client.force_authenticate(staff_user)
    jobs = sorted(set(UsageEntry.objects.values_list("job_id", flat=True)))
    assert len(jobs) > 1
    for job_id in jobs:
        got = api_client.get(f"/api/billing/usage-entries/?job={job_id}&page_size=500").json()["results"]
        assert got and {e["id"] for e in got} == set(
            UsageEntry.objects.filter(job_id=job_id).values_list("pk", flat=True)
        )
    assert api_client.get("/api/billing/usage-entries/?job=abc").status_code == 400


def test_a_filtered_ledger_is_counted_up_to_a_cap_then_estimated(
    api_client, staff_user, closed_september, monkeypatch
):
    # the ledger's model filter has no index (billing 0012): past the cap the count is the planner's
    # estimate and says so; "next" still comes from the rows, so paging reaches every entry
    from apps.billing.models import UsageEntry
    from apps.core.paginators import CappedCountPaginator

    api_client.force_authenticate(staff_user)
    entry = UsageEntry.objects.exclude(device_model=None).select_related("device_model").first()
    wanted = set(UsageEntry.objects.filter(device_model=entry.device_model).values_list("pk", flat=True))
    assert len(wanted) > 3
    url = f"/api/billing/usage-entries/?device_model={entry.device_model.slug}&page_size=2"
    exact = api_client.get(url).json()
    assert exact["count"] == len(wanted) and exact["count_estimated"] is False
    monkeypatch.setattr(CappedCountPaginator, "count_cap", 3)
    got, page = set(), api_client.get(url).json()
    assert page["count_estimated"] is True and page["count"] >= 4
    while True:
        got |= {e["id"] for e in page["results"]}
        if not page["next"]:
            break
        page = api_client.get(page["next"]).json()
    assert got == wanted
    # at the cap the count stays exact
    monkeypatch.setattr(CappedCountPaginator, "count_cap", len(wanted))
    again = api_client.get(url).json()
    assert again["count_estimated"] is False and again["count"] == len(wanted)
