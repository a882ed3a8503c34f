"""Catalog pages: device models, compute templates (list, detail, editor) and request templates."""

from __future__ import annotations

import pytest
import yaml
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.staticfiles import finders
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import translation

from apps.catalog import services
from apps.catalog.models import ComputeTemplate, DeviceModel, DeviceRequestTemplate
from apps.core.filters import PageFilterForm
from tests.catalog.test_request_templates import SEED_YAML

pytestmark = pytest.mark.django_db


@pytest.fixture
def catalog(db):
    services.catalog_sync(actor="test")
    services.compute_template_sync_builtin(actor="test")
    return {m.slug: m for m in DeviceModel.objects.all()}


@pytest.fixture
def member_client(db) -> Client:
    user = get_user_model().objects.create_user(username="member", password="pw")
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def staff_client(db) -> Client:
    user = get_user_model().objects.create_user(username="ops", password="pw", is_staff=True)
    client = Client()
    client.force_login(user)
    return client


def _text(response) -> str:
    return response.content.decode()


# ------------------------------------------------------------------ access


@pytest.mark.parametrize(
    "name,args",
    [
        ("catalog:template-list", []),
        ("catalog:model-list", []),
        ("catalog:template-create", []),
        ("catalog:request-template-import", []),
    ],
)
def test_anonymous_users_are_sent_to_login(catalog, name, args):
    response = Client().get(reverse(name, args=args))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


def test_anonymous_detail_pages_redirect_too(catalog):
    template = ComputeTemplate.objects.first()
    assert Client().get(reverse("catalog:template-detail", args=[template.pk])).status_code == 302


def test_catalog_index_goes_to_the_template_list(member_client, catalog):
    response = member_client.get("/catalog/")
    assert response.status_code == 302 and response["Location"] == reverse("catalog:template-list")


def test_members_may_read_but_not_edit(member_client, catalog):
    assert member_client.get(reverse("catalog:template-list")).status_code == 200
    assert member_client.get(reverse("catalog:template-create")).status_code == 403
    assert member_client.post(reverse("catalog:template-create"), {}).status_code == 403
    assert member_client.get(reverse("catalog:request-template-import")).status_code == 403
    template = ComputeTemplate.objects.get(slug="t4-whole")
    assert member_client.post(reverse("catalog:template-retire", args=[template.pk])).status_code == 403
    page = _text(member_client.get(reverse("catalog:template-list")))
    assert reverse("catalog:template-create") not in page
    assert "Import a request template" not in page


def test_the_nav_links_to_the_catalog(member_client, catalog):
    page = _text(member_client.get(reverse("inventory:fleet")))
    assert f'href="{reverse("catalog:template-list")}"' in page


# ------------------------------------------------------------------ template list and detail


def test_template_list_shows_memory_share_units_and_instances(member_client, catalog):
    response = member_client.get(
        reverse("catalog:template-list"), {"device_model": catalog["a100-80gb-sxm4"].pk}
    )
    page = _text(response)
    assert response.status_code == 200
    assert "A100 80GB SXM4 · MIG 3g.40gb" in page
    assert "40 GiB" in page
    assert "42.86 %" in page
    assert "0.4286" in page
    assert "× 2" in page
    assert "T4 · whole card" not in page


def test_template_list_filters_by_vendor_and_isolation(member_client, catalog):
    page = _text(
        member_client.get(reverse("catalog:template-list"), {"vendor": "huawei", "isolation": "hard"})
    )
    assert "Ascend 910B3 · vNPU vir05_1c_16g" in page
    assert "T4 · whole card" not in page
    assert "(shared)</a>" not in page


def test_retired_templates_are_hidden_unless_asked_for(member_client, catalog):
    ComputeTemplate.objects.filter(slug="t4-quarter-shared").update(is_retired=True)
    url = reverse("catalog:template-list")
    t4 = catalog["t4"].pk
    assert "T4 · quarter (shared)" not in _text(member_client.get(url, {"device_model": t4}))
    assert "T4 · quarter (shared)" in _text(member_client.get(url, {"device_model": t4, "retired": "on"}))


def test_template_filters_are_the_filtersets_form_and_bad_values_leave_the_rest(member_client, catalog):
    """The page filters with ComputeTemplatePageFilterSet (apps.core.filters.page_filter): a value
    that does not validate is a field error, the other filters still apply, and retired templates
    stay hidden with no query string at all and next to a bad value."""
    ComputeTemplate.objects.filter(slug="t4-quarter-shared").update(is_retired=True)
    url = reverse("catalog:template-list")
    bare = member_client.get(url)
    assert isinstance(bare.context["form"], PageFilterForm)
    assert "T4 · quarter (shared)" not in _text(bare)
    bad = member_client.get(url, {"isolation": "bogus", "device_model": catalog["t4"].pk})
    assert bad.context["form"]["isolation"].errors
    listed = {t.device_model_id for t in bad.context["page"].object_list}
    assert listed == {catalog["t4"].pk}  # the valid filter still applied
    assert "T4 · quarter (shared)" not in _text(bad)
    huge = member_client.get(url, {"device_model": "9" * 30})
    assert huge.status_code == 200 and huge.context["form"]["device_model"].errors
    models = member_client.get(reverse("catalog:model-list"), {"vendor": "nvidia", "kind": "bogus"})
    assert models.context["form"]["kind"].errors
    assert {m.vendor for m in models.context["page"].object_list} == {"nvidia"}


def test_template_list_query_count_is_flat(member_client, catalog):
    url = reverse("catalog:template-list")
    with CaptureQueriesContext(connection) as small:
        assert member_client.get(url, {"vendor": "intel"}).status_code == 200
    with CaptureQueriesContext(connection) as large:
        response = member_client.get(url, {"vendor": "nvidia"})
    assert _text(response).count('href="/catalog/templates/') >= 50
    assert len(large) == len(small)


def test_template_detail_shows_the_yaml_description(member_client, catalog):
    template = ComputeTemplate.objects.get(slug="a100-80gb-sxm4-mig-3g-40gb")
    response = member_client.get(reverse("catalog:template-detail", args=[template.pk]))
    page = _text(response)
    assert response.status_code == 200
    assert "kind: ComputeTemplate" in page
    assert "nvidia.com/mig-3g.40gb: 1" in page
    assert "3 of 7 compute slices" in page
    assert "0.4286" in page
    assert f"{reverse('compute-template-describe', args=[template.pk])}?format=yaml" in page
    assert "Edit</a>" not in page  # built-in, and a member


def test_model_list_shows_specs_unknowns_coefficient_and_sources(member_client, catalog):
    response = member_client.get(reverse("catalog:model-list"))
    page = _text(response)
    assert response.status_code == 200
    assert "A100 80GB SXM4" in page and "Ascend 910B3" in page
    assert "unknown" in page  # e.g. Ascend 910B3 TFLOPS, H200 NVL memory
    # One number format everywhere (issue 21 §9): the reference card's 1.0000 prints as "1".
    assert '<span class="strong">1</span>' in response.content.decode()
    assert "dense FP16/BF16 TFLOPS ÷ 312" in page
    assert "<details" in page and "mig-parted" in page
    h200_nvl = page[page.index('id="model-h200-nvl"') :]
    assert "unknown" in h200_nvl[: h200_nvl.index("</tr>")]


def test_model_list_filters_and_counts_templates(member_client, catalog):
    page = _text(member_client.get(reverse("catalog:model-list"), {"vendor": "huawei"}))
    assert 'id="model-ascend-910b3"' in page and 'id="model-a100-80gb-sxm4"' not in page
    t4_count = ComputeTemplate.objects.filter(device_model=catalog["t4"]).count()
    page = _text(member_client.get(reverse("catalog:model-list"), {"search": "T4"}))
    assert f'?device_model={catalog["t4"].pk}">{t4_count}</a>' in page


def test_model_list_query_count_is_flat(member_client, catalog):
    url = reverse("catalog:model-list")
    with CaptureQueriesContext(connection) as small:
        member_client.get(url, {"vendor": "intel"})
    with CaptureQueriesContext(connection) as large:
        member_client.get(url)
    assert len(large) == len(small)


# ------------------------------------------------------------------ editor


def _editor_post(client, catalog, **overrides):
    data = {
        "device_model": catalog["t4"].pk,
        "name": "t4 inference",
        "partition_profile": "",
        "memory_gib": "4",
        "compute_share": "30",
        "isolation": "shared",
        "max_instances": "4",
        "description": "detection service replicas",
    }
    data.update(overrides)
    return client.post(reverse("catalog:template-create"), data)


def test_editor_renders_for_staff_with_the_live_preview(staff_client, catalog):
    response = staff_client.get(reverse("catalog:template-create"))
    page = _text(response)
    assert response.status_code == 200
    assert 'data-preview-url="/api/catalog/compute-templates/preview/"' in page
    assert 'id="editor-catalog"' in page and "3g.40gb" in page
    assert "js/catalog-template-editor.js" in page
    assert 'name="memory_gib"' in page


def test_editor_creates_a_template_in_whole_gib(staff_client, catalog):
    response = _editor_post(staff_client, catalog)
    template = ComputeTemplate.objects.get(name="t4 inference")
    assert response.status_code == 302
    assert response["Location"] == reverse("catalog:template-detail", args=[template.pk])
    assert (template.memory_mib, template.isolation, template.max_instances) == (4096, "shared", 4)
    assert template.created_by.username == "ops"


def test_editor_keeps_input_and_shows_errors(staff_client, catalog):
    response = _editor_post(staff_client, catalog, memory_gib="100", compute_share="120", name="too big")
    page = _text(response)
    assert response.status_code == 200
    assert not ComputeTemplate.objects.filter(name="too big").exists()
    assert "larger than its card" in page
    assert "from 1 to 100" in page
    assert 'value="too big"' in page
    assert 'value="100"' in page
    assert 'value="120"' in page
    assert "detection service replicas" in page


def test_editor_reports_an_unknown_profile_on_its_field(staff_client, catalog):
    response = _editor_post(staff_client, catalog, partition_profile="3g.40gb", isolation="hard")
    page = _text(response)
    assert response.status_code == 200
    assert "no hardware partition profiles" in page
    assert 'value="3g.40gb"' in page


def test_a_soft_slice_without_a_count_gets_as_many_instances_as_the_card_holds(staff_client, catalog):
    """Issue 29 §9: a 50 % slice of a T4 allowed one instance per card."""
    response = _editor_post(
        staff_client, catalog, name="t4 halves", memory_gib="8", compute_share="50", max_instances=""
    )
    assert response.status_code == 302
    assert ComputeTemplate.objects.get(name="t4 halves").max_instances == 2
    # Memory bounds it too: 12 GiB of a 16 GiB card at 25 % is one instance, not four.
    _editor_post(staff_client, catalog, name="t4 big", memory_gib="12", compute_share="25", max_instances="")
    assert ComputeTemplate.objects.get(name="t4 big").max_instances == 1


def test_an_unknown_profile_is_the_only_error_not_three_stray_nulls(staff_client, catalog):
    response = _editor_post(
        staff_client, catalog, partition_profile="9g.99gb", memory_gib="", compute_share="", max_instances=""
    )
    page = _text(response)
    assert response.status_code == 200
    assert "9g.99gb" in page and "This field cannot be null" not in page


def test_editor_fills_a_profile_template(staff_client, catalog):
    response = _editor_post(
        staff_client,
        catalog,
        device_model=catalog["a100-80gb-sxm4"].pk,
        name="a100 half",
        partition_profile="3g.40gb",
        memory_gib="",
        compute_share="",
        max_instances="",
        isolation="hard",
    )
    assert response.status_code == 302
    template = ComputeTemplate.objects.get(name="a100 half")
    assert (template.memory_mib, str(template.compute_share), template.max_instances) == (40960, "42.86", 2)


def test_copying_a_builtin_prefills_the_editor(staff_client, catalog):
    source = ComputeTemplate.objects.get(slug="t4-half-shared")
    page = _text(staff_client.get(reverse("catalog:template-create"), {"from": source.pk}))
    assert 'value="T4 · half (shared) (copy)"' in page
    assert 'value="8"' in page


def test_builtins_cannot_be_edited_but_custom_ones_can(staff_client, catalog):
    builtin = ComputeTemplate.objects.get(slug="t4-whole")
    response = staff_client.get(reverse("catalog:template-edit", args=[builtin.pk]))
    assert response.status_code == 302
    assert response["Location"] == reverse("catalog:template-detail", args=[builtin.pk])
    _editor_post(staff_client, catalog)
    custom = ComputeTemplate.objects.get(name="t4 inference")
    page = _text(staff_client.get(reverse("catalog:template-detail", args=[custom.pk])))
    assert reverse("catalog:template-edit", args=[custom.pk]) in page
    url = reverse("catalog:template-edit", args=[custom.pk])
    assert 'value="t4 inference"' in _text(staff_client.get(url))
    data = {
        "device_model": catalog["t4"].pk,
        "name": "t4 inference",
        "memory_gib": "8",
        "compute_share": "50",
        "isolation": "shared",
        "max_instances": "2",
        "description": "",
    }
    assert staff_client.post(url, data).status_code == 302
    custom.refresh_from_db()
    assert (custom.memory_mib, custom.max_instances) == (8192, 2)


def test_staff_can_retire_from_the_detail_page(staff_client, catalog):
    template = ComputeTemplate.objects.get(slug="t4-quarter-shared")
    response = staff_client.post(reverse("catalog:template-retire", args=[template.pk]), {"reason": "old"})
    assert response.status_code == 302
    template.refresh_from_db()
    assert template.is_retired


# ------------------------------------------------------------------ request templates


def test_request_templates_section_and_import_form_for_staff(staff_client, catalog):
    page = _text(staff_client.get(reverse("catalog:template-list")))
    assert 'id="request-templates"' in page
    assert f'action="{reverse("catalog:request-template-import")}"' in page
    assert "No request templates yet." in page


def test_import_page_imports_and_shows_warnings(staff_client, catalog):
    response = staff_client.post(
        reverse("catalog:request-template-import"), {"document": SEED_YAML}, follow=True
    )
    template = DeviceRequestTemplate.objects.get(name="mixed-train-template")
    page = _text(response)
    assert response.redirect_chain[-1][0] == reverse("catalog:request-template-detail", args=[template.pk])
    assert "imported" in page
    assert "A100-NVL-40G" in page and "Ascend 910B" in page
    assert "family" in page
    assert "sameSwitch" in page
    assert yaml.safe_load(SEED_YAML)["metadata"]["name"] in page
    listing = _text(staff_client.get(reverse("catalog:template-list")))
    assert "mixed-train-template" in listing and "2 warnings" in listing


def test_import_page_keeps_input_and_names_the_line(staff_client, catalog):
    bad = SEED_YAML.replace("      count: 2\n", "      count: [2\n")
    response = staff_client.post(reverse("catalog:request-template-import"), {"document": bad})
    page = _text(response)
    assert response.status_code == 200
    assert "line " in page
    assert "count: [2" in page
    assert not DeviceRequestTemplate.objects.exists()


def test_import_page_lists_each_invalid_path(staff_client, catalog):
    bad = SEED_YAML.replace("      count: 2\n", "      count: 0\n")
    page = _text(staff_client.post(reverse("catalog:request-template-import"), {"document": bad}))
    assert "spec.devices[1].count" in page and "positive integer" in page


def test_request_template_detail_for_members(member_client, catalog):
    template, _ = services.request_template_import(text=SEED_YAML, actor="test")
    response = member_client.get(reverse("catalog:request-template-detail", args=[template.pk]))
    page = _text(response)
    assert response.status_code == 200
    assert "needs: [RDMA]" in page
    assert "Ascend 910B1" in page  # a candidate
    assert "Import</a>" not in page


# ------------------------------------------------------------------ assets


def test_catalog_static_assets_exist():
    assert finders.find("css/catalog.css")
    assert finders.find("js/catalog-template-editor.js")


# ------------------------------------------------------------------ admin (pytest-django's superuser client)


def test_admin_lists_templates_and_previews_the_yaml(admin_client, catalog):
    response = admin_client.get(
        "/admin/catalog/computetemplate/", {"partition": "mig", "device_model__vendor": "nvidia"}
    )
    assert response.status_code == 200
    assert "A100 80GB SXM4 · MIG 3g.40gb" in _text(response)
    assert "T4 · whole card" not in _text(response)
    builtin = ComputeTemplate.objects.get(slug="a100-80gb-sxm4-mig-3g-40gb")
    page = _text(admin_client.get(f"/admin/catalog/computetemplate/{builtin.pk}/change/"))
    assert "kind: ComputeTemplate" in page
    assert 'name="memory_mib"' not in page  # built-in: view only


def test_admin_creates_a_template_through_the_service(admin_client, catalog):
    data = {
        "device_model": catalog["t4"].pk,
        "name": "admin slice",
        "slug": "",
        "memory_mib": "4096",
        "compute_share": "25",
        "isolation": "shared",
        "partition_profile": "",
        "max_instances": "4",
        "description": "",
    }
    response = admin_client.post("/admin/catalog/computetemplate/add/", data)
    assert response.status_code == 302, _text(response)
    template = ComputeTemplate.objects.get(name="admin slice")
    assert template.slug == "t4-admin-slice"
    too_big = {**data, "name": "too big", "memory_mib": str(32 * 1024)}
    page = _text(admin_client.post("/admin/catalog/computetemplate/add/", too_big))
    assert "larger than its card" in page
    assert not ComputeTemplate.objects.filter(name="too big").exists()


def test_admin_imports_a_request_template(admin_client, catalog):
    response = admin_client.post("/admin/catalog/devicerequesttemplate/add/", {"document": SEED_YAML})
    assert response.status_code == 302
    template = DeviceRequestTemplate.objects.get(name="mixed-train-template")
    page = _text(admin_client.get(f"/admin/catalog/devicerequesttemplate/{template.pk}/change/"))
    assert "needs: [RDMA]" in page
    bad = _text(
        admin_client.post(
            "/admin/catalog/devicerequesttemplate/add/",
            {"document": SEED_YAML.replace("count: 2", "count: 0")},
        )
    )
    assert "spec.devices[1].count: must be a positive integer" in bad


# ------------------------------------------------------------------ language


@pytest.fixture
def chinese(staff_client):
    staff_client.cookies["django_language"] = "zh-hans"
    yield staff_client
    translation.activate(settings.LANGUAGE_CODE)  # LocaleMiddleware leaves the thread in zh-hans


def test_pages_are_translated_to_simplified_chinese(chinese, catalog):
    staff_client = chinese
    page = _text(staff_client.get(reverse("catalog:template-list")))
    for text in ("算力模板", "显存", "算力占比", "硬隔离", "共享", "算力单元", "请求模板", "拓扑策略"):
        assert text in page, text
    assert "设备目录" in page  # the nav link
    editor = _text(staff_client.get(reverse("catalog:template-create")))
    assert "新建算力模板" in editor and "单卡最大实例数" in editor
    response = _editor_post(staff_client, catalog, memory_gib="100")
    assert "模板超出整卡" in _text(response)
    assert "设备模板" in _text(staff_client.get(reverse("catalog:model-list")))
