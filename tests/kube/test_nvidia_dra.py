"""NVIDIA DRA driver details checked against the driver's own chart (NVIDIA/k8s-dra-driver-gpu @
22407113785e78c7763b4637689a201eb39c6199, deployments/helm/dra-driver-nvidia-gpu/templates/)."""

from __future__ import annotations

import kubernetes_validate

from apps.clusters import manifests as m


def test_device_classes_carry_the_extended_resource_name_the_chart_sets():
    classes = {c["metadata"]["name"]: c for c in m.device_class_manifests()}
    # deviceclass-gpu.yaml: `extendedResourceName: nvidia.com/gpu` when rendering resource.k8s.io/v1.
    assert classes["gpu.nvidia.com"]["apiVersion"] == "resource.k8s.io/v1"
    assert classes["gpu.nvidia.com"]["spec"]["extendedResourceName"] == "nvidia.com/gpu"
    # deviceclass-mig.yaml sets none; AMD's copy carries none either.
    assert "extendedResourceName" not in classes["mig.nvidia.com"]["spec"]
    assert "extendedResourceName" not in classes["gpu.amd.com"]["spec"]
    for obj in classes.values():
        for version in ("1.34.0", "1.35.0", "1.36.0"):
            kubernetes_validate.validate(obj, version, strict=True)
