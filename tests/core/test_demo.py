"""load_demo: the seeds' fleet through the product's own paths, and idempotent."""

import pytest
from django.core.management import call_command

from apps.accounts.models import Membership, Project
from apps.core.models import ChangeRecord
from apps.inventory.models import AgentToken, Device, DeviceEvent, DeviceLink, Node

pytestmark = pytest.mark.django_db


def test_load_demo_builds_the_seed_fleet_and_a_second_run_changes_nothing(capsys):
    call_command("load_demo")
    out = capsys.readouterr().out
    assert "suanchi-admin" in out and "alice" in out and "sca_" in out
    names = set(Node.objects.values_list("name", flat=True))
    assert {"a100-sxm-01", "a100-pcie-01", "t4-infer-01", "ascend-910b-01", "dcu-01"} <= names
    assert Device.objects.filter(node__name="ascend-910b-01", vendor="huawei").count() == 8
    assert Device.objects.filter(node__name="a100-sxm-01", device_model__name="A100 80GB SXM4").count() == 8
    # NVLink topology arrived through the topo parser; a T4 went missing (掉卡); one model is unknown.
    assert DeviceLink.objects.filter(node__name="a100-sxm-01", link="NV12").count() == 28
    assert Device.objects.filter(health="lost").count() == 1
    assert Device.objects.filter(model_unrecognized=True, device_model__isnull=True).count() == 1
    ascend = Node.objects.get(name="ascend-910b-01")
    assert ascend.labels["accelerator"] == "huawei-npu"
    assert {"key": "accelerator", "value": "huawei-npu", "effect": "NoSchedule"} in ascend.taints
    assert ascend.cann_version == "8.0.RC3" and ascend.driver_version == "24.1.rc2"
    assert Project.objects.count() == 4 and Membership.objects.count() == 5
    assert AgentToken.objects.count() == 1
    # Issue 29 §9: no job starts before it was submitted, no card before its job; every PCI address
    # is one the import accepts (a bus is one byte).
    from django.db.models import F

    from apps.jobs.models import Allocation, Job

    assert not Job.objects.filter(started_at__lt=F("created_at")).exists()
    assert not Allocation.objects.filter(started_at__lt=F("job__created_at")).exists()
    assert all(
        len(bus.split(":")[1]) == 2
        for bus in Device.objects.exclude(pci_bus_id="").values_list("pci_bus_id", flat=True)
    )

    counts = (
        Device.objects.count(),
        DeviceEvent.objects.count(),
        ChangeRecord.objects.count(),
        DeviceLink.objects.count(),
    )
    call_command("load_demo")
    out = capsys.readouterr().out
    assert "sca_" not in out  # the agent key is shown once
    assert (
        Device.objects.count(),
        DeviceEvent.objects.count(),
        ChangeRecord.objects.count(),
        DeviceLink.objects.count(),
    ) == counts
