"""Huawei Ascend: the names the Ascend device plugin advertises, and what it writes back on a pod.

Facts from the vendor's source, Ascend/mind-cluster at 22bb3d987bc0208c3eb7395e222b661276133c58
(the current home of ascend-device-plugin; the older Ascend/ascend-device-plugin repository at
56adb786 has the same tables):

* **Whole-chip resource** ``huawei.com/<chip>``: ``Ascend910`` for the whole 910 family (910A,
  910B*, A3) and ``Ascend310P`` for 310P (``component/ascend-common/api/default_name.go``
  ``HuaweiAscend910`` / ``HuaweiAscend310P``). Which one a card is comes from the catalog
  (``DeviceModel.k8s_resource_names``, the entry without a template suffix), never from its name.
* **vNPU resource** ``huawei.com/<chip>-<type>`` where ``<type>`` is the plugin's fixed
  template → type table (``component/ascend-device-plugin/pkg/common/device.go``
  ``GetTemplateName2DeviceTypeMap``, constants in ``pkg/common/constants.go``;
  ``pkg/device/ascendcommon.go`` ``assembleSpecVirtualDevice`` prefixes the chip name). A template
  outside that table is never advertised (the plugin logs "check templatename failed"). The
  templates each chip type accepts are ``templateNameLists`` in
  ``component/ascend-common/devmanager/common/utils.go``; the docs' table "Virtual instance
  templates and vNPU types" (``docs/en/scheduling/usage/virtual_instance/virtual_instance_with_hdk/
  static_vnpu_scheduling/02_mounting_vnpu_static.md``) lists the same pairs. A container may ask for
  at most one vNPU (``MaxRequestVirtualDeviceNum = 1`` in ``constants.go``; the same docs page).
* **Read-back** ``huawei.com/AscendReal`` (``api.PodAnnotationAscendReal``): written by
  ``AddPodAnnotation`` (``pkg/device/ascendcommon.go``) for physical chips only, the sorted device
  names joined with ``,`` (``CommaSepDev``). A device name is ``<chip>-<physical id>``
  (``assemblePhyDevices``: ``fmt.Sprintf("%s-%d", tool.name, davinCiDev.PhyID)``), e.g.
  ``Ascend910-1,Ascend910-2`` (docs ``03_full_npu_scheduling_and_static_vnpu_scheduling_training.md``).
  The ledger's ``Device.index`` is what ``npu-smi info`` prints (``apps.inventory.vendors.huawei``):
  the physical id on ``Phy-ID`` layouts, the NPU / Device id elsewhere, which is read as the same id.
  ``apps.clusters.pod_report.ascend_placements`` turns pods into the read-back's input.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from django.utils.translation import gettext as _

from apps.core.errors import ParseFailed, ValidationFailed

PREFIX = "huawei.com/"
CHIP_910 = "Ascend910"
CHIP_310P = "Ascend310P"
ASCEND_REAL_ANNOTATION = "huawei.com/AscendReal"

# GetTemplateName2DeviceTypeMap (pkg/common/device.go): template → vNPU type.
TEMPLATE_TYPES: dict[str, str] = {
    "vir16": "16c",
    "vir08": "8c",
    "vir04": "4c",
    "vir02": "2c",
    "vir01": "1c",
    "vir02_1c": "2c.1cpu",
    "vir04_3c": "4c.3cpu",
    "vir03_1c_8g": "3c.1cpu.8g",
    "vir04_4c_dvpp": "4c.4cpu.dvpp",
    "vir04_3c_ndvpp": "4c.3cpu.ndvpp",
    "vir05_1c_8g": "5c.1cpu.8g",
    "vir05_1c_16g": "5c.1cpu.16g",
    "vir06_1c_16g": "6c.1cpu.16g",
    "vir10_3c_16g": "10c.3cpu.16g",
    "vir10_3c_16g_nm": "10c.3cpu.16g.ndvpp",
    "vir10_3c_32g": "10c.3cpu.32g",
    "vir10_4c_16g_m": "10c.4cpu.16g.dvpp",
    "vir12_3c_32g": "12c.3cpu.32g",
}

# templateNameLists (ascend-common/devmanager/common/utils.go), by the resource's chip name: 910A,
# 910B and A3 all advertise under Ascend910, so that chip name accepts the union of their lists.
CHIP_TEMPLATES: dict[str, frozenset[str]] = {
    CHIP_310P: frozenset(
        {"vir04", "vir02", "vir01", "vir04_3c", "vir02_1c", "vir04_4c_dvpp", "vir04_3c_ndvpp"}
    ),
    CHIP_910: frozenset(
        {"vir16", "vir08", "vir04", "vir02", "vir01"}  # Ascend910A
        | {  # Ascend910B
            "vir03_1c_8g",
            "vir05_1c_8g",
            "vir05_1c_16g",
            "vir06_1c_16g",
            "vir10_3c_16g",
            "vir10_3c_16g_nm",
            "vir10_3c_32g",
            "vir10_4c_16g_m",
            "vir12_3c_32g",
        }
        | {"vir12_3c_32g", "vir06_1c_16g", "vir05_1c_16g", "vir10_3c_32g"}  # Ascend910A3
    ),
}

_WHOLE_CHIP = re.compile(r"^huawei\.com/(Ascend[0-9A-Za-z]+)$")
# One AscendReal entry: <chip>-<physical id> (310P mixed-insert cards: Ascend310P-V / -VPro / -IPro).
_REAL_DEVICE = re.compile(r"^Ascend[0-9A-Za-z]+(?:-(?:V|VPro|IPro))?-(\d+)$")


def whole_chip_resource(device: Any, default: str = PREFIX + CHIP_910) -> str:
    """The whole-chip resource of ``device``'s catalog model (``huawei.com/Ascend310P`` …), or
    ``default`` (the adapter's, 910) when the model is unknown or the catalog names none."""
    model = getattr(device, "device_model", None) if getattr(device, "device_model_id", None) else None
    for name in getattr(model, "k8s_resource_names", None) or []:
        if _WHOLE_CHIP.match(str(name)):
            return str(name)
    return default


def vnpu_resource_name(profile: str, base: str = PREFIX + CHIP_910, *, model: Any = None) -> str:
    """Ascend vNPU template → the resource the device plugin advertises for it on ``base``'s chip.

    ``vir05_1c_16g`` on ``huawei.com/Ascend910`` → ``huawei.com/Ascend910-5c.1cpu.16g``;
    ``vir10_3c_16g_nm`` → ``huawei.com/Ascend910-10c.3cpu.16g.ndvpp``; ``vir02_1c`` on
    ``huawei.com/Ascend310P`` → ``huawei.com/Ascend310P-2c.1cpu``. ``ValidationFailed`` (naming the
    template and the chip) for a template the plugin does not know for that chip, or one the catalog
    ``model`` (when given) does not list."""
    template = str(profile).strip()
    chip = base.removeprefix(PREFIX)
    known = CHIP_TEMPLATES.get(chip, frozenset())
    if template not in known or template not in TEMPLATE_TYPES:
        raise ValidationFailed(
            _(
                "vNPU template %(template)s is not one the Ascend device plugin advertises for "
                "%(chip)s (it knows: %(known)s)."
            )
            % {"template": template, "chip": chip, "known": ", ".join(sorted(known)) or "-"},
            details={"partition_profile": template, "chip": chip},
        )
    listed = getattr(model, "vnpu_templates", None) or {}
    if model is not None and listed and template not in listed:
        raise ValidationFailed(
            _(
                "vNPU template %(template)s is not listed for %(model)s in the device catalog (it lists: %(known)s)."
            )
            % {"template": template, "model": model.name, "known": ", ".join(sorted(listed))},
            details={"partition_profile": template, "chip": chip, "model": model.name},
        )
    return f"{base}-{TEMPLATE_TYPES[template]}"


def allocation_resource(allocation: Any, default: str, *, vnpu: bool) -> str:
    """The extended resource one Huawei allocation asks for: its chip's whole-chip resource, or in
    ``ascend-vnpu`` mode with a partition profile the template's vNPU resource."""
    device = allocation.device
    base = whole_chip_resource(device, default)
    if not (vnpu and allocation.partition_profile):
        return base
    model = getattr(device, "device_model", None) if getattr(device, "device_model_id", None) else None
    return vnpu_resource_name(allocation.partition_profile, base, model=model)


def allocation_resources(allocations: Sequence[Any], default: str, *, vnpu: bool) -> list[str]:
    """``allocation_resource`` for each allocation, their catalog models read in one query."""
    _load_models([a.device for a in allocations])
    return [allocation_resource(a, default, vnpu=vnpu) for a in allocations]


def _load_models(devices: Sequence[Any]) -> None:
    """Attach the catalog model of every device that has one and has not loaded it (one query)."""
    from apps.catalog.models import DeviceModel

    wanted = [d for d in devices if d.device_model_id and not d._meta.get_field("device_model").is_cached(d)]
    if not wanted:
        return
    found = DeviceModel.objects.in_bulk({d.device_model_id for d in wanted})
    for device in wanted:
        if device.device_model_id in found:
            device.device_model = found[device.device_model_id]


def check_vnpu_count(limits: dict[str, int]) -> None:
    """A container gets at most one vNPU from the Ascend device plugin (MaxRequestVirtualDeviceNum)."""
    vnpus = {name: n for name, n in limits.items() if name.startswith(PREFIX) and not _WHOLE_CHIP.match(name)}
    if sum(vnpus.values()) > 1:
        raise ValidationFailed(
            _(
                "The Ascend device plugin gives a container at most one vNPU; this pod would ask for %(asked)s."
            )
            % {"asked": ", ".join(f"{n} x {name}" for name, n in sorted(vnpus.items()))},
            details={"resources": vnpus},
        )


# ---------------------------------------------------------------------------------------------------
# Read-back: huawei.com/AscendReal
# ---------------------------------------------------------------------------------------------------


def ascend_real_chips(value: str) -> list[int]:
    """The physical chip ids of an AscendReal value, sorted: ``"Ascend910-1,Ascend910-0"`` → [0, 1].
    ``ParseFailed`` naming the entry that is not ``<chip>-<id>``."""
    ids: list[int] = []
    for item in str(value).split(","):
        match = _REAL_DEVICE.match(item.strip())
        if not match:
            raise ParseFailed(
                _("%(annotation)s entry %(entry)r is not <chip>-<physical id>")
                % {"annotation": ASCEND_REAL_ANNOTATION, "entry": item},
                details={"annotation": ASCEND_REAL_ANNOTATION, "entry": item},
            )
        ids.append(int(match.group(1)))
    return sorted(set(ids))
