"""Read-back of the card the device plugin chose (issue 18 item 3): exporter pod labels vs allocations."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from apps.inventory.models import Cluster, Device, DeviceEvent, Node
from apps.jobs.models import Allocation, JobEvent
from apps.telemetry.ingest import scrape_ingest
from apps.telemetry.models import JobUtilization, Quality
from apps.telemetry.readback import CONFLICT_MESSAGE, MOVED_MESSAGE
from apps.telemetry.selectors import measured_cu_hours
from tests.fixtures.telemetry import allocate, make_job

NOW = datetime(2026, 11, 29, 8, 0, tzinfo=UTC)
SCRAPED = NOW - timedelta(minutes=2)  # in the 07:55 window
NODE = "gpu-09"
MODEL = "NVIDIA H100 80GB HBM3"


def uuid_of(index: int) -> str:
    return f"GPU-9a9a9a9a-0000-0000-0000-00000000000{index}"


def dcgm_page(pods: dict[int, tuple[str, str]], util: dict[int, float]) -> str:
    """A dcgm-exporter page for an 8-GPU node in the exporter's own format: label order ``gpu``,
    ``UUID``, ``pci_bus_id``, ``device``, ``modelName``, ``Hostname``, extra labels, then the pod-resources
    labels ``container``, ``namespace``, ``pod`` on a GPU a pod holds (DCGM_EXPORTER_KUBERNETES=true).
    Sources: ../shared/reference/hardware-telemetry.md §1.1 (render_metrics.go label schema,
    transformation/const.go pod labels) and NVIDIA's dcgm-exporter documentation, "Enabling DCGM
    Exporter with Kubernetes" (docs.nvidia.com/datacenter/cloud-native/gpu-telemetry/latest/dcgm-exporter.html)."""
    families = [
        ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", lambda i: util.get(i, 0.0)),
        ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", lambda i: 70000 if i in pods else 0),
        ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", lambda i: 11000 if i in pods else 81000),
        ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", lambda i: 60 if i in pods else 31),
        ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", lambda i: 600.5 if i in pods else 70.25),
    ]
    lines = []
    for name, help_text, value in families:
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
        for i in range(8):
            labels = (
                f'gpu="{i}",UUID="{uuid_of(i)}",pci_bus_id="00000000:{0x18 + i:02X}:00.0",'
                f'device="nvidia{i}",modelName="{MODEL}",Hostname="{NODE}",DCGM_FI_DRIVER_VERSION="550.54.15"'
            )
            if i in pods:
                namespace, pod = pods[i]
                labels += f',container="main",namespace="{namespace}",pod="{pod}"'
            lines.append(f"{name}{{{labels}}} {value(i)}")
    return "\n".join(lines) + "\n"


@pytest.fixture
def node(db):
    cluster = Cluster.objects.create(name="Readback", slug="readback")
    node = Node.objects.create(cluster=cluster, name=NODE)
    cards = {
        i: Device.objects.create(
            node=node,
            vendor="nvidia",
            index=i,
            uuid=uuid_of(i),
            pci_bus_id=f"0000:{0x18 + i:02X}:00.0",
            memory_mib=81920,
        )
        for i in range(8)
    }
    return {"cluster": cluster, "node": node, "cards": cards}


@pytest.fixture
def vision(make_project):
    return make_project("vision")


def ingest(text: str):
    report, _ = scrape_ingest(text=text, source="dcgm", at=SCRAPED, now=NOW, scrape_interval_s=10)
    return report


def test_a_pod_on_another_free_card_moves_the_allocation_once(node, vision):
    cards = node["cards"]
    job = make_job(vision)
    alloc = allocate(job, cards[3], start=NOW - timedelta(hours=1))
    text = dcgm_page({5: ("vision", f"suanchi-{job.pk}-a0-x7k2p")}, {5: 91.0, 3: 0.0})

    report = ingest(text)

    alloc.refresh_from_db()
    assert (alloc.device_id, alloc.node_id, alloc.memory_mib) == (cards[5].pk, node["node"].pk, 81920)
    assert (report.placements_moved, report.placement_conflicts) == (1, 0)
    (event,) = JobEvent.objects.filter(job=job, data__readback="moved")
    assert event.message == MOVED_MESSAGE % {
        "actual": "GPU5",
        "allocated": "GPU3",
        "node": NODE,
        "job": job.pk,
    }
    assert event.message.startswith("Device plugin chose GPU5, not GPU3")
    assert event.data["msgid"] == MOVED_MESSAGE and event.data["params"]["actual"] == "GPU5"
    for card in (cards[3], cards[5]):
        (dev_event,) = DeviceEvent.objects.filter(device=card, after__readback__readback="moved")
        assert dev_event.message == event.message
    # Utilization follows the real card: the pod-labelled GPU5 series is the job's, exactly.
    (ju,) = JobUtilization.objects.filter(job=job)
    assert (ju.device_id, ju.quality, ju.busy_pct, ju.share) == (cards[5].pk, Quality.EXACT, 91.0, 1.0)

    # The same window again: nothing moves, no event is added.
    again = ingest(text)
    alloc.refresh_from_db()
    assert alloc.device_id == cards[5].pk
    assert (again.placements_moved, again.placement_conflicts) == (0, 0)
    assert JobEvent.objects.filter(job=job, data__readback="moved").count() == 1
    assert DeviceEvent.objects.filter(after__readback__readback="moved").count() == 2
    assert JobUtilization.objects.filter(job=job).count() == 1


def test_bills_use_the_real_cards_measurement_after_the_move(node, vision):
    cards = node["cards"]
    job = make_job(vision)
    alloc = allocate(job, cards[3], start=NOW - timedelta(hours=1))
    Allocation.objects.filter(pk=alloc.pk).update(compute_units=2)  # 2 CU for the whole card
    window = datetime(2026, 11, 29, 7, 55, tzinfo=UTC)
    # GPU3 (the ledger's card) idles at 10 %, GPU5 (the pod's) runs at 90 %.
    ingest(dcgm_page({5: ("vision", f"suanchi-{job.pk}-a0-x7k2p")}, {5: 90.0, 3: 10.0}))

    # Measured CU-hours = busy % × 5 min × coefficient 2: 0.9 × 300/3600 × 2 = 0.15 (GPU3 would give 0.016667).
    measured = measured_cu_hours(alloc.pk, window, window + timedelta(minutes=5))
    assert str(measured) == "0.150000"
    assert not JobUtilization.objects.filter(job=job, device=cards[3]).exists()


def test_earlier_windows_are_attributed_again_to_the_real_card(node, vision):
    cards = node["cards"]
    job = make_job(vision)
    alloc = allocate(job, cards[3], start=NOW - timedelta(hours=1))
    earlier = NOW - timedelta(minutes=20)
    # An earlier scrape with no pod labels (e.g. before the exporter had the pod-resources socket):
    # attributed, estimated, to the ledger's card.
    scrape_ingest(
        text=dcgm_page({}, {3: 5.0, 5: 80.0}), source="dcgm", at=earlier, now=NOW, scrape_interval_s=10
    )
    assert list(JobUtilization.objects.filter(job=job).values_list("device_id", flat=True)) == [cards[3].pk]

    ingest(dcgm_page({5: ("vision", f"suanchi-{job.pk}-a0-x7k2p")}, {5: 90.0}))

    alloc.refresh_from_db()
    assert alloc.device_id == cards[5].pk
    rows = sorted(JobUtilization.objects.filter(job=job).values_list("window_start", "device_id", "busy_pct"))
    assert rows == [
        (datetime(2026, 11, 29, 7, 40, tzinfo=UTC), cards[5].pk, 80.0),
        (datetime(2026, 11, 29, 7, 55, tzinfo=UTC), cards[5].pk, 90.0),
    ]


def test_a_real_card_held_by_another_job_is_a_conflict_raised_once(node, vision, make_project):
    cards = node["cards"]
    job = make_job(vision)
    other = make_job(make_project("search"), "serve")
    mine = allocate(job, cards[3], start=NOW - timedelta(hours=1))
    theirs = allocate(other, cards[5], start=NOW - timedelta(hours=1))
    text = dcgm_page({5: ("vision", f"suanchi-{job.pk}-a0-x7k2p")}, {5: 95.0})

    report = ingest(text)

    mine.refresh_from_db()
    theirs.refresh_from_db()
    assert (mine.device_id, theirs.device_id) == (cards[3].pk, cards[5].pk)  # nothing moved
    assert (report.placements_moved, report.placement_conflicts) == (0, 1)
    params = {"actual": "GPU5", "allocated": "GPU3", "node": NODE, "job": job.pk, "holders": str(other.pk)}
    expected = CONFLICT_MESSAGE % params
    assert expected.startswith("Double booking: device plugin chose GPU5, not GPU3")
    conflicts = DeviceEvent.objects.filter(kind=DeviceEvent.Kind.CONFLICT)
    assert sorted(conflicts.values_list("device_id", flat=True)) == sorted([cards[3].pk, cards[5].pk])
    assert {e.severity for e in conflicts} == {DeviceEvent.Severity.CRITICAL}
    assert {e.message for e in conflicts} == {expected}
    assert conflicts.get(device=cards[5]).after["readback"]["holders"] == [other.pk]
    # Both jobs' timelines show it.
    assert JobEvent.objects.get(job=job, data__readback="conflict").message == expected
    assert JobEvent.objects.get(job=other, data__readback="conflict").message == expected

    again = ingest(text)
    assert again.placement_conflicts == 0
    assert conflicts.count() == 2
    assert JobEvent.objects.filter(data__readback="conflict").count() == 2


def test_a_move_can_free_the_card_another_pod_runs_on(node, vision, make_project):
    cards = node["cards"]
    a = make_job(vision, "a")
    b = make_job(make_project("search"), "b")
    # The ledger: a on GPU3, b on GPU4. The plugin: a on GPU5 (free), b on GPU3 (a's, until a moves).
    alloc_a = allocate(a, cards[3], start=NOW - timedelta(hours=1))
    alloc_b = allocate(b, cards[4], start=NOW - timedelta(hours=1))
    ingest(
        dcgm_page(
            {5: ("vision", f"suanchi-{a.pk}-a0-aaaaa"), 3: ("search", f"suanchi-{b.pk}-7d9f8c6b5-bbbbb")},
            {5: 50.0, 3: 60.0},
        )
    )
    alloc_a.refresh_from_db()
    alloc_b.refresh_from_db()
    assert (alloc_a.device_id, alloc_b.device_id) == (cards[5].pk, cards[3].pk)
    assert not DeviceEvent.objects.filter(kind=DeviceEvent.Kind.CONFLICT).exists()


def test_pods_that_do_not_say_where_the_job_runs_move_nothing(node, vision, make_project):
    cards = node["cards"]
    job = make_job(vision)
    job.__class__.objects.filter(pk=job.pk).update(attempt=1)
    alloc = allocate(job, cards[3], start=NOW - timedelta(hours=1))
    stranger = make_project("search")
    ingest(
        dcgm_page(
            {
                5: ("vision", f"suanchi-{job.pk}-a0-old00"),  # the previous attempt's pod, still terminating
                6: (stranger.namespace, f"suanchi-{job.pk}-a1-xxxxx"),  # right name, another namespace
                7: ("vision", "jupyter-7d9f8c6b5-abcde"),  # not a Suanchi pod
            },
            {5: 40.0},
        )
    )
    alloc.refresh_from_db()
    assert alloc.device_id == cards[3].pk
    assert not DeviceEvent.objects.filter(after__readback__isnull=False).exists()
    assert not JobEvent.objects.filter(data__readback__isnull=False).exists()


def test_an_allocated_card_missing_from_the_scrape_is_not_moved(node, vision):
    cards = node["cards"]
    job = make_job(vision)
    # Two cards allocated; the page shows the pod on GPU0 (its card) and GPU5, GPU1 absent from the page.
    allocate(job, cards[0], start=NOW - timedelta(hours=1))
    alloc_1 = allocate(job, cards[1], start=NOW - timedelta(hours=1))
    text = dcgm_page({0: ("vision", f"suanchi-{job.pk}-a0-x"), 5: ("vision", f"suanchi-{job.pk}-a0-x")}, {})
    partial = "\n".join(line for line in text.splitlines() if 'gpu="1"' not in line) + "\n"
    ingest(partial)
    alloc_1.refresh_from_db()
    assert alloc_1.device_id == cards[1].pk  # no reading of GPU1 proves the pod is not there
    ingest(text)
    alloc_1.refresh_from_db()
    assert alloc_1.device_id == cards[5].pk


def test_a_shared_slice_moves_beside_another_jobs_slice_when_the_card_has_room(node, vision, make_project):
    cards = node["cards"]
    job = make_job(vision)
    neighbour = make_job(make_project("search"), "serve")
    mine = allocate(job, cards[3], start=NOW - timedelta(hours=1), milli=500, memory_mib=30 * 1024)
    allocate(neighbour, cards[5], start=NOW - timedelta(hours=1), milli=250, memory_mib=20 * 1024)
    ingest(dcgm_page({5: ("vision", f"suanchi-{job.pk}-a0-x7k2p")}, {5: 70.0}))
    mine.refresh_from_db()
    # 500 + 250 milli and 50 GiB of 80 fit on GPU5: a move, not a double booking.
    assert (mine.device_id, mine.memory_mib, mine.compute_milli) == (cards[5].pk, 30 * 1024, 500)
    assert not DeviceEvent.objects.filter(kind=DeviceEvent.Kind.CONFLICT).exists()
