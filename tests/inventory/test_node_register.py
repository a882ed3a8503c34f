"""One writer registers a node with its cards (issue 30): a node report, the ledger CSV and a cluster
sync each bring the same card in through ``apps.inventory.services.ledger.nodes``, and leave the same
shape of Node, Device and registration DeviceEvent (each in its own words)."""

from __future__ import annotations

import re
from pathlib import Path
from unittest import mock

import pytest

from apps.clusters.sync import cluster_sync_apply
from apps.inventory.models import Device, DeviceEvent, Node
from apps.inventory.services.discovery import node_report_ingest
from apps.inventory.services.ledger import IMPORT_COLUMNS, ledger_import_csv
from apps.inventory.services.ledger import nodes as register
from tests.inventory.test_discovery import gpu_csv, uuids
from tests.inventory.test_ledger import make_csv

pytestmark = pytest.mark.django_db

REGISTERED = {DeviceEvent.Kind.REGISTERED, DeviceEvent.Kind.IMPORTED}


def _by_report(cluster, staff_user) -> str:
    node_report_ingest(
        node_name="gpu-r", kind="nvidia-smi-csv", text=gpu_csv(uuids(1)), actor=staff_user, cluster=cluster
    )
    return "gpu-r"


def _by_csv(cluster, staff_user) -> str:
    row = {"cluster": cluster.slug, "node": "gpu-c", "vendor": "nvidia", "device_index": "0"}
    ledger_import_csv(data=make_csv([row], columns=IMPORT_COLUMNS), actor=staff_user)
    return "gpu-c"


def _by_sync(cluster, staff_user) -> str:
    node = {"metadata": {"name": "gpu-s"}, "status": {"capacity": {"nvidia.com/gpu": "1"}}}
    cluster_sync_apply(cluster=cluster, nodes=[node], actor=staff_user)
    return "gpu-s"


@pytest.mark.parametrize("path", [_by_report, _by_csv, _by_sync], ids=["report", "csv", "sync"])
def test_every_path_registers_the_node_and_its_card_through_the_one_writer(path, cluster, staff_user):
    with (
        mock.patch.object(register, "validate_and_save", wraps=register.validate_and_save) as node_check,
        mock.patch.object(register, "validate", wraps=register.validate) as card_check,
    ):
        name = path(cluster, staff_user)
    node = Node.objects.get(cluster=cluster, name=name)
    (card,) = Device.objects.filter(node=node)
    # One validation: the node whole, the card without the database constraints.
    assert [c.args[0] for c in node_check.call_args_list] == [node]
    assert [c.args[0] for c in card_check.call_args_list if isinstance(c.args[0], Device)] == [card]
    assert all(c.kwargs.get("validate_constraints") is False for c in card_check.call_args_list)
    # The same rows: a ready node with one healthy NVIDIA card #0 in the pool of the node.
    assert (node.status, node.cluster_id) == (Node.Status.READY, cluster.pk)
    assert (card.vendor, card.index, card.health) == ("nvidia", 0, Device.Health.HEALTHY)
    assert card.pool_status == Device._meta.get_field("pool_status").default
    # One registration event of the node, with the actor's label.
    (event,) = node.events.filter(device__isnull=True, kind__in=REGISTERED)
    assert event.severity == DeviceEvent.Severity.INFO and event.actor_label == staff_user.username
    assert node.name in event.message


def test_ledger_events_have_one_writer():
    """``DeviceEvent`` rows are written by ``apps.inventory.services.ledger.events`` only — the ledger,
    node reports, cluster sync, telemetry, reconcile and rollout alike (so the quarantine notification
    cannot be skipped)."""
    root = Path(__file__).resolve().parents[2]
    writer = root / "apps/inventory/services/ledger/events.py"
    bypasses = [
        f"{path.relative_to(root)}:{n}"
        for folder in ("apps", "worker")
        for path in sorted((root / folder).rglob("*.py"))
        if path != writer and "migrations" not in path.parts
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if re.search(r"DeviceEvent\.objects\.(create|bulk_create)\(|DeviceEvent\(.*\)\.save\(", line)
    ]
    assert not bypasses, bypasses
