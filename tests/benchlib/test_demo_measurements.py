"""Issue 29 §8, the demo part: the demo's benchmark library measures every card of the fleet whose relevant
catalog peak is known (per profile kind: tensor FP16/BF16, INT8, memory bandwidth), marked synthetic, so
cards differ per unit of work; and the migration cockpit's "Measured evidence per workload" is filled.

The figures are the simulator's (``synthetic_throughput``) or the demo scenario's (``EVIDENCE_SCENARIO``);
nothing here is a measurement of real hardware, and the tests assert they are marked so.
"""

from __future__ import annotations

import re
from decimal import Decimal

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.urls import reverse

from apps.benchlib.models import Measurement
from apps.benchlib.services import per_card_throughput, relevant_peak, synthetic_throughput
from apps.catalog.models import DeviceModel, WorkloadProfile
from apps.catalog.selectors import coefficients_on
from apps.demo.benchlib import EVIDENCE_SOURCE
from apps.inventory.models import Device
from apps.migration.models import MigratedService
from apps.migration.selectors import workload_evidence

pytestmark = pytest.mark.django_db


def _fleet_models():
    in_fleet = Device.objects.exclude(health=Device.Health.RETIRED).values("device_model_id")
    return list(DeviceModel.objects.filter(pk__in=in_fleet))


def test_every_card_with_a_known_relevant_peak_is_measured_and_cards_differ_per_unit_of_work():
    call_command("load_demo")
    profiles = list(WorkloadProfile.objects.all())
    kinds = {(p.synthetic or {}).get("bound") for p in profiles}
    assert {"compute", "bandwidth"} <= kinds
    measured_vendors = set()
    for model in _fleet_models():
        for profile in profiles:
            rows = Measurement.objects.filter(
                profile=profile, device_model=model, source_label__startswith="demo: simulated"
            )
            fits = not profile.memory_mib or (model.memory_mib or 0) >= profile.memory_mib
            known = synthetic_throughput(profile, model, Decimal(100)) is not None
            # Known relevant peak and memory enough: measured (three runs on the whole card); unknown
            # stays unknown — no made-up figure for a card the catalog has no peak of.
            assert rows.filter(template__isnull=True).count() == (3 if known and fits else 0), (
                model.name,
                profile.key,
            )
            assert all(m.synthetic for m in rows)
            if known and fits:
                measured_vendors.add(model.vendor)
    assert "nvidia" in measured_vendors
    # Cost per unit of work (coefficient ÷ per-card throughput) differs between two cards for at least one
    # profile by more than a rounding epsilon: decode is bound by bandwidth, not by the coefficient's peak.
    t4, a100 = DeviceModel.objects.get(name="T4"), DeviceModel.objects.get(name="A100 80GB SXM4")
    coefficients = coefficients_on([t4.pk, a100.pk])
    spreads = {}
    for profile in profiles:
        a, b = per_card_throughput(profile, t4), per_card_throughput(profile, a100)
        if a and b:
            cost_t4 = coefficients[t4.pk] / a["per_card"]
            cost_a100 = coefficients[a100.pk] / b["per_card"]
            spreads[profile.key] = abs(cost_t4 / cost_a100 - 1)
    assert max(spreads.values()) > Decimal("0.10"), spreads
    assert spreads["llm-serve-7b"] > Decimal("0.10")


def test_relevant_peak_follows_the_profiles_precision():
    call_command("load_catalog")
    t4 = DeviceModel.objects.get(name="T4")  # FP16 65 TFLOPS, no BF16, INT8 unknown in the catalog
    train = WorkloadProfile(key="x-train", unit="samples/s", precision="bf16")
    quant = WorkloadProfile(
        key="x-int8",
        unit="images/s",
        precision="int8",
        synthetic={"bound": "compute", "work_per_unit": 7.6e9, "efficiency": 0.25},
    )
    assert relevant_peak(train, t4) == 65.0  # no BF16: FP16 mixed precision
    assert relevant_peak(quant, t4) is None and synthetic_throughput(quant, t4, Decimal(100)) is None
    mlu = DeviceModel.objects.get(name="MLU370-X8")  # INT8 256 TOPS, FP16 96 TFLOPS in the catalog
    value, _latency = synthetic_throughput(quant, mlu, Decimal(100), seed="s")
    fp16 = WorkloadProfile(key="x-fp16", unit="images/s", precision="fp16", synthetic=quant.synthetic)
    value16, _latency = synthetic_throughput(fp16, mlu, Decimal(100), seed="s")
    assert float(value / value16) == pytest.approx(256 / 96, rel=1e-3)


def test_the_cockpit_shows_measured_evidence_for_every_demo_service(client):
    call_command("load_demo")
    services = list(MigratedService.objects.select_related("workload_profile"))
    assert len(services) == 4 and all(s.workload_profile_id for s in services)
    rows = workload_evidence(services)
    assert len(rows) == 4
    for row in rows:
        assert row["measured"] is not None and row["measurements"] >= 4, row["service"].name
        assert row["synthetic"] is True
    assert {row["flagged"] for row in rows} == {True, False}  # one target agrees, one contradicts
    # The target figures are simulated benchmark runs, marked synthetic, on the target's own cards.
    runs = Measurement.objects.filter(
        source=Measurement.Source.GRAY_BATCH, benchmark_run__source=EVIDENCE_SOURCE
    )
    assert runs.count() == 9 and all(m.synthetic for m in runs)
    assert {m.device_model.name for m in runs} == {"Ascend 910B3", "DCU Z100/Z100L"}
    admin = get_user_model().objects.get(username="admin")
    client.force_login(admin)
    page = client.get(reverse("migration:cockpit")).content.decode()
    table = page[
        page.index('id="evidence-table"') : page.index("</table>", page.index('id="evidence-table"'))
    ]
    bodies = re.findall(r"<tr>(.*?)</tr>", table.split("<tbody>", 1)[1], flags=re.S)
    assert len(bodies) == 4
    for body in bodies:
        assert "no data" not in body and "synthetic" in body
    # A second load changes nothing.
    counts = (Measurement.objects.count(), runs.count())
    call_command("load_demo")
    assert (Measurement.objects.count(), runs.count()) == counts
    # Only a run whose source says it is simulated is marked synthetic; a harness's own run is not.
    from apps.inventory.models import Node
    from apps.rollout.services import benchmark_run_record

    node = Node.objects.get(name="ascend-910b-01")
    profile = WorkloadProfile.objects.get(key="llm-serve-7b")
    real = benchmark_run_record(
        actor="test",
        name="harness",
        node=node,
        throughput="100",
        unit="tokens/s",
        source="harness-1",
        profile=profile,
    )
    simulated = benchmark_run_record(
        actor="test",
        name="sim",
        node=node,
        throughput="100",
        unit="tokens/s",
        source="simulated:x",
        profile=profile,
    )
    assert real.measurement.synthetic is False and simulated.measurement.synthetic is True
