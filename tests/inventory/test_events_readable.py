"""Ledger events a person reads (issue 29 §5): before / after as "field: old → new" lines with
translated names and choice labels, in English and Chinese; the fleet's latest events grouped per node
and operation; the events page's filters, grouping and server-side paging, scoped like the ledger.

The structured payloads (``{"telemetry": {"xid": [79]}}``, node labels / taints) are the shapes
``apps.telemetry.services._health_events`` and ``apps.clusters.sync._sync_labels`` write.
"""

from __future__ import annotations

import pytest
from django.test import Client
from django.utils import translation

from apps.inventory.event_changes import event_changes, event_runs
from apps.inventory.models import Cluster, Device, DeviceEvent, Node, Pool
from apps.inventory.services import ledger

pytestmark = pytest.mark.django_db


@pytest.fixture
def fleet(make_project):
    cluster = Cluster.objects.create(name="Main", slug="main")
    shared = Pool.objects.create(cluster=cluster, name="shared", slug="shared")
    other_project = make_project("other")
    private = Pool.objects.create(
        cluster=cluster, name="private", slug="private", owner_project=other_project
    )
    a = Node.objects.create(cluster=cluster, pool=shared, name="gpu-a")
    b = Node.objects.create(cluster=cluster, pool=shared, name="gpu-b")
    hidden = Node.objects.create(cluster=cluster, pool=private, name="gpu-hidden")
    cards = {
        name: [Device.objects.create(node=node, vendor="nvidia", index=i) for i in range(3)]
        for name, node in (("a", a), ("b", b), ("hidden", hidden))
    }
    return {"a": a, "b": b, "hidden": hidden, "cards": cards, "other_project": other_project}


def lines_text(event, user=None) -> list[str]:
    out = []
    for line in event_changes(event, user=user):
        head = f"{line['field']}: " if line["field"] else ""
        out.append(head + (line["new"] if line["only_new"] else f"{line['old']} → {line['new']}"))
    return out


def test_pool_status_change_reads_as_labels_in_en_and_zh(fleet, staff_user):
    card = fleet["cards"]["a"][0]
    ledger.device_pool_status_set(device=card, pool_status=Device.PoolStatus.GRAY, actor=staff_user)
    event = DeviceEvent.objects.filter(device=card).latest("id")
    assert event.before == {"pool_status": "production"} and event.after == {"pool_status": "gray"}
    with translation.override("en"):
        assert lines_text(event) == ["Pool status: production → gray"]
    with translation.override("zh-hans"):
        assert lines_text(event) == ["入池状态: 生产 → 灰度"]


def test_cordon_booleans_owner_names_and_unchanged_fields(fleet, staff_user, make_user, make_project):
    card = fleet["cards"]["a"][1]
    ledger.device_cordon(device=card, cordoned=True, reason="fan noise", actor=staff_user)
    event = DeviceEvent.objects.filter(device=card).latest("id")
    with translation.override("en"):
        text = lines_text(event)
    assert "Cordoned: no → yes" in text
    assert any(line.startswith("Cordon reason: — → fan noise") for line in text)
    with translation.override("zh-hans"):
        assert "已封锁调度: 否 → 是" in lines_text(event)
    # A foreign key prints as the name; a member outside the project reads "another project".
    event = DeviceEvent.objects.create(
        node=card.node,
        device=card,
        kind=DeviceEvent.Kind.UPDATED,
        message="owner changed",
        before={"owner_project": None, "serial": "S1"},
        after={"owner_project": fleet["other_project"].pk, "serial": "S1"},
    )
    with translation.override("en"):
        assert lines_text(event, user=staff_user) == ["Owner: — → other"]
        outsider = make_user("outsider")
        make_project("mine", members=[outsider])
        assert lines_text(event, user=outsider) == ["Owner: — → another project"]


def test_structured_findings_and_labels_split_into_keys(fleet):
    node = fleet["a"]
    xid = DeviceEvent.objects.create(
        node=node,
        device=fleet["cards"]["a"][0],
        kind=DeviceEvent.Kind.HEALTH_CHANGED,
        severity=DeviceEvent.Severity.CRITICAL,
        message="telemetry: XID 79",
        after={"telemetry": {"xid": [79, 48]}},
    )
    labels = DeviceEvent.objects.create(
        node=node,
        kind=DeviceEvent.Kind.UPDATED,
        message="labels kept",
        before={"labels": {"zone": "a", "keep": "1"}, "taints": []},
        after={
            "labels": {"zone": "b", "keep": "1", "new": "x"},
            "taints": [{"key": "gpu", "value": "bad", "effect": "NoSchedule"}],
        },
    )
    with translation.override("en"):
        assert lines_text(xid) == ["Telemetry · XID: 79, 48"]
        assert lines_text(labels) == [
            "Kubernetes labels · new: — → x",
            "Kubernetes labels · zone: a → b",
            "Taints: — → gpu=bad:NoSchedule",
        ]
    with translation.override("zh-hans"):
        assert lines_text(xid) == ["遥测 · XID: 79, 48"]


def test_device_page_shows_lines_not_json(fleet, staff_user):
    card = fleet["cards"]["a"][0]
    ledger.device_pool_status_set(device=card, pool_status=Device.PoolStatus.GRAY, actor=staff_user)
    client = Client()
    client.force_login(staff_user)
    html = client.get(f"/inventory/devices/{card.pk}/").content.decode()
    assert "data-event-changes" in html
    assert '{"pool_status"' not in html and "&quot;pool_status&quot;" not in html
    assert "production</span> → <span" in html
    zh = client.get(f"/inventory/devices/{card.pk}/", HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert "入池状态" in zh and "灰度" in zh


def test_runs_group_consecutive_events_per_node_and_kind(fleet):
    a, b = fleet["a"], fleet["b"]
    for card in fleet["cards"]["a"]:
        DeviceEvent.objects.create(node=a, device=card, kind="registered", message=f"card {card.index}")
    DeviceEvent.objects.create(node=b, kind="maintenance", severity="warning", message="maintenance on")
    DeviceEvent.objects.create(node=a, kind="registered", severity="critical", message="late")
    runs = event_runs(DeviceEvent.objects.select_related("node", "device"))
    assert [(r["node"].name, r["kind"], len(r["events"]), r["severity"]) for r in runs] == [
        ("gpu-a", "registered", 1, "critical"),
        ("gpu-b", "maintenance", 1, "warning"),
        ("gpu-a", "registered", 3, "info"),
    ]


def _many_events(fleet):
    for node_key in ("a", "b", "hidden"):
        node = fleet[node_key]
        for i in range(3):
            DeviceEvent.objects.create(node=node, kind="maintenance", message=f"{node.name} m{i}")
        DeviceEvent.objects.create(node=node, kind="lost", severity="critical", message=f"{node.name} lost")


def test_events_page_groups_filters_and_pages(fleet, staff_user, monkeypatch):
    _many_events(fleet)
    client = Client()
    client.force_login(staff_user)
    page = client.get("/inventory/events/")
    html = page.content.decode()
    assert page.status_code == 200
    assert html.count('data-event-group="') == 3  # per node
    by_kind = client.get("/inventory/events/", {"group": "kind"}).content.decode()
    assert 'data-event-group="maintenance"' in by_kind and 'data-event-group="lost"' in by_kind
    assert by_kind.count('data-event-group="') == 2
    only = client.get("/inventory/events/", {"node": "GPU-B", "severity": "critical", "group": "none"})
    text = only.content.decode()
    assert "gpu-b lost" in text and "gpu-b m0" not in text and "gpu-a lost" not in text
    # Server-side paging over groups: one group a page.
    from apps.inventory import event_views

    monkeypatch.setattr(event_views, "GROUP_PAGE_SIZE", 1)
    first = client.get("/inventory/events/").content.decode()
    second = client.get("/inventory/events/", {"page": "2"}).content.decode()
    assert first.count('data-event-group="') == 1 and second.count('data-event-group="') == 1
    assert "Page 2 of 3" in second
    assert 'data-event-group="gpu-hidden"' in first  # the newest group first
    assert client.get("/inventory/events/", {"page": "99"}).status_code == 200  # the last page


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ({"kind": "exploded"}, "Kind: unknown value 'exploded'"),
        ({"severity": "fatal"}, "Severity: unknown value 'fatal'"),
        ({"group": "rack"}, "Grouping: unknown value 'rack'"),
        ({"page": "two"}, "page: give a whole number from 1"),
        ({"page": "0"}, "page: give a whole number from 1"),
    ],
)
def test_events_page_bad_filters_are_400(staff_user, fleet, query, message):
    client = Client()
    client.force_login(staff_user)
    response = client.get("/inventory/events/", query)
    assert response.status_code == 400
    assert message in response.content.decode().replace("&#x27;", "'")


def test_members_see_only_their_events(fleet, make_user, make_project):
    _many_events(fleet)
    member = make_user("member")
    make_project("vision", members=[member])
    client = Client()
    client.force_login(member)
    html = client.get("/inventory/events/", {"group": "kind"}).content.decode()
    assert "gpu-hidden" not in html and "gpu-a" in html
    assert "4 events" in client.get("/inventory/events/", {"group": "none", "node": "gpu-a"}).content.decode()
    # A hidden node's name finds nothing, like a name that does not exist.
    hidden = client.get("/inventory/events/", {"node": "gpu-hidden", "group": "none"}).content.decode()
    missing = client.get("/inventory/events/", {"node": "no-such", "group": "none"}).content.decode()
    assert "No events recorded yet." in hidden and "No events recorded yet." in missing
    fleet_page = client.get("/inventory/").content.decode()
    assert "gpu-hidden" not in fleet_page and 'data-event-run="gpu-a/' in fleet_page
    nobody = make_user("nobody")
    client.force_login(nobody)
    assert "0 groups" in client.get("/inventory/events/").content.decode()
