"""Whole-device Kubernetes extended-resource names of vendors that have no adapter yet.

Vendors with an adapter carry ``resource_name`` themselves (``ADAPTERS[vendor].resource_name``);
``device_resource_name`` answers for both. A vendor whose plugin documents no plain device count
maps to None: a manifest must not guess a name for it.

Sources (Project-HAMi/HAMi at 4707fb02c91c545bc7343ce26dba4c32919f9a3e):

* metax: ``metax-tech.com/gpu`` — pkg/device/metax/config.go (``--metax-name`` default) and
  charts/hami/templates/scheduler/device-configmap.yaml (``resourceCountName``).
* kunlunxin: ``kunlunxin.com/xpu`` — pkg/device/kunlun/config.go (``--kunlun-name`` default) and
  charts/hami/values.yaml (``kunlunResourceName``).
* enflame: ``enflame.com/gcu`` — pkg/device/enflame/config.go (``--enflame-gcu-resource-name``
  default, "enflame gcu resource name"; ``enflame.com/vgcu`` is the legacy shared-GCU count there).
* iluvatar: None — HAMi names Iluvatar resources per model (``iluvatar.ai/BI-V150-vgpu``,
  ``iluvatar.ai/MR-V100-vgpu``, ... in device-configmap.yaml), which are shares, not a card count.
"""

from __future__ import annotations

DEVICE_RESOURCE_NAMES: dict[str, str | None] = {
    "metax": "metax-tech.com/gpu",
    "kunlunxin": "kunlunxin.com/xpu",
    "enflame": "enflame.com/gcu",
    "iluvatar": None,
}


def device_resource_name(vendor: str) -> str | None:
    """The whole-device extended resource for ``vendor``, or None where none is documented."""
    from . import ADAPTERS  # the registry imports the vendor modules; import it when called

    adapter = ADAPTERS.get(vendor)
    if adapter is not None:
        return adapter.resource_name
    return DEVICE_RESOURCE_NAMES.get(vendor)
