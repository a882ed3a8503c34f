"""Whole-device Kubernetes extended-resource names, for vendors with and without an adapter.

Vendors with an adapter carry ``resource_name`` themselves (``ADAPTERS[vendor].resource_name``):
since issue 28 that is every ``Vendor`` value Suanchi parses (MetaX, Iluvatar, Kunlunxin and Enflame
included; their sources are in each adapter's docstring). ``DEVICE_RESOURCE_NAMES`` holds vendors
without an adapter; a vendor whose plugin documents no plain device count maps to None (a manifest
must not guess a name for it). ``device_resource_name`` answers for both.
"""

from __future__ import annotations

DEVICE_RESOURCE_NAMES: dict[str, str | None] = {}
# A device-plugin mode whose plugin advertises whole cards under another name than the adapter's:
# Hygon's HCU device plugin (mode ``hcu``) advertises ``hygon.com/hcu`` (HYGON-AI/k8s-hcu-device-plugin
# @ 42b18bd893d308704e8c9b0e0c95e981b79886dd internal/pkg/util/util.go ResourceNamespace "hygon.com",
# hcu.go GetResourceNamePrefix "hcu"), the DCU plugins ``hygon.com/dcu``.
MODE_RESOURCE_NAMES: dict[tuple[str, str], str] = {("hygon", "hcu"): "hygon.com/hcu"}


def device_resource_name(vendor: str, mode: str | None = None) -> str | None:
    """The whole-device extended resource for ``vendor`` (in the cluster's device-plugin ``mode``,
    when given), or None where none is documented."""
    from . import ADAPTERS  # the registry imports the vendor modules; import it when called

    if mode is not None and (vendor, mode) in MODE_RESOURCE_NAMES:
        return MODE_RESOURCE_NAMES[(vendor, mode)]
    adapter = ADAPTERS.get(vendor)
    if adapter is not None:
        return adapter.resource_name
    return DEVICE_RESOURCE_NAMES.get(vendor)
