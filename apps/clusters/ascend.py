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
  the physical id on ``Phy-ID`` layouts, the NPU / Device id elsewhere, which is read as the same id
  — an assumption: the ledger keeps no id known to be the physical one there (npu-smi info does not
  label one so; the parser's ``extra`` is not stored), and a real 310P3 host has NPU ids 4 / 5 for physical ids 0 / 2
  (HAMi's DRA lab, see the DRA section below). Exact only for ledgers from ``Phy-ID`` layouts.
  ``apps.clusters.pod_report.ascend_placements`` turns pods into the read-back's input.
"""

from __future__ import annotations

import math
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


# ---------------------------------------------------------------------------------------------------
# DRA: HAMi's ascend-dra-driver (cluster mode ``ascend-dra``)
# ---------------------------------------------------------------------------------------------------
#
# Read in the driver's source (not run: no Ascend host here), Project-HAMi/ascend-dra-driver @
# dc1db52ee22085e63406da674fade2684bd13748:
#
# * Driver name ``ascend.project-hami.io`` (pkg/consts/consts.go DriverName). Attribute names are
#   unqualified (the driver's domain): ``index`` (the chip's DCMI logic id), ``physicalID`` (its
#   physical id, ``GetPhysicIDFromLogicID``; what the driver puts in ASCEND_VISIBLE_DEVICES,
#   state.go visibleDeviceID), ``uuid``, ``model`` / ``productName`` (the chip type, e.g. 310P3),
#   ``brand`` "Huawei", ``type`` (cmd/ascend-dra-kubeletplugin/discovery.go enumerateDevices). One
#   device per chip, named ``npu-<logic id>-0``. No PCI address is published.
# * The Helm chart runs the plugin with ``--feature-gates=HAMivNPUCore=true`` unless
#   ``kubeletPlugin.fullCardAndTraditionalVNPU.enabled`` (templates/kubeletplugin.yaml; values.yaml:
#   full-card and template vNPU "still under development"). With the gate every device is
#   ``type: HAMivNPUCore``, ``allowMultipleAllocations: true``, with consumable capacity ``cores``
#   (100, step 1, min 0) and ``memory`` (the chip's memory in bytes, step 1Mi), each defaulting to the
#   whole value (buildLibvNPUDeviceCapacities): a request that names no capacity consumes the whole
#   chip, so no other claim fits on it. Needs Kubernetes 1.34+ with DRAConsumableCapacity.
# * Prepare (applyLibvNPUConfig) gives the container NPU_MEM_QUOTA = consumed memory in MiB and
#   NPU_PRIORITY = consumed ``cores``, and refuses a claim whose devices consumed different
#   capacities ("capacities must be same across devices currently", validateAllocationResultForLibvNPU):
#   the pod would hang in ContainerCreating, so Suanchi refuses such a pod before it is pushed.
#   Template vNPUs are the other (non-default) mode's; under HAMivNPUCore a template is refused.
# * The DeviceClass: HAMi-DRA's ``hami-vnpu-core.project-hami.io`` (Project-HAMi/HAMi-DRA @
#   15adbeea09c41ce3009aa33a832dcf167211e2c6 docs/ascend-dra.md "DeviceClass"; the driver's own demo
#   uses the same selector under another name, demo/kind-vnpu/templates/setup-resources.yaml.tpl).
#
# Pinning: the claim selects ``physicalID == Device.index``, the same id the device plugin's
# AscendReal names (``<chip>-<physical id>``). ``Device.index`` is the physical id on ``npu-smi info``
# layouts with a ``Phy-ID`` column (A3); on the others it is the NPU id (910B) or Device id (310P),
# which the ledger cannot tell from the physical id. The ledger stores no other id (npu-smi info
# prints no logic or physical id there, and the parser's ``extra`` is not kept), so on such nodes the
# pin holds only where the two coincide; cluster sync reports every chip whose index no ``physicalID``
# matches (``apps.clusters.sync``), so a mismatch is seen, not hidden. A real 310P3 host shows they can
# differ (HAMi's "Lab 18: Ascend NPU Sharing with HAMi DRA": npu-smi NPU ids 4 / 5, physicalID 0 / 2).

ASCEND_DRA_MODE = "ascend-dra"
DRA_DRIVER = "ascend.project-hami.io"
DRA_DEVICE_CLASS = "hami-vnpu-core.project-hami.io"
DRA_DEVICE_TYPE = "HAMivNPUCore"
DRA_DEVICE_CLASS_SELECTOR = (
    f'device.driver == "{DRA_DRIVER}" && device.attributes["{DRA_DRIVER}"].type == "{DRA_DEVICE_TYPE}"'
)
DRA_ATTRS = f'device.attributes["{DRA_DRIVER}"]'
DRA_PIN_ATTRIBUTE = "physicalID"
DRA_SOURCE = "https://github.com/Project-HAMi/ascend-dra-driver"


def dra_capacity_requests(allocation: Any) -> dict[str, str] | None:
    """``exactly.capacity.requests`` for one Huawei allocation under HAMivNPUCore: None for a whole
    chip (the capacities' defaults are the whole chip), else ``memory`` (``<MiB>Mi``) and ``cores``
    (percent of the chip, rounded up, 1-100). ``ValidationFailed`` for what the driver cannot give."""
    device = allocation.device
    if allocation.partition_profile:
        raise ValidationFailed(
            _(
                "vNPU template %(template)s cannot be given by HAMi's ascend-dra-driver: in its "
                "HAMivNPUCore mode (the chart's default) it shares a chip by memory and cores, not by "
                "templates. Ask for memory and a compute share instead, or set the cluster's mode for "
                "huawei to ascend-vnpu (the Ascend device plugin's templates)."
            )
            % {"template": allocation.partition_profile},
            code="fraction_not_shareable",
            details={"partition_profile": allocation.partition_profile, "mode": ASCEND_DRA_MODE},
        )
    if allocation.whole_card:
        return None
    if not allocation.memory_mib:
        raise ValidationFailed(
            _(
                "A share of Ascend chip %(card)s cannot be given without a memory size: HAMi's "
                "ascend-dra-driver would give it all of the chip's memory. Ask for memory, or for whole chips."
            )
            % {"card": device.index},
            code="fraction_not_shareable",
        )
    cores = min(100, max(1, math.ceil(int(allocation.compute_milli or 0) / 10)))
    return {"cores": str(cores), "memory": f"{int(allocation.memory_mib)}Mi"}


def dra_gate_refusal(cluster: Any) -> str:
    """Why no claim of class hami-vnpu-core.project-hami.io can be allocated on ``cluster`` ("" when
    it can, or when Test connection never read the driver's gates: unknown is no refusal): the
    driver runs with HAMivNPUCore off (``apps.clusters.connect.ascend_dra_gates``), so it publishes
    type "NPU" devices the class does not select and the pod would stay Pending."""
    from apps.clusters.sharing import recorded_gates

    gates, daemonset = recorded_gates(cluster, "huawei")
    if gates is None or gates.get("HAMivNPUCore"):
        return ""
    return _(
        "HAMi's Ascend DRA driver runs with its HAMivNPUCore feature gate off (DaemonSet %(daemonset)s): "
        "it then publishes its chips as type NPU (the full-card / template mode, still under "
        "development), which DeviceClass %(cls)s does not select, so the pod would stay Pending. "
        "Install the chart without kubeletPlugin.fullCardAndTraditionalVNPU.enabled (then test the "
        "connection again), or set the cluster's mode for huawei to plain or ascend-vnpu."
    ) % {"daemonset": daemonset or "?", "cls": DRA_DEVICE_CLASS}


def dra_check_claim(allocations: Sequence[Any], cluster: Any = None) -> None:
    """Refuse (``ValidationFailed``) one pod's Huawei allocations that the driver would not give:
    none while its HAMivNPUCore gate is known to be off (:func:`dra_gate_refusal`); and, as its
    Prepare refuses, devices of one claim consuming different capacities. Whole chips consume their
    whole memory, so whole chips of different memory sizes (as the ledger knows them) are refused too."""
    refusal = dra_gate_refusal(cluster) if cluster is not None else ""
    if refusal:
        raise ValidationFailed(refusal, code="dra_gate_off", details={"mode": ASCEND_DRA_MODE})
    shapes = {}
    for a in allocations:
        caps = dra_capacity_requests(a)
        shape = ("share", caps["cores"], caps["memory"]) if caps else ("whole", a.device.memory_mib or "?")
        shapes.setdefault(shape, []).append(a)
    if len(shapes) > 1:

        def said(shape: tuple) -> str:
            if shape[0] == "whole":
                return _("a whole chip (%(memory)s MiB)") % {"memory": shape[1]}
            return _("cores %(cores)s, memory %(memory)s") % {"cores": shape[1], "memory": shape[2]}

        raise ValidationFailed(
            _(
                "HAMi's ascend-dra-driver gives all chips of one pod the same memory and cores (it "
                'refuses the claim otherwise: "capacities must be same across devices currently"); '
                "this pod would get %(shapes)s. Ask for the same share on every chip."
            )
            % {"shapes": "; ".join(said(s) for s in shapes)},
            code="fraction_not_shareable",
            details={"mode": ASCEND_DRA_MODE},
        )
