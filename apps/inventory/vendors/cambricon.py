"""Cambricon MLU: adapter facts only (no ``cnmon`` parser yet)."""

from __future__ import annotations

from .adapter import VendorAdapter, metric


class CambriconAdapter(VendorAdapter):
    vendor = "cambricon"
    display_name = "Cambricon"
    device_kind = "mlu"
    resource_name = "cambricon.com/mlu"
    visible_devices_env = "MLU_VISIBLE_DEVICES"
    # Not in seed 004; invented in the same style as nvidia-gpu / hygon-dcu.
    accelerator_label = "cambricon-mlu"
    brand_label = "cambricon"
    model_label_key = "mlu-model"
    exporter = {
        "name": "mlu-exporter",
        # Names with the default --metrics-prefix=mlu.
        "utilization": metric("mlu_utilization", unit="%"),
        "memory_used": metric("mlu_memory_used", unit="B"),
        "memory_total": metric("mlu_memory_total", unit="B"),
        "temperature": metric("mlu_temperature", unit="C"),
        "power": metric("mlu_power_usage", unit="W"),
        "device_id_labels": ["uuid", "mlu", "sn"],
        "pod_labels": {"pod": "pod", "namespace": "namespace", "container": "container"},
        "pod_labels_metric": "mlu_container",  # pod labels appear on this metric only
        "default_port": 30108,
        "path": "/metrics",
    }
    parsers = {}
