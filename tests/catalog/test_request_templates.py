"""Device request templates (seed 000 §3.2): import, validation with paths, model resolution, export, API."""

from __future__ import annotations

import json

import pytest
import yaml

from apps.catalog import request_spec, selectors, services
from apps.catalog.models import DeviceRequestTemplate
from apps.core.errors import ParseFailed, ValidationFailed
from apps.core.models import ChangeRecord
from apps.demo.jobs import SEED_MIXED_TRAINING
from tests.catalog.conftest import api_as as _client

LIST_URL = "/api/catalog/request-templates/"
IMPORT_URL = f"{LIST_URL}import/"

# Seed 000 §3.2, the example as written there, laid out as proper YAML (the demo submits it too).
SEED_YAML = SEED_MIXED_TRAINING


def _doc(**spec_changes) -> dict:
    document = yaml.safe_load(SEED_YAML)
    document["spec"].update(spec_changes)
    return document


def _dump(document: dict) -> str:
    return yaml.safe_dump(document, sort_keys=False)


@pytest.fixture
def catalog(db):
    services.catalog_sync(actor="test")


def _import(text=SEED_YAML, actor="test"):
    return services.request_template_import(text=text, actor=actor)


# ------------------------------------------------------------------ import of the seed


def test_the_seed_document_imports_with_warnings_for_inexact_model_names(catalog):
    template, warnings = _import()
    assert template.import_outcome == "created"
    assert template.name == "mixed-train-template"
    assert template.api_version == "scheduling.example.io/v1"
    assert template.spec == {
        "devices": [
            {"type": "GPU", "model": "A100-NVL-40G", "count": 1, "shared": False, "needs": ["RDMA"]},
            {"type": "NPU", "model": "Ascend-910B", "count": 2, "shared": False, "needs": ["RDMA"]},
        ],
        "topologyPolicy": {"placement": "sameNode", "preferred": "sameSwitch"},
    }
    assert len(warnings) == 2
    assert warnings[0].startswith("spec.devices[0].model: 'A100-NVL-40G'")
    assert warnings[1].startswith("spec.devices[1].model: 'Ascend-910B'")
    assert template.warnings == warnings

    gpu, npu = template.resolution
    assert gpu["status"] == "family" and gpu["vendor"] == "nvidia"
    assert [c["slug"] for c in gpu["candidates"]] == ["a100-40gb-pcie", "a100-40gb-sxm4"]
    assert gpu["ignored_words"] == ["nvl"]
    assert npu["status"] == "family" and npu["family"] == "Ascend 910B" and npu["vendor"] == "huawei"
    assert {c["slug"] for c in npu["candidates"]} == {
        "ascend-910b1",
        "ascend-910b2",
        "ascend-910b2c",
        "ascend-910b3",
        "ascend-910b4",
    }
    record = ChangeRecord.objects.get(action="request_template.import")
    assert record.after["name"] == "mixed-train-template"


def test_import_is_idempotent_on_the_same_name_and_spec(catalog):
    first, _ = _import()
    again, warnings = _import()
    assert again.pk == first.pk
    assert again.import_outcome == "unchanged"
    assert len(warnings) == 2
    assert DeviceRequestTemplate.objects.count() == 1
    assert ChangeRecord.objects.filter(action="request_template.import").count() == 1


def test_a_new_spec_for_the_same_name_replaces_it_and_is_audited(catalog):
    first, _ = _import()
    changed = _doc()
    changed["spec"]["devices"][1]["count"] = 4
    again, _ = _import(_dump(changed))
    assert again.pk == first.pk and again.import_outcome == "updated"
    assert again.devices[1]["count"] == 4
    record = ChangeRecord.objects.filter(action="request_template.import").first()
    assert record.before["spec"]["devices"][1]["count"] == 2
    assert record.after["spec"]["devices"][1]["count"] == 4


def test_export_gives_back_the_seed_shape_exactly(catalog):
    template, _ = _import()
    text = services.request_template_export(template)
    assert text == SEED_YAML
    assert yaml.safe_load(text) == yaml.safe_load(SEED_YAML)
    assert json.loads(services.request_template_export(template, fmt="json")) == yaml.safe_load(SEED_YAML)
    again, _ = _import(text)
    assert again.import_outcome == "unchanged"


def test_our_own_api_version_is_accepted_and_kept(catalog):
    document = _doc()
    document["apiVersion"] = "suanchi.io/v1"
    document["metadata"] = {"name": "ours", "labels": {"team": "vision"}}
    template, _ = _import(_dump(document))
    assert template.api_version == "suanchi.io/v1"
    exported = yaml.safe_load(services.request_template_export(template))
    assert exported["apiVersion"] == "suanchi.io/v1"
    assert exported["metadata"] == {"name": "ours", "labels": {"team": "vision"}}


def test_defaults_are_filled_and_needs_are_normalised(catalog):
    document = _doc(devices=[{"type": "gpu", "count": 2, "needs": ["rdma", "NVLink", "rdma"]}])
    del document["spec"]["topologyPolicy"]
    template, warnings = _import(_dump(document))
    assert template.devices == [{"type": "GPU", "count": 2, "shared": False, "needs": ["RDMA", "NVLink"]}]
    assert template.topology_policy == {"placement": "any"}
    assert template.resolution[0]["status"] == "any"
    assert warnings == []


# ------------------------------------------------------------------ validation with paths


@pytest.mark.parametrize("count", [0, -1, "2", 1.5, True, None])
def test_a_bad_count_is_reported_with_its_path(catalog, count):
    document = _doc()
    if count is None:
        del document["spec"]["devices"][1]["count"]
    else:
        document["spec"]["devices"][1]["count"] = count
    with pytest.raises(ValidationFailed) as excinfo:
        _import(_dump(document))
    assert "spec.devices[1].count" in excinfo.value.details
    assert "spec.devices[1].count: " in excinfo.value.message
    assert "positive integer" in excinfo.value.message
    assert not DeviceRequestTemplate.objects.exists()


@pytest.mark.parametrize(
    ("mutate", "path", "text"),
    [
        (lambda d: d.update(kind="Pod"), "kind", "must be DeviceRequestTemplate"),
        (lambda d: d.pop("kind"), "kind", "must be DeviceRequestTemplate"),
        (lambda d: d.update(apiVersion="v1"), "apiVersion", "suanchi.io/v1"),
        (lambda d: d["metadata"].pop("name"), "metadata.name", "required"),
        (lambda d: d["metadata"].update(name="Mixed_Train"), "metadata.name", "DNS-1123"),
        (lambda d: d["spec"]["devices"][0].update(type="TPU"), "spec.devices[0].type", "unknown device type"),
        (lambda d: d["spec"]["devices"][0].update(shared="no"), "spec.devices[0].shared", "true or false"),
        (lambda d: d["spec"]["devices"][0].update(needs="RDMA"), "spec.devices[0].needs", "list"),
        (lambda d: d["spec"]["devices"][0].update(colour="red"), "spec.devices[0].colour", "unknown field"),
        (lambda d: d["spec"].update(devices=[]), "spec.devices", "non-empty list"),
        (
            lambda d: d["spec"]["topologyPolicy"].update(placement="sameRack"),
            "spec.topologyPolicy.placement",
            "sameNode",
        ),
        (
            lambda d: d["spec"]["topologyPolicy"].update(preferred="nearby"),
            "spec.topologyPolicy.preferred",
            "sameNUMA",
        ),
        (lambda d: d.pop("spec"), "spec", "required"),
    ],
)
def test_invalid_documents_name_the_path(catalog, mutate, path, text):
    document = _doc()
    mutate(document)
    with pytest.raises(ValidationFailed) as excinfo:
        _import(_dump(document))
    assert path in excinfo.value.details, excinfo.value.details
    assert text in " ".join(excinfo.value.details[path])


def test_every_problem_is_reported_at_once(catalog):
    document = _doc()
    document["kind"] = "Pod"
    document["spec"]["devices"][0]["count"] = 0
    document["spec"]["devices"][1]["type"] = "XPU"
    with pytest.raises(ValidationFailed) as excinfo:
        _import(_dump(document))
    assert set(excinfo.value.details) == {"kind", "spec.devices[0].count", "spec.devices[1].type"}


def test_malformed_yaml_names_the_line(catalog):
    text = SEED_YAML.replace("      count: 2\n", "      count: [2\n")
    with pytest.raises(ParseFailed) as excinfo:
        _import(text)
    assert excinfo.value.code == "parse_error"
    assert "line " in excinfo.value.message
    assert excinfo.value.details["line"] >= 14


def test_a_document_that_is_not_a_mapping_is_refused(catalog):
    with pytest.raises(ValidationFailed):
        _import("- just\n- a list\n")
    with pytest.raises(ParseFailed):
        _import("   \n")


def test_model_clean_checks_the_spec():
    template = DeviceRequestTemplate(name="x", slug="x", spec={"devices": [{"type": "GPU", "count": 0}]})
    with pytest.raises(Exception, match=r"spec.devices\[0\].count"):
        template.clean()


# ------------------------------------------------------------------ model resolution


@pytest.mark.parametrize(
    ("device_type", "name", "slug"),
    [
        ("GPU", "A100 80GB SXM4", "a100-80gb-sxm4"),
        ("GPU", "NVIDIA A100-SXM4-80GB", "a100-80gb-sxm4"),
        ("GPU", "Tesla T4", "t4"),
        ("GPU", "t4", "t4"),
        ("NPU", "Ascend 910B3", "ascend-910b3"),
        ("NPU", "910B3", "ascend-910b3"),
        ("DCU", "K100_AI", "dcu-k100-ai"),
    ],
)
def test_exact_names_resolve_to_one_model(catalog, device_type, name, slug):
    result = selectors.request_model_resolve(device_type=device_type, model_name=name)
    assert result["status"] == "exact", result
    assert result["device_model"]["slug"] == slug
    assert selectors.request_model_warning("p", result) is None


def test_unknown_names_are_unresolved_with_a_warning(catalog):
    document = _doc()
    document["spec"]["devices"][0]["model"] = "Quantum-X9000"
    document["spec"]["devices"][1]["model"] = "A100 80GB SXM4"  # a GPU asked for as an NPU
    template, warnings = _import(_dump(document))
    assert [r["status"] for r in template.resolution] == ["unresolved", "unresolved"]
    assert "matches no GPU model" in warnings[0] and "Quantum-X9000" in warnings[0]
    assert "the catalog has it as GPU, not NPU" in warnings[1]
    assert template.devices[0]["model"] == "Quantum-X9000"  # kept as written


def test_a_loose_name_with_one_candidate_is_inferred_with_a_warning(catalog):
    result = selectors.request_model_resolve(device_type="GPU", model_name="A100-PCIE-80G-custom")
    assert result["status"] == "inferred"
    assert result["device_model"]["slug"] == "a100-80gb-pcie"
    assert "custom" in selectors.request_model_warning("spec.devices[0].model", result)


def test_unknown_needs_are_kept_with_a_warning(catalog):
    document = _doc()
    document["spec"]["devices"][0]["needs"] = ["RDMA", "LiquidCooling"]
    template, warnings = _import(_dump(document))
    assert template.devices[0]["needs"] == ["RDMA", "LiquidCooling"]
    assert any("spec.devices[0].needs: 'LiquidCooling'" in w for w in warnings)


def test_render_keeps_lists_of_scalars_inline():
    text = request_spec.yaml_dump({"a": {"b": [1, "x"], "c": [{"d": 1}]}})
    assert "b: [1, x]" in text
    assert "  c:\n    - d: 1" in text


# ------------------------------------------------------------------ API


def test_api_import_yaml_body_by_staff(catalog, staff):
    response = _client(staff).generic("POST", IMPORT_URL, SEED_YAML, content_type="application/yaml")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["outcome"] == "created"
    assert len(body["warnings"]) == 2
    assert body["template"]["name"] == "mixed-train-template"
    assert body["template"]["resolution"][1]["family"] == "Ascend 910B"


def test_api_import_json_wrapped_and_plain_document(catalog, staff):
    client = _client(staff)
    response = client.post(IMPORT_URL, {"yaml": SEED_YAML}, format="json")
    assert response.status_code == 201
    response = client.post(IMPORT_URL, yaml.safe_load(SEED_YAML), format="json")
    assert response.status_code == 200 and response.json()["outcome"] == "unchanged"
    response = client.generic("POST", IMPORT_URL, SEED_YAML, content_type="text/yaml")
    assert response.status_code == 200


def test_api_import_is_staff_only(catalog, member):
    response = _client(member).post(IMPORT_URL, {"yaml": SEED_YAML}, format="json")
    assert response.status_code == 403
    assert _client().post(IMPORT_URL, {"yaml": SEED_YAML}, format="json").status_code in (401, 403)


def test_api_malformed_yaml_is_400_naming_the_line(catalog, staff):
    text = SEED_YAML.replace("  name: mixed-train-template\n", "  name: mixed-train-template\n   bad: [\n")
    response = _client(staff).generic("POST", IMPORT_URL, text, content_type="application/yaml")
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "parse_error"
    assert "line" in error["message"]
    assert error["details"]["line"] >= 5


def test_api_bad_count_is_400_with_the_path(catalog, staff):
    text = SEED_YAML.replace("      count: 2\n", "      count: -3\n")
    response = _client(staff).post(IMPORT_URL, {"yaml": text}, format="json")
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["details"] == {"spec.devices[1].count": ["must be a positive integer"]}
    assert error["message"] == "spec.devices[1].count: must be a positive integer"


def test_api_import_without_a_document_is_400(catalog, staff):
    response = _client(staff).post(IMPORT_URL, {"text": "x"}, format="json")
    assert response.status_code == 400
    assert "yaml" in response.json()["error"]["details"]


def test_api_list_retrieve_export_and_delete(catalog, member, staff):
    template, _ = _import()
    client = _client(member)
    listing = client.get(LIST_URL)
    assert listing.status_code == 200
    assert [row["name"] for row in listing.json()["results"]] == ["mixed-train-template"]
    detail = client.get(f"{LIST_URL}{template.pk}/").json()
    assert detail["warnings"] == template.warnings
    exported = client.get(f"{LIST_URL}{template.pk}/export/")
    assert exported.status_code == 200
    assert exported["Content-Type"].startswith("application/yaml")
    assert exported.content.decode() == SEED_YAML
    as_json = client.get(f"{LIST_URL}{template.pk}/export/", {"format": "json"})
    assert json.loads(as_json.content) == yaml.safe_load(SEED_YAML)
    assert client.delete(f"{LIST_URL}{template.pk}/").status_code == 403
    assert _client(staff).delete(f"{LIST_URL}{template.pk}/").status_code == 204
    assert ChangeRecord.objects.filter(action="request_template.delete").exists()
