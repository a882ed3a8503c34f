"""Device catalog: data file, sync, coefficients, name matching, API and admin."""

from __future__ import annotations

import json
from datetime import date
from decimal import Decimal
from io import StringIO

import pytest
import yaml
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.catalog import selectors, services
from apps.catalog.models import ComputeCoefficient, DeviceModel
from apps.core.errors import Conflict, ValidationFailed
from apps.core.models import ChangeRecord
from tests.catalog.conftest import api_as as _client

ALLOWED_FEATURES = {"mig", "vnpu", "memory_slicing", "nvlink", "hccs", "xgmi", "mlulink", "rdma"}


def _file_rows():
    with open(services.DEFAULT_CATALOG_PATH, encoding="utf-8") as fh:
        return yaml.safe_load(fh)["device_models"]


@pytest.fixture
def synced(db):
    return services.catalog_sync(actor="test")


@pytest.fixture
def user(db):
    return get_user_model().objects.create_user(username="alice", password="pw")


# ------------------------------------------------------------------ the data file


def test_data_file_rows_are_concrete_sourced_and_unique():
    rows = _file_rows()
    assert len({r["slug"] for r in rows}) == len(rows) == len({r["name"] for r in rows})
    for row in rows:
        assert row["sources"], row["name"]
        assert set(row["features"]) <= ALLOWED_FEATURES, row["name"]
        assert "derived from catalog row" in row["notes"].lower(), row["name"]
        assert row["tdp_w"] is None or isinstance(row["tdp_w"], int), row["name"]
    names = {r["name"] for r in rows}
    for expected in (
        "A800 40GB PCIe",
        "A800 80GB PCIe",
        "A800 80GB SXM4",
        "V100 PCIe 16GB",
        "V100 PCIe 32GB",
        "V100 SXM2 16GB",
        "V100 SXM2 32GB",
        "Ascend 910A",
        "Ascend 910B1",
        "Ascend 910B2",
        "Ascend 910B2C",
        "Ascend 910B3",
        "Ascend 910B4",
        "Ascend 310P",
        "DCU Z100/Z100L",
        "DCU K100",
        "DCU K100_AI",
        "MLU370-X8",
        "MLU590",
        "Gaudi2",
        "Instinct MI210",
        "Instinct MI250X",
        "Instinct MI300X",
    ):
        assert expected in names
    # No row still bundles variants.
    assert not any(name.startswith(("A800 (", "V100 (", "Ascend 910B (")) for name in names)


def test_data_file_keeps_ranges_and_unknowns_out_of_numbers():
    rows = {r["name"]: r for r in _file_rows()}
    assert rows["H100 NVL 94GB"]["tdp_w"] is None and "350-400" in rows["H100 NVL 94GB"]["notes"]
    assert rows["Instinct MI210"]["fp32_tflops"] == 22.6  # the vector figure
    assert rows["H20 96GB"]["mig_profiles"] == {"1g.12gb": 7, "2g.24gb": 3, "3g.48gb": 2}
    assert rows["Ascend 310P"]["memory_mib"] is None
    assert rows["A800 80GB PCIe"]["memory_bandwidth_gbs"] is None
    assert rows["A800 80GB SXM4"]["memory_bandwidth_gbs"] == 2039
    assert rows["V100 PCIe 16GB"]["fp16_dense_tflops"] == 112
    assert rows["V100 SXM2 32GB"]["fp16_dense_tflops"] == 125
    assert rows["Ascend 910B4"]["memory_mib"] == 32 * 1024
    assert set(rows["Ascend 910B3"]["vnpu_templates"]) == {"vir05_1c_16g", "vir10_3c_32g"}


# ------------------------------------------------------------------ sync


@pytest.mark.django_db
def test_sync_creates_rows_with_sources_and_null_unknowns():
    counts = services.catalog_sync(actor="test")
    n = len(_file_rows())
    assert counts == {
        "created": n,
        "updated": 0,
        "unchanged": 0,
        "coefficients_created": counts["coefficients_created"],
    }
    assert DeviceModel.objects.filter(is_builtin=True).count() == n

    b3 = DeviceModel.objects.get(slug="ascend-910b3")
    assert b3.fp16_dense_tflops is None and b3.bf16_dense_tflops is None and b3.tdp_w is None
    assert b3.confidence == "low"
    assert b3.memory_mib == 65536 and b3.ai_cores == 20
    assert b3.product_names == ["910B3"]
    assert any("mind-cluster" in s for s in b3.sources)
    assert "INFERRED" in b3.notes
    assert b3.architecture == ""  # unknown text stays blank

    a100 = DeviceModel.objects.get(name="A100 80GB SXM4")
    assert a100.bf16_dense_tflops == Decimal("312") and a100.memory_mib == 81920
    assert a100.mig_profiles["7g.80gb"] == 1
    assert ChangeRecord.objects.filter(action="device_model.sync").count() == n


@pytest.mark.django_db
def test_sync_twice_changes_nothing(synced):
    records = ChangeRecord.objects.count()
    coefficients = ComputeCoefficient.objects.count()
    counts = services.catalog_sync(actor="test")
    assert counts == {"created": 0, "updated": 0, "unchanged": len(_file_rows()), "coefficients_created": 0}
    assert ChangeRecord.objects.count() == records
    assert ComputeCoefficient.objects.count() == coefficients


@pytest.mark.django_db
def test_sync_restores_a_changed_row_and_audits_the_difference(synced):
    DeviceModel.objects.filter(slug="t4").update(tdp_w=71, product_names=[])
    counts = services.catalog_sync(actor="test")
    assert counts["updated"] == 1 and counts["created"] == 0
    t4 = DeviceModel.objects.get(slug="t4")
    assert t4.tdp_w == 70 and t4.product_names == ["Tesla T4"]
    record = ChangeRecord.objects.filter(action="device_model.sync", object_id=str(t4.pk)).first()
    assert record.before == {"tdp_w": 71, "product_names": []}
    assert record.after == {"tdp_w": 70, "product_names": ["Tesla T4"]}


@pytest.mark.django_db
def test_sync_rejects_a_bad_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "schema_version: 1\ndevice_models:\n- {slug: x, name: X, vendor: nvidia, kind: gpu, tflops: 3}\n"
    )
    with pytest.raises(ValidationFailed, match="unknown keys"):
        services.catalog_sync(actor="test", path=bad)
    invalid = tmp_path / "invalid.yaml"
    invalid.write_text("schema_version: 1\ndevice_models:\n- {slug: x, name: X, vendor: nokia, kind: gpu}\n")
    with pytest.raises(ValidationFailed, match="catalog row x is invalid"):
        services.catalog_sync(actor="test", path=invalid)
    assert not DeviceModel.objects.exists()


# ------------------------------------------------------------------ coefficients


@pytest.mark.django_db
def test_sync_creates_default_coefficients_from_dense_tflops(synced):
    def coefficient(name):
        return selectors.coefficient_on(DeviceModel.objects.get(name=name), date(2024, 6, 1))

    assert coefficient("A100 80GB SXM4") == Decimal("1.0000")
    assert coefficient("H100 SXM5 80GB") == Decimal("3.1712")
    assert coefficient("T4") == Decimal("0.2083")  # 65 / 312, FP16 only
    assert coefficient("Ascend 910A") == Decimal("0.8205")  # 256 / 312
    row = ComputeCoefficient.objects.get(device_model__name="A100 80GB SXM4")
    assert row.basis == "tflops" and row.effective_from == date(2024, 1, 1)
    assert row.reason == services.SYNC_COEFFICIENT_REASON
    # Unknown TFLOPS: no coefficient at all.
    for name in ("A30", "Ascend 910B3", "DCU Z100/Z100L", "Gaudi2", "H200 NVL"):
        assert not ComputeCoefficient.objects.filter(device_model__name=name).exists(), name
    assert synced["coefficients_created"] == DeviceModel.objects.filter(coefficients__isnull=False).count()


@pytest.mark.django_db
def test_coefficient_on_picks_the_newest_row_in_force(synced, staff):
    t4 = DeviceModel.objects.get(slug="t4")
    services.compute_coefficient_set(
        device_model=t4,
        value=Decimal("0.25"),
        effective_from=date(2025, 6, 1),
        basis="policy",
        reason="inference fleet pricing",
        actor=staff,
    )
    assert selectors.coefficient_on(t4, date(2023, 12, 31)) is None
    assert selectors.coefficient_on(t4, date(2025, 5, 31)) == Decimal("0.2083")
    assert selectors.coefficient_on(t4, date(2025, 6, 1)) == Decimal("0.2500")
    assert selectors.coefficient_on(t4) == Decimal("0.2500")

    a30 = DeviceModel.objects.get(slug="a30")
    ids = list(DeviceModel.objects.values_list("pk", flat=True))
    with CaptureQueriesContext(connection) as ctx:
        bulk = selectors.coefficients_on(ids, date(2025, 6, 1))
    assert len(ctx.captured_queries) == 1
    assert bulk[t4.pk] == Decimal("0.2500") and a30.pk not in bulk
    assert selectors.coefficients_on(ids, date(2025, 5, 1))[t4.pk] == Decimal("0.2083")


@pytest.mark.django_db
def test_compute_coefficient_set_validates_and_audits(synced, staff):
    a30 = DeviceModel.objects.get(slug="a30")
    kwargs = {"device_model": a30, "effective_from": date(2025, 1, 1), "actor": staff}
    with pytest.raises(ValidationFailed, match="greater than 0"):
        services.compute_coefficient_set(value=Decimal("0"), basis="benchmark", reason="", **kwargs)
    with pytest.raises(ValidationFailed, match="needs a reason"):
        services.compute_coefficient_set(value=Decimal("0.5"), basis="policy", reason="  ", **kwargs)
    with pytest.raises(ValidationFailed, match="4 after the decimal point"):
        services.compute_coefficient_set(value=Decimal("0.12345"), basis="benchmark", reason="", **kwargs)

    created = services.compute_coefficient_set(
        value=Decimal("0.53"), basis="benchmark", reason="MLPerf-style run", **kwargs
    )
    assert created.created_by == staff and created.value == Decimal("0.53")
    record = ChangeRecord.objects.get(action="compute_coefficient.set", object_id=str(created.pk))
    assert record.actor == staff and record.after["value"] == "0.5300"

    with pytest.raises(Conflict, match="A30 already has a coefficient .* effective from 2025-01-01"):
        services.compute_coefficient_set(value=Decimal("0.6"), basis="benchmark", reason="", **kwargs)


# ------------------------------------------------------------------ matching tool names


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("vendor", "raw_name", "extra", "expected"),
    [
        # nvidia-smi product names (hardware-telemetry.md section 2)
        ("nvidia", "NVIDIA A100-SXM4-80GB", {"memory_mib": 81920}, "a100-80gb-sxm4"),
        ("nvidia", "NVIDIA H100 80GB HBM3", {"memory_mib": 81559}, "h100-sxm5-80gb"),
        ("nvidia", "NVIDIA A10", {"memory_mib": 23028}, "a10"),
        ("nvidia", "Tesla T4", {"memory_mib": 15360}, "t4"),
        ("nvidia", "Tesla V100-SXM2-32GB", {}, "v100-sxm2-32gb"),
        ("nvidia", "NVIDIA A100-PCIE-40GB", {}, "a100-40gb-pcie"),
        ("nvidia", "NVIDIA A100 80GB PCIe", {}, "a100-80gb-pcie"),
        # token matches
        ("nvidia", "  nvidia   a100-sxm4-80gb ", {}, "a100-80gb-sxm4"),
        ("nvidia", "Tesla V100-PCIE-16GB", {}, "v100-pcie-16gb"),
        ("nvidia", "NVIDIA A800-SXM4-80GB", {}, "a800-80gb-sxm4"),
        ("nvidia", "NVIDIA H100 PCIe", {}, "h100-pcie-80gb"),
        ("nvidia", "T4", {}, "t4"),
        # memory disambiguates when the name does not
        ("nvidia", "NVIDIA A100-SXM4", {"memory_mib": 81920}, "a100-80gb-sxm4"),
        ("nvidia", "NVIDIA A100-SXM4", {"memory_mib": 40536}, "a100-40gb-sxm4"),
        ("nvidia", "Tesla V100-SXM2", {"memory_mib": 16160}, "v100-sxm2-16gb"),
        # Ascend chip names
        ("huawei", "910B3", {}, "ascend-910b3"),
        ("huawei", "910B4", {}, "ascend-910b4"),
        ("huawei", "Ascend 910B2C", {}, "ascend-910b2c"),
        ("huawei", "910A-Ascend-V1", {}, "ascend-910a"),
        ("huawei", "910B3-Ascend-V1", {}, "ascend-910b3"),
        # other vendors
        ("hygon", "Z100L", {}, "dcu-z100-z100l"),
        ("hygon", "Z100", {}, "dcu-z100-z100l"),
        ("hygon", "K100", {}, "dcu-k100"),
        ("hygon", "K100 AI", {}, "dcu-k100-ai"),
        ("amd", "AMD Instinct MI300X", {}, "instinct-mi300x"),
        ("amd", "MI210", {}, "instinct-mi210"),
        ("cambricon", "MLU590", {}, "mlu590"),
        ("cambricon", "MLU370-X8", {}, "mlu370-x8"),
    ],
)
def test_device_model_match_finds_the_model(synced, vendor, raw_name, extra, expected):
    match = selectors.device_model_match(vendor=vendor, raw_name=raw_name, **extra)
    assert match is not None and match.slug == expected


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("vendor", "raw_name", "extra"),
    [
        ("nvidia", "NVIDIA GeForce RTX 4090", {}),  # unknown
        ("nvidia", "NVIDIA A100", {}),  # four A100 models
        ("nvidia", "NVIDIA A100", {"memory_mib": 81920}),  # still PCIe vs SXM4
        ("nvidia", "NVIDIA H100", {"memory_mib": 81559}),  # SXM5 vs PCIe
        ("nvidia", "NVIDIA A800-SXM4-40GB", {}),  # the catalog has no 40GB SXM4 A800
        ("nvidia", "NVIDIA H800 PCIe", {}),  # only the SXM5 H800 is known
        ("nvidia", "NVIDIA H800", {}),  # form factor not given: no guess
        ("nvidia", "NVIDIA A10", {"vendor_override": "huawei"}),  # wrong vendor
        ("huawei", "910B", {}),  # five 910B chips
        ("huawei", "310P3", {}),  # the catalog data does not name the 310P3 chip
        ("hygon", "K100 AI Liquid", {}),  # exporter name without catalog data
        ("amd", "MI250", {}),
        ("nvidia", "", {}),
        ("nvidia", None, {}),
    ],
)
def test_device_model_match_never_guesses(synced, vendor, raw_name, extra):
    vendor = extra.pop("vendor_override", vendor)
    assert selectors.device_model_match(vendor=vendor, raw_name=raw_name, **extra) is None


@pytest.mark.django_db
def test_device_model_match_by_pci_id_in_one_query(synced):
    with CaptureQueriesContext(connection) as ctx:
        by_nvidia_smi_id = selectors.device_model_match(
            vendor="nvidia", raw_name=None, pci_device_id="20B210DE"
        )
        by_hex = selectors.device_model_match(
            vendor="hygon", raw_name="unknown board", pci_device_id="0x6210"
        )
    assert by_nvidia_smi_id.slug == "a100-80gb-sxm4"
    assert by_hex.slug == "dcu-k100-ai"
    assert len(ctx.captured_queries) == 2  # one per call: the vendor's models, loaded once
    assert selectors.device_model_match(vendor="nvidia", raw_name=None, pci_device_id="0x20B0") is None


# ------------------------------------------------------------------ API


@pytest.mark.django_db
def test_catalog_api_requires_authentication(synced):
    response = _client().get("/api/catalog/device-models/")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "not_authenticated"
    assert _client().get("/api/catalog/compute-coefficients/").status_code == 401


@pytest.mark.django_db
def test_device_model_list_exposes_coefficient_sources_and_confidence(synced, user):
    response = _client(user).get("/api/catalog/device-models/", {"page_size": 100})
    assert response.status_code == 200
    body = response.json()
    assert body["count"] == len(_file_rows())
    rows = {r["slug"]: r for r in body["results"]}
    assert Decimal(rows["a100-80gb-sxm4"]["coefficient"]) == Decimal("1")
    assert Decimal(rows["h100-sxm5-80gb"]["coefficient"]) == Decimal("3.1712")
    assert rows["ascend-910b3"]["coefficient"] is None
    assert rows["ascend-910b3"]["fp16_dense_tflops"] is None
    assert rows["ascend-910b3"]["confidence"] == "low"
    assert rows["ascend-910b3"]["sources"] and rows["ascend-910b3"]["notes"]


@pytest.mark.django_db
def test_device_model_filters(synced, user):
    client = _client(user)
    huawei = client.get("/api/catalog/device-models/", {"vendor": "huawei"}).json()
    assert {r["vendor"] for r in huawei["results"]} == {"huawei"} and huawei["count"] == 7
    low_npu = client.get("/api/catalog/device-models/", {"kind": "npu", "confidence": "low"}).json()
    assert {r["name"] for r in low_npu["results"]} == {
        f"Ascend 910B{c}" for c in ("1", "2", "2C", "3", "4")
    } | {
        "P800 OAM",  # Kunlunxin XPU and Enflame GCU are filed as NPUs (issue 28)
        "S60",
    }
    a100 = client.get("/api/catalog/device-models/", {"name": "a100"}).json()
    assert a100["count"] == 4
    mig = client.get("/api/catalog/device-models/", {"feature": "vnpu"}).json()
    assert mig["count"] == 7


@pytest.mark.django_db
def test_device_model_list_query_count_does_not_grow_with_rows(synced, user, django_assert_max_num_queries):
    client = _client(user)
    with CaptureQueriesContext(connection) as small:
        assert client.get("/api/catalog/device-models/", {"page_size": 3}).status_code == 200
    with django_assert_max_num_queries(len(small.captured_queries)):
        response = client.get("/api/catalog/device-models/", {"page_size": 100})
    assert len(response.json()["results"]) == len(_file_rows())


@pytest.mark.django_db
def test_coefficient_list_any_user_create_staff_only(synced, user, staff, django_assert_max_num_queries):
    with django_assert_max_num_queries(3):
        listed = _client(user).get("/api/catalog/compute-coefficients/", {"page_size": 100})
    assert listed.status_code == 200 and listed.json()["count"] == ComputeCoefficient.objects.count()

    a30 = DeviceModel.objects.get(slug="a30")
    payload = {
        "device_model": a30.pk,
        "value": "0.5",
        "effective_from": "2025-01-01",
        "basis": "policy",
        "reason": "agreed with finance",
    }
    denied = _client(user).post("/api/catalog/compute-coefficients/", payload, format="json")
    assert denied.status_code == 403 and denied.json()["error"]["code"] == "permission_denied"

    staff_client = _client(staff)
    zero = staff_client.post("/api/catalog/compute-coefficients/", {**payload, "value": "0"}, format="json")
    assert zero.status_code == 400 and zero.json()["error"]["code"] == "invalid"
    assert "value" in zero.json()["error"]["details"]

    created = staff_client.post("/api/catalog/compute-coefficients/", payload, format="json")
    assert created.status_code == 201, created.json()
    assert created.json()["value"] == "0.5000" and created.json()["created_by"] == "ops"
    assert created.json()["device_model_name"] == "A30"

    duplicate = staff_client.post("/api/catalog/compute-coefficients/", payload, format="json")
    assert duplicate.status_code == 409
    assert "2025-01-01" in duplicate.json()["error"]["message"]

    current = _client(user).get(f"/api/catalog/device-models/{a30.pk}/").json()
    assert Decimal(current["coefficient"]) == Decimal("0.5")
    filtered = _client(user).get("/api/catalog/compute-coefficients/", {"device_model": a30.pk}).json()
    assert filtered["count"] == 1


# ------------------------------------------------------------------ command and admin


@pytest.mark.django_db
def test_load_catalog_command_prints_counts():
    out = StringIO()
    call_command("load_catalog", "--json", stdout=out)
    counts = json.loads(out.getvalue())
    assert counts["created"] == len(_file_rows()) and counts["updated"] == 0
    out = StringIO()
    call_command("load_catalog", stdout=out)
    assert f"0 created, 0 updated, {len(_file_rows())} unchanged" in out.getvalue()
    assert ChangeRecord.objects.filter(actor_label="command:load_catalog").exists()


@pytest.mark.django_db
def test_admin_lists_models_and_adds_coefficients_through_the_service(
    synced, client, django_assert_max_num_queries
):
    admin_user = get_user_model().objects.create_superuser(
        username="root", password="pw", email="r@example.com"
    )
    client.force_login(admin_user)
    with django_assert_max_num_queries(12):
        page = client.get("/admin/catalog/devicemodel/")
    assert page.status_code == 200 and b"A100 80GB SXM4" in page.content
    detail = client.get(f"/admin/catalog/devicemodel/{DeviceModel.objects.get(slug='t4').pk}/change/")
    assert detail.status_code == 200

    a30 = DeviceModel.objects.get(slug="a30")
    form = {
        "device_model": a30.pk,
        "value": "0.4",
        "effective_from": "2025-03-01",
        "basis": "policy",
        "reason": "",
    }
    refused = client.post("/admin/catalog/computecoefficient/add/", form)
    assert refused.status_code == 200 and b"needs a reason" in refused.content
    added = client.post("/admin/catalog/computecoefficient/add/", {**form, "reason": "pilot"})
    assert added.status_code == 302
    row = ComputeCoefficient.objects.get(device_model=a30)
    assert row.created_by == admin_user and row.value == Decimal("0.4")
    assert ChangeRecord.objects.filter(action="compute_coefficient.set", actor=admin_user).exists()
    again = client.post("/admin/catalog/computecoefficient/add/", {**form, "reason": "pilot"})
    assert again.status_code == 200 and b"already has a coefficient" in again.content
