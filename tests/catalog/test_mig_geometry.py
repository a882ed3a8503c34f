"""MIG geometry data and logic (issue 18 item 5): ``apps/catalog/data/mig-geometry.yaml``, ``apps/catalog/mig.py``."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from apps.catalog import mig
from apps.catalog.models import DeviceModel
from apps.catalog.services import compute_template_build
from apps.core.errors import ValidationFailed
from apps.inventory.vendors.nvidia import parse_nvidia_mig_lgip, parse_nvidia_mig_lgipp

ROOT = Path(__file__).resolve().parents[2]
CATALOG = yaml.safe_load((ROOT / "apps/catalog/data/device_models.yaml").read_text())
FIXTURES = ROOT / "tests/inventory/fixtures"
DATA_TEXT = mig.DATA_FILE.read_text()


def _catalog_models() -> list[dict]:
    return CATALOG if isinstance(CATALOG, list) else CATALOG.get("models") or CATALOG.get("device_models")


def test_every_geometry_matches_the_catalog_models_it_names():
    by_name = {m["name"]: m for m in _catalog_models()}
    for geometry in mig.geometries().values():
        assert geometry.source, geometry.key
        assert geometry.models
        for name in geometry.models:
            profiles = by_name[name]["mig_profiles"]
            assert set(profiles) == set(geometry.profiles), name
            for pname, count in profiles.items():
                assert geometry.profiles[pname].max == count, (name, pname)
                # the name's "Ng" is the compute slices
                assert geometry.profiles[pname].compute == int(pname.split("g.")[0])


def test_every_mig_model_of_the_catalog_has_a_geometry_or_is_named_as_not_modelled():
    for model in _catalog_models():
        if not model.get("mig_profiles"):
            continue
        if mig.model_geometry(model["name"]) is None:
            short = model["name"].split(" ")[0]  # "H200", "H20", "A800", "H800"
            assert f"- {short}" in DATA_TEXT or f", {short}" in DATA_TEXT, model["name"]


def test_the_a100_lgipp_output_of_the_mig_user_guide_is_the_a100_geometry():
    listing = parse_nvidia_mig_lgipp((FIXTURES / "nvidia_mig_lgipp_a100.txt").read_text())
    lgip = parse_nvidia_mig_lgip((FIXTURES / "nvidia_mig_lgip_a100_40gb.txt").read_text())
    names = {p["id"]: p["name"] for p in lgip.devices[0].mig_profiles}
    geometry = mig.model_geometry("A100 40GB SXM4")
    for entry in listing.devices[0].mig_profiles:
        profile = geometry.profiles[names[entry["id"]]]
        assert profile.id == entry["id"]
        assert profile.starts == tuple(p["start"] for p in entry["placements"])
        assert {p["size"] for p in entry["placements"]} == {profile.size}


@pytest.mark.parametrize(
    ("model", "layout", "ok"),
    [
        ("A100 80GB SXM4", ["4g.40gb", "3g.40gb"], True),
        ("A100 80GB SXM4", ["3g.40gb", "3g.40gb"], True),
        ("A100 80GB SXM4", ["3g.40gb", "3g.40gb", "1g.10gb"], False),  # all 8 memory slices taken
        ("A100 80GB SXM4", ["2g.20gb"] * 3 + ["1g.10gb"], True),
        ("A100 80GB SXM4", ["4g.40gb", "4g.40gb"], False),
        ("A100 80GB SXM4", ["1g.10gb"] * 7, True),
        ("A100 80GB SXM4", ["1g.10gb"] * 8, False),
        ("A100 80GB SXM4", ["1g.20gb"] * 4, True),
        ("A100 80GB SXM4", ["1g.10gb+me", "1g.10gb+me"], False),
        ("H100 NVL 94GB", ["1g.24gb"] * 4, True),  # 4 x 24 "GB" > 94 by name, fine by slots
        ("A30", ["2g.12gb", "1g.6gb", "1g.6gb"], True),
        ("A30", ["2g.12gb", "2g.12gb", "1g.6gb"], False),
        ("A30", ["4g.24gb", "1g.6gb"], False),
    ],
)
def test_carve_knows_nvidias_placement_rules(model, layout, ok):
    geometry = mig.model_geometry(model)
    starts = mig.carve(geometry, layout)
    assert (starts is not None) == ok
    if ok:
        assert mig.valid_layout(geometry, list(zip(layout, starts, strict=True))) is None
    else:
        assert mig.layout_problem_text(geometry, layout)


@settings(max_examples=150, deadline=None)
@given(
    key=st.sampled_from(sorted(mig.geometries())),
    ops=st.lists(st.tuples(st.booleans(), st.integers(0, 30)), min_size=1, max_size=40),
)
def test_find_start_only_ever_builds_valid_layouts(key, ops):
    geometry = mig.geometries()[key]
    names = sorted(geometry.profiles)
    layout: list[tuple[str, int]] = []
    for add, pick in ops:
        if add or not layout:
            name = names[pick % len(names)]
            start = mig.find_start(geometry, layout, name)
            exhaustive = [
                s
                for s in geometry.profiles[name].starts
                if mig.valid_layout(geometry, [*layout, (name, s)]) is None
            ]
            assert (start is None) == (not exhaustive)  # None only when no start is free
            if start is not None:
                layout.append((name, start))
        else:
            layout.pop(pick % len(layout))
        assert mig.valid_layout(geometry, layout) is None
        assert mig.carve(geometry, [n for n, _s in layout]) is not None


def test_a_cards_own_lgipp_listing_overrides_or_defines_its_geometry():
    # -lgipp only (no names): matched to the model's profiles by id; here a driver that allowed 3g only at 4
    own = [{"id": 9, "name": None, "placements": [{"start": 4, "size": 4}]}]
    geometry = mig.device_geometry("A100 80GB SXM4", own)
    assert geometry.profiles["3g.40gb"].starts == (4,)
    assert geometry.profiles["1g.10gb"].starts == (0, 1, 2, 3, 4, 5, 6)
    assert mig.carve(geometry, ["3g.40gb", "3g.40gb"]) is None
    # -lgip + -lgipp merged for a model the data file lacks: the listing alone is the geometry
    listing = [
        {
            "id": 19,
            "name": "1g.18gb",
            "max_instances": 7,
            "placements": [{"start": s, "size": 1} for s in range(7)],
        },
        {
            "id": 9,
            "name": "3g.71gb",
            "max_instances": 2,
            "placements": [{"start": s, "size": 4} for s in (0, 4)],
        },
        {"id": 0, "name": "7g.141gb", "max_instances": 1, "placements": [{"start": 0, "size": 8}]},
    ]
    h200 = mig.device_geometry("H200 SXM 141GB", listing)
    assert mig.model_geometry("H200 SXM 141GB") is None
    assert (h200.memory_slices, h200.compute_slices) == (8, 7)
    assert mig.carve(h200, ["3g.71gb", "1g.18gb", "1g.18gb", "1g.18gb"]) is not None
    assert mig.carve(h200, ["7g.141gb", "1g.18gb"]) is None
    # no placements at all: the model's data, or nothing
    assert mig.device_geometry("H200 SXM 141GB", [{"id": 19, "name": "1g.18gb", "placements": None}]) is None


# ------------------------------------------------------------------ the template editor


@pytest.fixture
def a100_model(db):
    return DeviceModel.objects.create(
        vendor="nvidia",
        kind="gpu",
        name="A100 80GB SXM4",
        slug="a100-80gb-sxm4",
        memory_mib=81920,
        features=["mig"],
        # a wrong catalog count: the geometry still refuses what no placement can carve
        mig_profiles={"1g.10gb": 7, "1g.10gb+me": 2, "3g.40gb": 2, "7g.80gb": 1},
    )


def test_a_template_asking_more_instances_than_the_placements_allow_is_refused(a100_model):
    with pytest.raises(ValidationFailed) as refused:
        compute_template_build(
            device_model=a100_model,
            name="me x2",
            partition_profile="1g.10gb+me",
            memory_mib=10240,
            compute_share=Decimal("14.29"),
            max_instances=2,
        )
    assert refused.value.details["max_instances"] == [
        "At most 1 × MIG 1g.10gb+me fit one A100-80GB card; the layout asks for 2."
    ]
    ok = compute_template_build(
        device_model=a100_model, name="3g x2", partition_profile="3g.40gb", max_instances=2
    )
    assert ok.max_instances == 2


def test_the_mig_layout_api_carves_or_says_precisely_why_not(api_client, make_user, a100_model):
    api_client.force_authenticate(make_user("bob"))
    url = f"/api/catalog/device-models/{a100_model.pk}/mig-layout/"
    good = api_client.post(url, {"layout": {"4g.40gb": 1, "3g.40gb": 1}}, format="json")
    assert good.status_code == 200, good.content
    body = good.json()
    assert [(i["profile"], i["start"], i["size"]) for i in body["instances"]] == [
        ("4g.40gb", 0, 4),
        ("3g.40gb", 4, 4),
    ]
    bad = api_client.post(url, {"layout": {"3g.40gb": 2, "1g.10gb": 1}}, format="json")
    assert bad.status_code == 400
    assert bad.json()["error"]["message"].startswith(
        "No placement of 1 × 1g.10gb + 2 × 3g.40gb exists on a A100-80GB card"
    )
    malformed = api_client.post(url, {"layout": {"3g.40gb": "two"}}, format="json")
    assert malformed.status_code == 400 and "whole number" in malformed.json()["error"]["message"]
    h200 = DeviceModel.objects.create(
        vendor="nvidia",
        kind="gpu",
        name="H200 SXM 141GB",
        slug="h200",
        memory_mib=144384,
        mig_profiles={"7g.141gb": 1},
    )
    unknown = api_client.post(
        f"/api/catalog/device-models/{h200.pk}/mig-layout/", {"layout": {"7g.141gb": 1}}, format="json"
    )
    assert (
        unknown.status_code == 400
        and "no sourced MIG placements for H200 SXM 141GB" in unknown.json()["error"]["message"]
    )
