"""What a pod asks of its node's device plugins, per vendor and plugin mode (``Cluster.plugin_mode``):
whole-device counts, MIG profiles, HAMi's shares, Ascend's chip and vNPU names, nothing for the
devices a DRA claim selects; and what is refused rather than rendered."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

from django.utils.translation import gettext as _

from apps.clusters import ascend, sharing
from apps.clusters.manifests.dra import DRA_DRIVERS, uses_dra
from apps.clusters.manifests.names import label_value
from apps.core.errors import ValidationFailed
from apps.inventory.vendors.resource_names import device_resource_name

# Ascend names (whole-chip resource by catalog family, the plugin's vNPU template table, the
# AscendReal read-back) live in apps.clusters.ascend; ``vnpu_resource_name`` is re-exported here.
vnpu_resource_name = ascend.vnpu_resource_name


def replica_resources(allocations: Sequence[Any], cluster: Any) -> tuple[dict[str, int], set[str], list[str]]:
    """Extended resources for one replica's allocations; second value: the vendors HAMi pins by UUID;
    third: notes for vendors in ``dra`` mode without a DRA driver (plain counts instead). Devices
    of a vendor rendered as DRA claims add no extended resource here (the claim asks for them)."""
    limits: Counter[str] = Counter()
    hami: set[str] = set()
    notes: list[str] = []
    by_vendor: dict[str, list[Any]] = defaultdict(list)
    for allocation in allocations:
        by_vendor[allocation.device.vendor].append(allocation)
    for vendor, allocs in by_vendor.items():
        resource = device_resource_name(vendor)
        if resource is None:  # no documented device count: a guessed name would leave the pod Pending
            raise ValidationFailed(
                _(
                    "No device-plugin resource name is known for %(vendor)s cards: Suanchi cannot ask for them."
                )
                % {"vendor": vendor},
                code="no_resource_name",
            )
        mode = cluster.plugin_mode(vendor) if cluster is not None else "plain"
        resource = device_resource_name(vendor, mode) or resource  # Hygon ``hcu``: hygon.com/hcu
        refusal = next((sharing.fraction_refusal(vendor, mode) for a in allocs if sharing.is_fraction(a)), "")
        refusal = refusal or next(
            (
                r
                for a in allocs
                if sharing.is_fraction(a)
                and (r := sharing.dra_gate_refusal(vendor, mode, str(a.isolation), cluster))
            ),
            "",
        )
        if vendor == "amd" and not refusal:  # an AMD partition is a DRA device of its own
            refusal = next(
                (
                    r
                    for a in allocs
                    if a.partition_profile and (r := sharing.amd_partition_refusal(mode, a.partition_profile))
                ),
                "",
            )
        if refusal:  # never a whole card billed as a slice (apps.clusters.sharing)
            raise ValidationFailed(refusal, code="fraction_not_shareable")
        if uses_dra(vendor, cluster):
            if vendor == "huawei":  # what HAMi's ascend-dra-driver would refuse at Prepare
                ascend.dra_check_claim(allocs, cluster)
            if vendor == "amd":  # a card in another mode than the claim's: no device would match
                mismatch = next((r for a in allocs if (r := amd_mode_refusal(a))), "")
                if mismatch:
                    raise ValidationFailed(mismatch, code="amd_partition_mode")
            continue  # the pod's ResourceClaim selects these devices
        if mode == "mig-mixed" and vendor == "nvidia":
            for a in allocs:
                if a.partition_profile:
                    limits[f"nvidia.com/mig-{label_value(a.partition_profile)}"] += 1
                else:
                    limits[resource] += 1
        elif mode == "hami" and vendor in sharing.HAMI_SHARES:
            hami.add(vendor)
            share = sharing.HAMI_SHARES[vendor]
            for name, amount in sharing.hami_limits(share, allocs).items():
                limits[name] = limits[name] + amount if name == share.count else max(limits[name], amount)
        elif vendor == "huawei":  # every mode: the chip family's names (apps.clusters.ascend)
            names = ascend.allocation_resources(allocs, resource, vnpu=mode == "ascend-vnpu")
            if mode == "dra":  # HAMi's Ascend DRA driver is mode ascend-dra
                counted = ",".join(sorted(set(names)))
                notes.append(
                    f"{vendor}: DRA driver {ascend.DRA_DRIVER} is mode {ascend.ASCEND_DRA_MODE}, "
                    f"plain device-plugin count {counted}"
                )
            limits.update(names)
            ascend.check_vnpu_count(limits)
        else:  # plain, mig-single, and dra for a vendor without a DRA driver: whole-device count
            if mode == "dra" and vendor in DRA_DRIVERS:  # Hygon: its driver is mode hcu-dra
                notes.append(
                    f"{vendor}: DRA driver {DRA_DRIVERS[vendor].driver} is mode {DRA_DRIVERS[vendor].mode}, "
                    f"plain device-plugin count {resource}"
                )
            elif mode == "dra":
                notes.append(f"{vendor}: no DRA driver known, plain device-plugin count {resource}")
            limits[resource] += len(allocs)
    return dict(limits), hami, notes


def amd_mode_refusal(allocation: Any) -> str:
    """Why the AMD card of ``allocation`` cannot give what it asks for, from what cluster sync learned
    the AMD GPU DRA driver publishes for it (``Device.dra_mig_devices``: ``type`` / ``profile`` per
    device, apps.clusters.sync ``_amd_learn``); "" when it can or nothing was learned (no guess).

    The driver publishes a card in SPX as one ``type: amdgpu`` device and a card in any other mode as
    its partitions only (ROCm/k8s-gpu-dra-driver cmd/gpu-kubeletplugin/discovery.go), so a claim for
    another mode's partition, or for the whole of a partitioned card, matches no device and its pod
    would stay Pending."""
    device = allocation.device
    learned = getattr(device, "dra_mig_devices", None) or []
    published = [d for d in learned if isinstance(d, dict) and d.get("type")]
    if getattr(device, "vendor", "") != "amd" or not published:
        return ""
    card = f"{device.pci_bus_id or device.index}"
    modes = ", ".join(sorted({d.get("profile") or "?" for d in published if d["type"] == "amdgpu-partition"}))
    profile = allocation.partition_profile or ""
    if profile:
        if any(d["type"] == "amdgpu-partition" and d.get("profile") == profile for d in published):
            return ""
        return _(
            "AMD card %(card)s runs in %(modes)s: its DRA driver publishes no %(profile)s partition of it, "
            "so the pod would stay Pending. Ask for a partition template of the card's mode, or change "
            "the card's mode on the node and let cluster sync see it."
        ) % {"card": card, "modes": modes or _("SPX (a whole card)"), "profile": profile}
    if any(d["type"] == "amdgpu" for d in published):
        return ""
    return _(
        "AMD card %(card)s is partitioned (%(modes)s): its DRA driver publishes only the partitions, not "
        "the whole card, so the pod would stay Pending. Ask for a partition template of that mode, or "
        "for a card in SPX mode."
    ) % {"card": card, "modes": modes}


def device_ref(allocation: Any) -> str:
    device = allocation.device
    return device.uuid or f"{allocation.node.name}/{device.vendor}{device.index}"
