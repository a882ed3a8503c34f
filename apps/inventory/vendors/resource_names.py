"""Whole-device Kubernetes extended-resource names, for vendors with and without an adapter.

Vendors with an adapter carry ``resource_name`` themselves (``ADAPTERS[vendor].resource_name``):
since issue 28 that is every ``Vendor`` value Suanchi parses (MetaX, Iluvatar, Kunlunxin and Enflame
included; their sources are in each adapter's docstring). ``DEVICE_RESOURCE_NAMES`` holds vendors
without an adapter; a vendor whose plugin documents no plain device count maps to None (a manifest
must not guess a name for it). ``device_resource_name`` answers for both.
"""

from __future__ import annotations

DEVICE_RESOURCE_NAMES: dict[str, str | None] = {}


def device_resource_name(vendor: str) -> str | None:
    """The whole-device extended resource for ``vendor``, or None where none is documented."""
    from . import ADAPTERS  # the registry imports the vendor modules; import it when called

    adapter = ADAPTERS.get(vendor)
    if adapter is not None:
        return adapter.resource_name
    return DEVICE_RESOURCE_NAMES.get(vendor)
