"""Compute templates (算力模板): validation against the card, built-ins, compute units, describe, API."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
import yaml
from django.db import IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import translation

from apps.catalog import partitions, selectors, services
from apps.catalog.models import ComputeTemplate, DeviceModel
from apps.core.errors import Conflict, ValidationFailed
from apps.core.models import ChangeRecord
from tests.catalog.conftest import api_as as _client

LIST_URL = "/api/catalog/compute-templates/"


@pytest.fixture(autouse=True)
def _english():
    # The messages asserted below are the English ones, whatever an earlier request activated.
    with translation.override("en"):
        yield


@pytest.fixture
def catalog(db):
    services.catalog_sync(actor="test")
    return {m.slug: m for m in DeviceModel.objects.all()}


@pytest.fixture
def builtins(catalog):
    return services.compute_template_sync_builtin(actor="test")


def _create(catalog, slug="t4", **fields):
    fields.setdefault("name", "custom")
    return services.compute_template_create(actor="test", device_model=catalog[slug], **fields)


def _field_errors(excinfo) -> dict:
    assert isinstance(excinfo.value.details, dict), excinfo.value.details
    return excinfo.value.details


# ------------------------------------------------------------------ profile arithmetic


def test_mig_profile_numbers_come_from_the_name_and_the_cards_slices(catalog):
    a100 = catalog["a100-80gb-sxm4"]
    profile = partitions.partition_profile(a100, "3g.40gb")
    assert profile.kind == "mig"
    assert profile.memory_mib == 40 * 1024
    assert profile.compute_share == Decimal("42.86")
    assert profile.max_instances == 2
    assert profile.default_instances == 2
    assert "figure in the profile name" in profile.basis()
    # A30 has 4 compute slices, not 7: its 4g.24gb is the whole card.
    a30 = partitions.partition_profile(catalog["a30"], "4g.24gb")
    assert a30.compute_share == Decimal("100.00")
    assert partitions.partition_profile(catalog["a30"], "2g.12gb").compute_share == Decimal("50.00")


def test_vnpu_profile_share_is_ai_cores_over_the_models_cores(catalog):
    profile = partitions.partition_profile(catalog["ascend-910b3"], "vir05_1c_16g")
    assert profile.kind == "vnpu"
    assert profile.memory_mib == 16 * 1024
    assert profile.compute_share == Decimal("25.00")
    assert profile.max_instances == 4


def test_nominal_mig_memory_lowers_the_instance_count_where_it_would_overflow_the_card(catalog):
    profile = partitions.partition_profile(catalog["h100-nvl-94gb"], "1g.24gb")
    assert profile.max_instances == 4  # NVIDIA's count
    assert profile.fitting_instances == 3  # 4 x 24 GiB > 94 GiB
    assert profile.default_instances == 3
    assert "only 3 fit" in profile.basis()


def test_unknown_profile_names_the_known_ones(catalog):
    with pytest.raises(
        partitions.ProfileError,
        match=r"lists: 1g\.5gb, 1g\.5gb\+me, 1g\.10gb, 2g\.10gb, 3g\.20gb, 4g\.20gb, 7g\.40gb$",
    ):
        partitions.partition_profile(catalog["a100-40gb-pcie"], "3g.80gb")
    with pytest.raises(partitions.ProfileError, match="no hardware partition profiles"):
        partitions.partition_profile(catalog["t4"], "1g.5gb")


# ------------------------------------------------------------------ built-in templates


def test_builtin_sync_generates_whole_mig_vnpu_and_soft_slices(builtins, catalog):
    assert builtins["created"] == ComputeTemplate.objects.filter(is_builtin=True).count() > 100
    assert builtins["updated"] == builtins["unchanged"] == 0

    mig = ComputeTemplate.objects.get(device_model=catalog["a100-80gb-sxm4"], partition_profile="3g.40gb")
    assert (mig.memory_mib, mig.compute_share, mig.max_instances, mig.isolation) == (
        40960,
        Decimal("42.86"),
        2,
        "hard",
    )
    whole = ComputeTemplate.objects.get(slug="a100-80gb-sxm4-whole")
    assert (whole.memory_mib, whole.compute_share, whole.max_instances) == (81920, Decimal("100.00"), 1)

    t4 = {t.slug: t for t in ComputeTemplate.objects.filter(device_model=catalog["t4"])}
    assert set(t4) == {"t4-whole", "t4-half-shared", "t4-quarter-shared"}
    half, quarter = t4["t4-half-shared"], t4["t4-quarter-shared"]
    assert (half.memory_mib, half.compute_share, half.max_instances, half.isolation) == (
        8192,
        Decimal("50.00"),
        2,
        "shared",
    )
    assert (quarter.memory_mib, quarter.compute_share, quarter.max_instances) == (4096, Decimal("25.00"), 4)

    vnpu = ComputeTemplate.objects.get(device_model=catalog["ascend-910b3"], partition_profile="vir05_1c_16g")
    assert (vnpu.memory_mib, vnpu.compute_share, vnpu.max_instances, vnpu.isolation) == (
        16384,
        Decimal("25.00"),
        4,
        "hard",
    )
    # Half of 141 GiB is rounded down to whole GiB.
    assert ComputeTemplate.objects.get(slug="h200-sxm-141gb-half-shared").memory_mib == 70 * 1024
    assert ComputeTemplate.objects.get(slug="a100-80gb-sxm4-mig-1g-10gb-me").max_instances == 1


def test_builtin_sync_skips_cards_of_unknown_memory_and_vnpus_without_memory(builtins, catalog):
    assert not ComputeTemplate.objects.filter(device_model=catalog["h200-nvl"]).exists()
    assert (
        not ComputeTemplate.objects.filter(device_model=catalog["ascend-910a"])
        .exclude(partition_profile="")
        .exists()
    )
    assert any("H200 NVL" in reason and "memory unknown" in reason for reason in builtins["skipped"])
    assert any("vir02" in reason for reason in builtins["skipped"])


def test_builtin_sync_is_idempotent(builtins):
    records = ChangeRecord.objects.filter(action="compute_template.sync").count()
    assert records == builtins["created"]
    again = services.compute_template_sync_builtin(actor="test")
    assert again["created"] == again["updated"] == 0
    assert again["unchanged"] == builtins["created"]
    assert ComputeTemplate.objects.count() == builtins["created"]
    assert ChangeRecord.objects.filter(action="compute_template.sync").count() == records


def test_builtin_sync_repairs_a_drifted_builtin_and_leaves_custom_slugs_alone(builtins, catalog):
    ComputeTemplate.objects.filter(slug="t4-half-shared").update(description="edited by hand")
    ComputeTemplate.objects.filter(slug="l20-whole", is_builtin=True).delete()
    services.compute_template_create(
        actor="test",
        device_model=catalog["a10"],
        name="mine",
        slug="l20-whole",
        memory_mib=4096,
        compute_share=10,
    )
    again = services.compute_template_sync_builtin(actor="test")
    assert again["updated"] == 1
    assert ComputeTemplate.objects.get(slug="t4-half-shared").description.startswith("Built-in")
    assert any("l20-whole" in reason for reason in again["skipped"])
    assert ComputeTemplate.objects.get(slug="l20-whole").is_builtin is False


# ------------------------------------------------------------------ compute units and describe


def test_compute_units_are_the_coefficient_times_the_share(builtins, catalog):
    template = selectors.compute_template_list().get(slug="a100-80gb-sxm4-mig-3g-40gb")
    assert template.current_coefficient == Decimal("1.0000")
    expected = (Decimal(3) / Decimal(7) * Decimal("1.0")).quantize(Decimal("0.0001"))
    assert template.compute_units(template.current_coefficient) == expected == Decimal("0.4286")
    t4 = selectors.compute_template_list().get(slug="t4-half-shared")
    assert t4.compute_units(t4.current_coefficient) == (t4.current_coefficient * Decimal("0.5")).quantize(
        Decimal("0.0001")
    )


def test_compute_units_are_unknown_without_a_coefficient(builtins):
    template = selectors.compute_template_list().get(slug="ascend-910b3-vnpu-vir05_1c_16g")
    assert template.current_coefficient is None
    assert template.compute_units(template.current_coefficient) is None
    assert selectors.template_describe(template)["status"]["computeUnits"] is None


def test_describe_renders_yaml_and_json_that_parse_back(builtins):
    template = selectors.compute_template_list().get(slug="a100-80gb-sxm4-mig-3g-40gb")
    document = selectors.template_describe(template)
    assert document["kind"] == "ComputeTemplate"
    assert document["spec"]["partition"] == {
        "type": "mig",
        "profile": "3g.40gb",
        "basis": document["spec"]["partition"]["basis"],
    }
    assert document["spec"]["kubernetesResources"] == {"nvidia.com/mig-3g.40gb": 1}
    assert document["status"]["computeUnits"] == "0.4286"
    assert yaml.safe_load(selectors.template_render(document, "yaml")) == document
    assert json.loads(selectors.template_render(document, "json")) == document
    vnpu = selectors.compute_template_list().get(slug="ascend-910b3-vnpu-vir05_1c_16g")
    assert selectors.template_describe(vnpu)["spec"]["kubernetesResources"] == {
        "huawei.com/Ascend910-5c.1cpu.16g": 1
    }


# ------------------------------------------------------------------ validation (services)


def test_it_rejects_a_template_larger_than_its_card(catalog):
    with pytest.raises(ValidationFailed) as excinfo:
        _create(catalog, memory_mib=17 * 1024, compute_share=50)
    assert "larger than its card" in _field_errors(excinfo)["memory_mib"][0]


def test_it_rejects_instances_times_memory_over_the_card(catalog):
    with pytest.raises(ValidationFailed) as excinfo:
        _create(catalog, memory_mib=6 * 1024, compute_share=30, max_instances=3)
    assert "exceed" in _field_errors(excinfo)["max_instances"][0]
    ok = _create(catalog, memory_mib=4 * 1024, compute_share=30, max_instances=4, isolation="shared")
    assert ok.max_instances == 4


@pytest.mark.parametrize("share", [0, Decimal("0.5"), 120, -5])
def test_it_rejects_a_compute_share_outside_1_to_100(catalog, share):
    with pytest.raises(ValidationFailed) as excinfo:
        _create(catalog, memory_mib=4096, compute_share=share)
    assert "1 to 100" in _field_errors(excinfo)["compute_share"][0]


def test_it_rejects_memory_that_is_not_whole_gib(catalog):
    with pytest.raises(ValidationFailed) as excinfo:
        _create(catalog, memory_mib=1500, compute_share=10)
    assert "whole GiB" in _field_errors(excinfo)["memory_mib"][0]


def test_it_rejects_an_unknown_mig_profile_for_that_model(catalog):
    with pytest.raises(ValidationFailed) as excinfo:
        _create(catalog, slug="a100-40gb-pcie", partition_profile="3g.40gb")
    message = _field_errors(excinfo)["partition_profile"][0]
    assert "no partition profile '3g.40gb'" in message and "3g.20gb" in message


def test_it_rejects_a_profile_on_a_card_without_partitions(catalog):
    with pytest.raises(ValidationFailed) as excinfo:
        _create(catalog, partition_profile="1g.10gb", memory_mib=4096, compute_share=10)
    assert "no hardware partition profiles" in _field_errors(excinfo)["partition_profile"][0]


def test_a_profile_fixes_memory_share_and_the_instance_bound(catalog):
    with pytest.raises(ValidationFailed) as excinfo:
        _create(
            catalog,
            slug="a100-80gb-sxm4",
            partition_profile="3g.40gb",
            memory_mib=30 * 1024,
            compute_share=50,
            max_instances=3,
        )
    errors = _field_errors(excinfo)
    assert "fixes the memory at 40 GiB" in errors["memory_mib"][0]
    assert "42.86" in errors["compute_share"][0]
    assert "at most 2" in errors["max_instances"][0]


def test_a_profile_is_always_hard_isolated(catalog):
    with pytest.raises(ValidationFailed) as excinfo:
        _create(catalog, slug="a100-80gb-sxm4", partition_profile="3g.40gb", isolation="shared")
    assert "isolation" in _field_errors(excinfo)


def test_a_profile_fills_in_what_it_fixes(catalog):
    template = _create(catalog, slug="ascend-910b3", name="half npu", partition_profile="vir10_3c_32g")
    assert (template.memory_mib, template.compute_share, template.max_instances) == (
        32768,
        Decimal("50.00"),
        2,
    )
    assert template.slug == "ascend-910b3-half-npu"


def test_a_card_of_unknown_memory_cannot_get_a_template(catalog):
    with pytest.raises(ValidationFailed) as excinfo:
        _create(catalog, slug="h200-nvl", memory_mib=10 * 1024, compute_share=10)
    assert "does not know the memory" in _field_errors(excinfo)["memory_mib"][0]


def test_names_are_unique_per_model(catalog):
    _create(catalog, name="inference", memory_mib=4096, compute_share=30)
    with pytest.raises(ValidationFailed) as excinfo:
        _create(catalog, name="inference", memory_mib=4096, compute_share=30)
    assert "name" in _field_errors(excinfo)
    other = _create(catalog, slug="a10", name="inference", memory_mib=4096, compute_share=30)
    assert other.slug == "a10-inference"


@pytest.mark.parametrize(
    ("changes", "constraint"),
    [
        ({"compute_share": Decimal("120")}, "catalog_computetemplate_share_range"),
        ({"compute_share": Decimal("0")}, "catalog_computetemplate_share_range"),
        ({"memory_mib": 1500}, "catalog_computetemplate_memory_whole_gib"),
        ({"memory_mib": 0}, "catalog_computetemplate_memory_positive"),
        ({"max_instances": 0}, "catalog_computetemplate_instances_positive"),
        ({"partition_profile": "3g.40gb", "isolation": "shared"}, "catalog_computetemplate_profile_hard"),
        ({"isolation": "loose"}, "catalog_computetemplate_isolation_valid"),
    ],
)
def test_database_constraints_back_up_the_rules(catalog, changes, constraint):
    template = _create(catalog, memory_mib=4096, compute_share=30)
    with pytest.raises(IntegrityError, match=constraint), transaction.atomic():
        ComputeTemplate.objects.filter(pk=template.pk).update(**changes)


# ------------------------------------------------------------------ update / retire / delete


def test_builtins_are_read_only(builtins):
    template = ComputeTemplate.objects.get(slug="t4-whole")
    with pytest.raises(Conflict) as excinfo:
        services.compute_template_update(template=template, actor="test", compute_share=Decimal("50"))
    assert excinfo.value.status_code == 409
    assert "read-only" in excinfo.value.message
    with pytest.raises(Conflict):
        services.compute_template_delete(template=template, actor="test")


def test_update_revalidates_and_audits(catalog, staff):
    template = _create(catalog, memory_mib=4096, compute_share=30, max_instances=1)
    with pytest.raises(ValidationFailed):
        services.compute_template_update(template=template, actor=staff, memory_mib=32 * 1024)
    updated = services.compute_template_update(
        template=template, actor=staff, memory_mib=8192, max_instances=2
    )
    assert (updated.memory_mib, updated.max_instances) == (8192, 2)
    record = ChangeRecord.objects.filter(action="compute_template.update").get()
    assert record.actor == staff
    assert record.before == {"memory_mib": 4096, "max_instances": 1}
    assert record.after == {"memory_mib": 8192, "max_instances": 2}
    # Nothing changed: no record.
    services.compute_template_update(template=template, actor=staff, memory_mib=8192)
    assert ChangeRecord.objects.filter(action="compute_template.update").count() == 1


def test_changing_the_profile_takes_its_numbers_unless_given(catalog):
    template = _create(catalog, slug="a100-80gb-sxm4", name="slice", partition_profile="3g.40gb")
    updated = services.compute_template_update(template=template, actor="test", partition_profile="1g.10gb")
    assert (updated.memory_mib, updated.compute_share, updated.max_instances) == (10240, Decimal("14.29"), 7)
    with pytest.raises(ValidationFailed) as excinfo:
        services.compute_template_update(
            template=template, actor="test", partition_profile="2g.20gb", memory_mib=10240
        )
    assert "fixes the memory at 20 GiB" in _field_errors(excinfo)["memory_mib"][0]


def test_create_is_audited_with_the_user(catalog, staff):
    template = services.compute_template_create(
        actor=staff, device_model=catalog["t4"], name="x", memory_mib=4096, compute_share=25
    )
    assert template.created_by == staff
    record = ChangeRecord.objects.get(action="compute_template.create")
    assert record.after["memory_mib"] == 4096 and record.after["compute_share"] == "25.00"


def test_retire_then_read_only_and_delete_when_unused(catalog):
    template = _create(catalog, memory_mib=4096, compute_share=30)
    services.compute_template_retire(template=template, actor="test", reason="replaced")
    template.refresh_from_db()
    assert template.is_retired
    with pytest.raises(Conflict):
        services.compute_template_update(template=template, actor="test", name="again")
    services.compute_template_delete(template=template, actor="test")
    assert not ComputeTemplate.objects.filter(pk=template.pk).exists()
    assert ChangeRecord.objects.filter(action="compute_template.delete", object_id=str(template.pk)).exists()


# ------------------------------------------------------------------ API


def test_api_lists_templates_with_compute_units_for_any_user(builtins, member):
    response = _client(member).get(LIST_URL, {"device_model_slug": "a100-80gb-sxm4", "partition": "mig"})
    assert response.status_code == 200
    rows = {row["slug"]: row for row in response.json()["results"]}
    row = rows["a100-80gb-sxm4-mig-3g-40gb"]
    assert row["compute_units"] == "0.4286"
    assert row["coefficient"] == "1.0000"
    assert row["memory_gib"] == 40
    assert row["partition_type"] == "mig"
    assert row["definition"]["spec"]["maxInstancesPerCard"] == 2
    assert all(r["partition_type"] == "mig" for r in rows.values())


def test_api_requires_a_user(builtins):
    assert _client().get(LIST_URL).status_code in (401, 403)


def test_api_list_query_count_is_flat(builtins, member):
    client = _client(member)
    with CaptureQueriesContext(connection) as few:
        assert client.get(LIST_URL, {"page_size": 5}).status_code == 200
    with CaptureQueriesContext(connection) as many:
        response = client.get(LIST_URL, {"page_size": 200})
    assert len(response.json()["results"]) == 200
    assert len(many) == len(few) <= 3


def test_api_filters(builtins, member):
    client = _client(member)
    shared = client.get(LIST_URL, {"isolation": "shared", "page_size": 500}).json()["results"]
    assert shared and all(r["isolation"] == "shared" and r["partition_profile"] == "" for r in shared)
    huawei = client.get(LIST_URL, {"vendor": "huawei", "page_size": 500}).json()["results"]
    assert huawei and all(r["vendor"] == "huawei" for r in huawei)


def test_api_create_by_staff(catalog, staff):
    body = {
        "device_model": catalog["t4"].pk,
        "name": "t4 inference",
        "memory_gib": 4,
        "compute_share": "30",
        "isolation": "shared",
        "max_instances": 4,
    }
    response = _client(staff).post(LIST_URL, body, format="json")
    assert response.status_code == 201, response.json()
    data = response.json()
    assert data["memory_mib"] == 4096 and data["compute_share"] == "30.00"
    assert data["compute_units"] is not None


def test_api_create_is_refused_to_members(catalog, member):
    body = {"device_model": catalog["t4"].pk, "name": "x", "memory_gib": 4, "compute_share": "30"}
    assert _client(member).post(LIST_URL, body, format="json").status_code == 403


@pytest.mark.parametrize(
    ("body", "field", "text"),
    [
        ({"memory_gib": 17, "compute_share": "50"}, "memory_gib", "larger than its card"),
        ({"memory_mib": 17408, "compute_share": "50"}, "memory_mib", "larger than its card"),
        ({"memory_gib": 4, "compute_share": "0"}, "compute_share", "1 to 100"),
        ({"memory_gib": 4, "compute_share": "120"}, "compute_share", "1 to 100"),
        ({"memory_gib": 6, "compute_share": "20", "max_instances": 3}, "max_instances", "exceed"),
        ({"partition_profile": "3g.40gb"}, "partition_profile", "no hardware partition profiles"),
    ],
)
def test_api_bad_input_is_400_with_field_errors(catalog, staff, body, field, text):
    response = _client(staff).post(
        LIST_URL, {"device_model": catalog["t4"].pk, "name": "bad", **body}, format="json"
    )
    assert response.status_code == 400, response.json()
    error = response.json()["error"]
    assert error["code"] == "invalid"
    assert text in error["details"][field][0]
    assert not ComputeTemplate.objects.exists()


def test_api_unknown_mig_profile_for_the_model_is_400(catalog, staff):
    body = {"device_model": catalog["a100-80gb-sxm4"].pk, "name": "bad", "partition_profile": "3g.20gb"}
    response = _client(staff).post(LIST_URL, body, format="json")
    assert response.status_code == 400
    assert "3g.40gb" in response.json()["error"]["details"]["partition_profile"][0]


def test_api_update_builtin_is_409_and_custom_is_patched(builtins, catalog, staff):
    client = _client(staff)
    builtin = ComputeTemplate.objects.get(slug="t4-whole")
    response = client.patch(f"{LIST_URL}{builtin.pk}/", {"name": "mine"}, format="json")
    assert response.status_code == 409
    assert "read-only" in response.json()["error"]["message"]
    custom = _create(catalog, memory_mib=4096, compute_share=30, max_instances=1)
    response = client.patch(f"{LIST_URL}{custom.pk}/", {"memory_gib": 8}, format="json")
    assert response.status_code == 200, response.json()
    assert response.json()["memory_mib"] == 8192
    response = client.patch(f"{LIST_URL}{custom.pk}/", {"memory_gib": 80}, format="json")
    assert response.status_code == 400
    assert "memory_gib" in response.json()["error"]["details"]


def test_api_retire_and_delete(catalog, staff, member):
    custom = _create(catalog, memory_mib=4096, compute_share=30)
    assert _client(member).post(f"{LIST_URL}{custom.pk}/retire/").status_code == 403
    response = _client(staff).post(f"{LIST_URL}{custom.pk}/retire/", {"reason": "old"}, format="json")
    assert response.status_code == 200 and response.json()["is_retired"] is True
    assert _client(staff).delete(f"{LIST_URL}{custom.pk}/").status_code == 204


def test_api_describe_yaml_and_json(builtins, member):
    template = ComputeTemplate.objects.get(slug="a100-80gb-sxm4-mig-3g-40gb")
    client = _client(member)
    response = client.get(f"{LIST_URL}{template.pk}/describe/")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/yaml")
    document = yaml.safe_load(response.content.decode())
    assert document["spec"]["partition"]["profile"] == "3g.40gb"
    assert document["status"]["computeUnits"] == "0.4286"
    response = client.get(f"{LIST_URL}{template.pk}/describe/", {"format": "json", "download": "1"})
    assert response["Content-Type"].startswith("application/json")
    assert "attachment" in response["Content-Disposition"]
    assert json.loads(response.content) == document
    bad = client.get(f"{LIST_URL}{template.pk}/describe/", {"format": "xml"})
    assert bad.status_code == 400 and "format" in bad.json()["error"]["details"]


def test_api_preview_validates_without_saving(catalog, member):
    client = _client(member)
    ok = client.post(
        f"{LIST_URL}preview/",
        {"device_model": catalog["a100-80gb-sxm4"].pk, "name": "p", "partition_profile": "3g.40gb"},
        format="json",
    )
    assert ok.status_code == 200
    data = ok.json()
    assert data["valid"] is True and data["errors"] == {}
    assert yaml.safe_load(data["yaml"])["spec"]["memoryGiB"] == 40
    bad = client.post(
        f"{LIST_URL}preview/",
        {"device_model": catalog["t4"].pk, "name": "p", "memory_gib": 32, "compute_share": "120"},
        format="json",
    )
    assert bad.status_code == 200
    errors = bad.json()["errors"]
    assert bad.json()["valid"] is False
    assert "memory_gib" in errors and "compute_share" in errors
    missing = client.post(f"{LIST_URL}preview/", {"name": "p"}, format="json").json()
    assert missing["valid"] is False and "device_model" in missing["errors"]
    assert not ComputeTemplate.objects.exists()
