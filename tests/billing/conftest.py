"""Billing fixtures: the jobs test fleet plus helpers that place allocations at chosen times."""

from __future__ import annotations

import uuid
from datetime import datetime
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest

from apps.catalog.selectors import coefficient_on
from apps.jobs.models import Allocation, Job
from tests.jobs.conftest import a100, ascend, fleet, half_a100  # noqa: F401 - fixtures

SHANGHAI = ZoneInfo("Asia/Shanghai")


def local(*args) -> datetime:
    """An aware datetime in the platform time zone (Asia/Shanghai)."""
    return datetime(*args, tzinfo=SHANGHAI)


@pytest.fixture
def make_job(db):
    def make(project, *, name="train", template=None):
        return Job.objects.create(
            project=project,
            name=name,
            image="registry.local/x:1",
            request_kind="template" if template else "whole_cards",
            template=template,
            state="running",
        )

    return make


@pytest.fixture
def make_allocation(db):
    def make(job, device, start, end=None, *, milli=1000, units=None, replica=0):
        if units is None:
            # As apps.scheduling.services.allocation_compute_units: coefficient × share.
            units = (coefficient_on(device.device_model) * milli / 1000).quantize(Decimal("0.0001"))
        return Allocation.objects.create(
            job=job,
            device=device,
            node=device.node,
            replica=replica,
            whole_card=milli == 1000,
            memory_mib=1024,
            compute_milli=milli,
            compute_units=Decimal(units),
            trace_id=uuid.uuid4(),
            started_at=start,
            released_at=end,
        )

    return make


@pytest.fixture
def devices(fleet):  # noqa: F811
    from apps.inventory.models import Device

    return list(Device.objects.filter(node__name="gpu-01").order_by("index")) + list(
        Device.objects.filter(node__name="npu-01").order_by("index")
    )
