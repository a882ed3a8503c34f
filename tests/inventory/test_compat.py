"""Runtime compatibility precheck, on real rows of apps/inventory/data/runtime-compat.yaml."""

from __future__ import annotations

import pytest

from apps.core.errors import ValidationFailed
from apps.inventory import compat
from apps.inventory.compat import CompatResult, precheck, version_key


def nvidia(driver, requirement, **kwargs) -> CompatResult:
    return precheck(vendor="nvidia", driver_version=driver, requirement=requirement, **kwargs)


def ascend(driver, requirement, **kwargs) -> CompatResult:
    return precheck(vendor="huawei", driver_version=driver, requirement=requirement, **kwargs)


def amd(driver, requirement, **kwargs) -> CompatResult:
    return precheck(vendor="amd", driver_version=driver, requirement=requirement, **kwargs)


# ------------------------------------------------------------------ versions


def test_version_ordering_understands_release_candidates():
    ordered = ["23.0.rc3", "23.0.1", "23.0.3", "24.1.rc1", "24.1.rc2", "24.1.0", "24.1.1", "25.0.rc1(.1)"]
    assert sorted(ordered, key=version_key) == ordered
    assert version_key("24.1.rc2") < version_key("24.1.0") < version_key("24.1.1")
    assert version_key("24.1.RC2") == version_key("24.1.rc2")
    assert version_key("24.1") == version_key("24.1.0")
    assert version_key("8.0.RC2.alpha002") < version_key("8.0.RC2")
    assert version_key("570.26") < version_key("570.124.06") < version_key("580.65.06")
    assert version_key("535.104.05") > version_key("535.86.09")
    with pytest.raises(ValueError):
        version_key("N/A")


def test_requirements_are_parsed_or_refused():
    assert compat.parse_requirement("CUDA 12.4.1") == compat.Requirement("cuda", "12.4.1", "")
    assert compat.parse_requirement("cuda>=12.2") == compat.Requirement("cuda", "12.2", ">=")
    assert compat.parse_requirement("cann 8.0.RC3").version == "8.0.RC3"
    assert compat.parse_requirement("DTK-24.04.1").runtime == "dtk"
    for bad in ("", "cuda", "cuda 12", "pytorch 2.4", "cuda twelve", "rocm 6.2.rc1"):
        with pytest.raises(ValidationFailed) as excinfo:
            nvidia("550.54.14", bad)
        assert "'cuda 12.4'" in excinfo.value.message and "'cann 8.0.RC3'" in excinfo.value.message


def test_unknown_vendor_is_refused():
    with pytest.raises(ValidationFailed, match="unknown vendor"):
        precheck(vendor="nokia", driver_version="1.0", requirement="cuda 12.4")


def test_results_are_frozen_and_serialisable():
    result = nvidia("550.54.15", "cuda 12.4")
    assert result.as_dict() == {
        "ok": True,
        "reason": result.reason,
        "rule": result.rule,
        "source": result.source,
        "verified": True,
    }
    with pytest.raises(AttributeError):
        result.ok = False  # type: ignore[misc]


# ------------------------------------------------------------------ NVIDIA


def test_cuda_strict_by_default_names_the_required_driver():
    result = nvidia("535.104.05", "cuda 12.4")
    assert not result.ok and result.verified
    assert result.reason == "driver 535.104.05 < 550.54.14 required by CUDA 12.4"
    assert "CUDA 12.4 GA" in result.rule and "12.4.0" in result.rule
    assert "Table 3" in result.source


def test_cuda_minor_version_compatibility_is_opt_in():
    result = nvidia("535.104.05", "cuda 12.4", allow_minor_version_compat=True)
    assert result.ok and result.verified
    assert "driver 535.104.05 < 550.54.14 required by CUDA 12.4" in result.reason
    assert "525.60.13" in result.reason
    assert "runs under CUDA minor-version compatibility" in result.reason
    assert "error 222" in result.reason
    assert "minor_version_compatibility 12.x" in result.rule


def test_cuda_full_support_and_update_rows():
    assert nvidia("550.54.15", "CUDA 12.4.1").ok
    assert not nvidia("550.54.14", "CUDA 12.4.1").ok  # 12.4 Update 1 needs 550.54.15
    assert nvidia("550.54.14", "cuda>=12.4").ok
    assert nvidia("580.65.06", "cuda 13.0").ok
    assert nvidia("580.95.05", "cuda 13.0.2").ok
    assert "450.51.05" in nvidia("450.51.05", "cuda 11.0").rule  # 11.0 -> the 11.0.2 GA row


def test_cuda_13_needs_a_580_driver_even_with_minor_version_compatibility():
    result = nvidia("570.26", "cuda 13.0", allow_minor_version_compat=True)
    assert not result.ok
    assert result.reason.startswith("driver 570.26 < 580.65.06 required by CUDA 13.0")
    assert "13.x minor-version compatibility" in result.reason
    # 13.1 on the first R580 driver: only through minor-version compatibility.
    assert not nvidia("580.65.06", "cuda 13.1").ok
    assert nvidia("580.65.06", "cuda 13.1", allow_minor_version_compat=True).ok


def test_cuda_11_minor_version_compatibility_uses_450_80_02():
    assert not nvidia("450.51.06", "cuda 11.8", allow_minor_version_compat=True).ok
    assert nvidia("450.80.02", "cuda 11.8", allow_minor_version_compat=True).ok


def test_cuda_version_not_in_the_table():
    result = nvidia("570.26", "cuda 12.7")
    assert not result.ok and not result.verified
    assert result.reason.startswith("CUDA 12.7 is not in the compatibility table (known: 11.0, ")
    assert "12.6, 12.8" in result.reason
    patch = nvidia("570.26", "cuda 12.4.7")
    assert "known 12.4 releases: 12.4.0, 12.4.1" in patch.reason


def test_cuda_needs_the_driver_version():
    for driver in (None, "", "  "):
        result = nvidia(driver, "cuda 12.4")
        assert not result.ok and not result.verified
        assert result.reason == "driver version unknown on this node"
    assert "not a version number" in nvidia("N/A", "cuda 12.4").reason


def test_cuda_13_refused_on_volta_only_when_the_model_is_given():
    refused = nvidia("580.65.06", "cuda 13.0", device_model_name="Tesla V100-SXM2-32GB")
    assert not refused.ok and "V100 workloads need a CUDA 12.x image" in refused.reason
    assert "Volta" in refused.rule
    assert nvidia("580.65.06", "cuda 13.0").ok
    assert nvidia("580.65.06", "cuda 12.8", device_model_name="V100 SXM2 32GB").ok


def test_runtime_of_another_vendor_is_refused():
    result = nvidia("550.54.14", "cann 8.0")
    assert not result.ok
    assert result.reason == "CANN images need a Huawei Ascend node; this node has NVIDIA devices"
    assert (
        ascend("24.1.rc2", "cuda 12.4").reason
        == "CUDA images need an NVIDIA node; this node has Huawei Ascend devices"
    )
    assert not precheck(vendor="cambricon", driver_version="5.10", requirement="rocm 6.2").ok


# ------------------------------------------------------------------ Huawei


def test_cann_paired_driver_is_ok():
    result = ascend("24.1.rc2", "cann 8.0.RC3")
    assert result.ok and result.verified
    assert "Ascend HDK 24.1.RC2" in result.rule
    assert "package_info.js" in result.source
    assert ascend("24.1.0", "cann 8.0.RC3").ok  # same 24.1 line, newer
    assert ascend("23.0.3", "cann 7.0.0").ok
    assert ascend("23.0.3", "cann 7.0.0", chip="910B3").ok


def test_cann_older_driver_is_refused_with_the_pairing():
    result = ascend("23.0.3", "cann 8.0.RC3")
    assert not result.ok and result.verified
    assert (
        result.reason
        == "driver 23.0.3 does not match CANN 8.0.RC3 (pairs with Ascend HDK 24.1.RC2, driver 24.1.rc2)"
    )
    assert not ascend("24.1.rc1", "cann 8.0.RC3").ok  # same line, older release candidate


def test_cann_chip_family_picks_the_pair():
    # CANN 7.0.0 pairs 910B with driver 23.0.3 and 310P with 23.0.1.
    assert not ascend("23.0.1", "cann 7.0.0", chip="910B3").ok
    assert ascend("23.0.1", "cann 7.0.0", chip="310P3").ok
    unsure = ascend("23.0.1", "cann 7.0.0")
    assert unsure.ok and not unsure.verified and "chip unknown" in unsure.reason
    # 8.5.0 only lists A2/A3 (910B is Atlas A2).
    assert ascend("25.5.1", "cann 8.5.0", chip="Ascend 910B3").ok
    uncovered = ascend("25.5.1", "cann 8.5.0", chip="310P3")
    assert uncovered.ok and not uncovered.verified and "none for chip 310P3" in uncovered.reason


def test_cann_newer_hdk_line_and_later_rows():
    newer = ascend("25.0.rc1", "cann 8.0.RC3")
    assert newer.ok and not newer.verified and "newer HDK line" in newer.reason
    assert ascend("26.0.rc1", "cann 8.3.RC1").ok  # 'Ascend HDK 25.3.RC1 (and later)'
    assert not ascend("25.2.0", "cann 8.3.RC1").ok
    assert ascend("25.5.2", "cann 9.0.0").ok
    assert not ascend("25.3.rc1", "cann 9.0.0").ok


def test_cann_version_not_in_the_table():
    result = ascend("24.1.rc2", "cann 8.0")
    assert not result.ok
    assert result.reason.startswith("CANN 8.0 is not in the compatibility table (known: 6.0.RC1, ")
    assert "8.0.RC3" in result.reason
    assert ascend(None, "cann 8.0.RC3").reason == "driver version unknown on this node"


# ------------------------------------------------------------------ AMD


def test_rocm_on_decoupled_amdgpu_drivers():
    result = amd("30.10.1", "rocm 6.2")
    assert result.ok and result.verified and "30.10" in result.rule
    assert amd("30.10", "rocm 7.0.2").ok
    refused = amd("30.10.1", "rocm 6.1")
    assert (
        not refused.ok
        and refused.reason == "amdgpu 30.10.1 supports ROCm 7.0.x, 6.4.x, 6.3.x, 6.2.x; not ROCm 6.1"
    )
    assert amd("30.30.3", "rocm 7.2").ok
    assert amd("31.40.1", "rocm 7.14").ok
    assert not amd("31.40.1", "rocm 7.2").ok
    unknown = amd("30.20.0", "rocm 6.4")
    assert unknown.ok and not unknown.verified and "not in the amdgpu/ROCm table" in unknown.reason


def test_rocm_on_rocm_like_kernel_driver_versions():
    result = amd("6.3.6", "rocm 6.2")
    assert result.ok and result.verified
    assert "user space 6.1.x, 6.2.x, 6.3.x" in result.reason
    refused = amd("6.3.6", "rocm 6.0")
    assert not refused.ok
    assert refused.reason == "KMD 6.3.6 supports ROCm user space 6.1.x, 6.2.x, 6.3.x; not ROCm 6.0"
    assert amd("5.7.1", "rocm 6.1").ok
    assert not amd("5.7.1", "rocm 6.2").ok
    assert "matrix" in result.source or "compat-matrix" in result.source
    assert not amd("6.3.6", "rocm 4.5").ok  # not in any table
    assert amd(None, "rocm 6.2").reason == "driver version unknown on this node"


# ------------------------------------------------------------------ Hygon


def test_dtk_is_not_verifiable_except_for_published_examples():
    unverified = precheck(
        vendor="hygon", driver_version="6.2.20", requirement="dtk 24.04", dtk_version="24.04"
    )
    assert unverified.ok and not unverified.verified
    assert unverified.reason.startswith(
        "no public DTK↔driver matrix (runtime-compat.yaml); cannot verify DTK 24.04 on driver 6.2.20"
    )
    example = precheck(vendor="hygon", driver_version="rock-5.7.1-6.2.13-V1.0.1a", requirement="dtk 24.04.1")
    assert example.ok and example.verified and "known working pair" in example.reason
    assert precheck(vendor="hygon", driver_version="6.2.13", requirement="dtk 24.04.1").verified
    assert precheck(vendor="hygon", driver_version="6.2.35", requirement="dtk 26.04").verified
    assert not precheck(vendor="hygon", driver_version="6.2.13", requirement="dtk 26.04").verified
    assert not precheck(vendor="hygon", driver_version="", requirement="dtk 24.04").ok


# ------------------------------------------------------------------ nodes


@pytest.mark.django_db
def test_node_precheck_reads_the_node_and_its_devices():
    from apps.inventory.models import Cluster, Device, Node

    cluster = Cluster.objects.create(name="c1", slug="c1")
    npu_node = Node.objects.create(cluster=cluster, name="ascend-01", driver_version="23.0.1")
    for index in range(2):
        Device.objects.create(node=npu_node, vendor="huawei", index=index, raw_model_name="910B3")
    # The devices say Huawei 910B: CANN 7.0.0 pairs 910B with 23.0.3, so 23.0.1 is refused.
    result = compat.node_precheck(npu_node, "cann 7.0.0")
    assert not result.ok and "23.0.1" in result.reason

    gpu_node = Node.objects.create(cluster=cluster, name="gpu-01", driver_version="535.104.05")
    assert compat.node_precheck(gpu_node, "cuda 12.4", vendor="nvidia").reason == (
        "driver 535.104.05 < 550.54.14 required by CUDA 12.4"
    )
    assert compat.node_precheck(gpu_node, "cuda 12.4", vendor="nvidia", allow_minor_version_compat=True).ok
    empty = compat.node_precheck(gpu_node, "cuda 12.4")
    assert not empty.ok and not empty.verified and "no devices" in empty.reason


@pytest.mark.django_db
def test_node_precheck_with_a_vendor_makes_no_query(django_assert_num_queries):
    from apps.inventory.models import Node

    node = Node(name="virtual", driver_version="580.65.06")
    with django_assert_num_queries(0):
        assert compat.node_precheck(node, "cuda 13.0", vendor="nvidia").ok
