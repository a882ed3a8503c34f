"""Server-rendered ledger pages: access, scoping, rendering, query counts, language."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth import get_user_model
from django.contrib.staticfiles import finders
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from apps.accounts.models import Department, Membership, Project
from apps.catalog.models import DeviceModel
from apps.core.filters import PageFilterForm
from apps.inventory.models import Cluster, Device, DeviceEvent, DeviceLink, Node, Pool

_seq = itertools.count(1)


# ---------------------------------------------------------------------------- data helpers


def make_user(username: str, *, staff: bool = False, projects=()):
    user = get_user_model().objects.create_user(username=username, password="pw-for-tests-1", is_staff=staff)
    for project in projects:
        Membership.objects.create(user=user, project=project, role=Membership.Role.MEMBER)
    return user


def make_project(slug: str) -> Project:
    department, _ = Department.objects.get_or_create(slug="research", defaults={"name": "Research"})
    return Project.objects.create(department=department, name=slug.title(), slug=slug, namespace=slug)


def make_cluster(slug: str = "bj1") -> Cluster:
    return Cluster.objects.get_or_create(slug=slug, defaults={"name": slug.upper()})[0]


def make_pool(cluster: Cluster, slug: str, *, owner: Project | None = None) -> Pool:
    return Pool.objects.create(cluster=cluster, name=slug, slug=slug, owner_project=owner)


def make_node(cluster: Cluster, name: str, *, pool: Pool | None = None, **fields) -> Node:
    fields.setdefault("driver_version", "550.54.15")
    fields.setdefault("cuda_version", "12.4")
    fields.setdefault("cpu_arch", "x86_64")
    fields.setdefault("last_report_at", timezone.now() - timedelta(minutes=5))
    return Node.objects.create(cluster=cluster, pool=pool, name=name, **fields)


def make_device_model(name: str = "H100 80GB HBM3", vendor: str = "nvidia", kind: str = "gpu") -> DeviceModel:
    slug = name.lower().replace(" ", "-")
    return DeviceModel.objects.get_or_create(
        name=name, defaults={"vendor": vendor, "kind": kind, "slug": slug}
    )[0]


def make_device(node: Node, index: int, *, model: DeviceModel | None = None, **fields) -> Device:
    n = next(_seq)
    fields.setdefault("vendor", model.vendor if model else "nvidia")
    fields.setdefault("uuid", f"GPU-{n:08d}-aaaa-bbbb-cccc")
    fields.setdefault("serial", f"SN{n:010d}")
    fields.setdefault("raw_model_name", model.name if model else "Mystery Accelerator X")
    fields.setdefault("model_unrecognized", model is None)
    fields.setdefault("pci_bus_id", f"0000:{index + 0x18:02X}:00.0")
    fields.setdefault("numa_node", index // 4)
    return Device.objects.create(node=node, index=index, device_model=model, **fields)


def make_link(a: Device, b: Device, link: str = "NV18") -> DeviceLink:
    kind = "NV" if link.startswith("NV") and link != "NODE" else link
    count = int(link[2:]) if kind == "NV" else None
    return DeviceLink.objects.create(
        node=a.node, device_a=a, device_b=b, kind=kind, link=link, nvlink_count=count
    )


def make_event(
    node: Node, device: Device | None = None, *, message: str = "registered", **fields
) -> DeviceEvent:
    fields.setdefault("kind", DeviceEvent.Kind.REGISTERED)
    return DeviceEvent.objects.create(node=node, device=device, message=message, **fields)


@pytest.fixture
def world(db):
    """Two projects; a shared pool, a pool owned by B; shared cards and cards owned by A and by B."""
    project_a = make_project("alpha")
    project_b = make_project("bravo")
    cluster = make_cluster("bj1")
    shared_pool = make_pool(cluster, "training")
    b_pool = make_pool(cluster, "bravo-private", owner=project_b)
    h100 = make_device_model()
    shared_node = make_node(
        cluster, "gpu-shared-01", pool=shared_pool, labels={"suanchi.io/pool": "training"}
    )
    b_node = make_node(cluster, "gpu-bravo-only-01", pool=b_pool)
    shared_card = make_device(shared_node, 0, model=h100, uuid="GPU-shared-0000")
    a_card = make_device(shared_node, 1, model=h100, uuid="GPU-alpha-0001", owner_project=project_a)
    b_card = make_device(shared_node, 2, model=h100, uuid="GPU-bravo-0002", owner_project=project_b)
    odd_card = make_device(
        shared_node, 3, model=None, uuid="GPU-odd-0003", raw_model_name="Mystery Accelerator X"
    )
    b_pool_card = make_device(b_node, 0, model=h100, uuid="GPU-bravopool-0000")
    make_link(shared_card, a_card, "NV18")
    make_link(shared_card, b_card, "NV18")
    make_link(a_card, odd_card, "SYS")
    make_event(shared_node, shared_card, message="card registered on shared node")
    make_event(shared_node, b_card, message="bravo card degraded", kind=DeviceEvent.Kind.HEALTH_CHANGED)
    make_event(b_node, b_pool_card, message="bravo pool card registered")
    return {
        "project_a": project_a,
        "project_b": project_b,
        "shared_node": shared_node,
        "b_node": b_node,
        "shared_card": shared_card,
        "a_card": a_card,
        "b_card": b_card,
        "odd_card": odd_card,
        "b_pool_card": b_pool_card,
        "staff": make_user("ops", staff=True),
        "member_a": make_user("alice", projects=[project_a]),
        "outsider": make_user("nobody"),
    }


def page_urls(world) -> dict[str, str]:
    return {
        "fleet": reverse("inventory:fleet"),
        "node-list": reverse("inventory:node-list"),
        "node-detail": reverse("inventory:node-detail", args=[world["shared_node"].pk]),
        "device-list": reverse("inventory:device-list"),
        "device-detail": reverse("inventory:device-detail", args=[world["a_card"].pk]),
    }


# ---------------------------------------------------------------------------- access


@pytest.mark.django_db
def test_anonymous_users_are_redirected_to_login(client, world):
    for url in page_urls(world).values():
        response = client.get(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith(reverse("login") + "?next=")


@pytest.mark.django_db
@pytest.mark.parametrize("who", ["staff", "member_a"])
def test_every_page_renders_for_staff_and_members(client, world, who):
    client.force_login(world[who])
    for name, url in page_urls(world).items():
        response = client.get(url)
        assert response.status_code == 200, name
        assert response["Content-Type"].startswith("text/html")
        assert b'<html lang="en">' in response.content


@pytest.mark.django_db
def test_outsider_sees_the_empty_state_and_no_device(client, world):
    client.force_login(world["outsider"])
    fleet = client.get(reverse("inventory:fleet")).content.decode()
    assert "No cards to show yet" in fleet
    assert "not a member of any project" in fleet
    assert "plotly-graph-div" not in fleet
    devices = client.get(reverse("inventory:device-list")).content.decode()
    assert "GPU-shared-0000" not in devices
    nodes = client.get(reverse("inventory:node-list")).content.decode()
    assert "gpu-shared-01" not in nodes
    assert client.get(reverse("inventory:node-detail", args=[world["shared_node"].pk])).status_code == 404
    assert client.get(reverse("inventory:device-detail", args=[world["shared_card"].pk])).status_code == 404


@pytest.mark.django_db
def test_staff_empty_state_tells_how_to_load_data(client, db):
    client.force_login(make_user("ops", staff=True))
    body = client.get(reverse("inventory:fleet")).content.decode()
    assert "python manage.py load_demo" in body
    assert "node report" in body


@pytest.mark.django_db
def test_member_with_nothing_shared_is_told_so(client, db):
    client.force_login(make_user("carol", projects=[make_project("charlie")]))
    body = client.get(reverse("inventory:fleet")).content.decode()
    assert "No cards are shared with your projects yet" in body


@pytest.mark.django_db
def test_a_member_does_not_see_another_projects_cards_or_pools(client, world):
    client.force_login(world["member_a"])

    nodes = client.get(reverse("inventory:node-list")).content.decode()
    assert "gpu-shared-01" in nodes
    assert "gpu-bravo-only-01" not in nodes

    devices = client.get(reverse("inventory:device-list")).content.decode()
    assert "GPU-shared-0000" in devices
    assert "GPU-alpha-0001" in devices
    assert "GPU-bravo-0002" not in devices
    assert "GPU-bravopool-0000" not in devices

    node = client.get(reverse("inventory:node-detail", args=[world["shared_node"].pk])).content.decode()
    assert "GPU-alpha-0001" in node
    assert "GPU-bravo-0002" not in node
    assert "bravo card degraded" not in node

    assert client.get(reverse("inventory:node-detail", args=[world["b_node"].pk])).status_code == 404
    assert client.get(reverse("inventory:device-detail", args=[world["b_card"].pk])).status_code == 404
    assert client.get(reverse("inventory:device-detail", args=[world["b_pool_card"].pk])).status_code == 404

    fleet = client.get(reverse("inventory:fleet"))
    assert fleet.context["summary"]["device_total"] == 3  # shared, alpha's and the unrecognized one
    assert "bravo pool card registered" not in fleet.content.decode()


@pytest.mark.django_db
def test_staff_see_every_node_and_card(client, world):
    client.force_login(world["staff"])
    devices = client.get(reverse("inventory:device-list")).content.decode()
    for uuid in ("GPU-shared-0000", "GPU-alpha-0001", "GPU-bravo-0002", "GPU-bravopool-0000"):
        assert uuid in devices
    assert "gpu-bravo-only-01" in client.get(reverse("inventory:node-list")).content.decode()


# ---------------------------------------------------------------------------- layout


@pytest.mark.django_db
def test_the_layout_has_navigation_logout_form_and_language_switcher(client, world):
    client.force_login(world["member_a"])
    body = client.get(reverse("inventory:fleet")).content.decode()
    assert 'href="/api/docs/"' in body
    assert f'action="{reverse("logout")}" method="post"' in body
    assert "csrfmiddlewaretoken" in body
    assert f'action="{reverse("set_language")}"' in body
    assert 'value="zh-hans"' in body
    assert "Asia/Shanghai" in body
    assert 'href="/admin/"' not in body  # not staff

    client.force_login(world["staff"])
    assert 'href="/admin/"' in client.get(reverse("inventory:fleet")).content.decode()


@pytest.mark.django_db
def test_the_fleet_page_loads_plotly_once_from_static_and_draws_the_chart(client, world):
    client.force_login(world["staff"])
    body = client.get(reverse("inventory:fleet")).content.decode()
    assert body.count("plotly-basic.min.js") == 1
    assert '<script src="/static/vendor/plotly/plotly-basic.min.js"></script>' in body
    assert 'class="plotly-graph-div"' in body
    # Drawn by static/js/charts.js from a JSON data block: no inline script under the site's CSP.
    assert '<script type="application/json" data-plotly-figure="fleet-cards-chart">' in body
    assert '<script src="/static/js/charts.js" defer></script>' in body
    assert "Plotly.newPlot" not in body
    assert "cdn.plot.ly" not in body


@pytest.mark.django_db
def test_the_fleet_table_counts_cards_by_model_and_flags_unknown_models(client, world):
    Device.objects.filter(pk=world["b_card"].pk).update(health=Device.Health.DEGRADED)
    client.force_login(world["staff"])
    response = client.get(reverse("inventory:fleet"))
    rows = {row.model: row for row in response.context["model_rows"]}
    assert rows["H100 80GB HBM3"].healthy == 3
    assert rows["H100 80GB HBM3"].degraded == 1
    assert rows["Mystery Accelerator X"].unrecognized
    assert response.context["summary"]["unrecognized"] == 1
    assert "unrecognized" in response.content.decode()


def test_plotly_js_is_served_from_our_static_files():
    path = finders.find("vendor/plotly/plotly-basic.min.js")
    assert path
    with open(path, "rb") as handle:
        assert b"plotly" in handle.read(4096).lower()


# ---------------------------------------------------------------------------- node pages


@pytest.mark.django_db
def test_node_list_filters_keep_their_values(client, world):
    client.force_login(world["staff"])
    response = client.get(reverse("inventory:node-list"), {"search": "bravo", "status": "ready"})
    body = response.content.decode()
    assert "gpu-bravo-only-01" in body
    assert "gpu-shared-01" not in body
    assert 'value="bravo"' in body
    assert '<option value="ready" selected>' in body


@pytest.mark.django_db
def test_node_list_filters_by_vendor_and_pool(client, world):
    cluster = make_cluster("bj1")
    npu_node = make_node(cluster, "npu-01", cann_version="8.0.RC2", driver_version="24.1.rc2")
    make_device(npu_node, 0, model=make_device_model("Ascend 910B3", vendor="huawei", kind="npu"))
    client.force_login(world["staff"])
    body = client.get(reverse("inventory:node-list"), {"vendor": "huawei"}).content.decode()
    assert "npu-01" in body
    assert "gpu-shared-01" not in body
    assert "8.0.RC2" in body
    pool = Pool.objects.get(slug="bravo-private")
    body = client.get(reverse("inventory:node-list"), {"pool": pool.pk}).content.decode()
    assert "gpu-bravo-only-01" in body
    assert "gpu-shared-01" not in body


@pytest.mark.django_db
def test_node_vendor_filter_only_counts_cards_the_user_can_see(client, world):
    """A shared node matches ``vendor`` only through a card the user can see, on the page and in
    the API (which share NodeFilterSet.filter_vendor): bravo's card does not reveal its vendor to
    alpha's member."""
    Device.objects.filter(pk=world["b_card"].pk).update(vendor="amd")
    client.force_login(world["member_a"])
    page = client.get(reverse("inventory:node-list"), {"vendor": "amd"}).content.decode()
    assert "gpu-shared-01" not in page
    api = client.get("/api/inventory/nodes/", {"vendor": "amd"}).json()["results"]
    assert api == []
    assert client.get("/api/inventory/nodes/", {"vendor": "nvidia"}).json()["results"]
    client.force_login(world["staff"])
    api = client.get("/api/inventory/nodes/", {"vendor": "amd"}).json()["results"]
    assert [node["name"] for node in api] == ["gpu-shared-01"]


@pytest.mark.django_db
def test_node_list_bad_filter_is_a_field_error_and_the_rest_applies(client, world):
    client.force_login(world["staff"])
    response = client.get(reverse("inventory:node-list"), {"status": "bogus", "search": "bravo"})
    assert response.status_code == 200 and isinstance(response.context["form"], PageFilterForm)
    assert response.context["form"]["status"].errors
    assert [node.name for node in response.context["page"].object_list] == ["gpu-bravo-only-01"]


@pytest.mark.django_db
def test_node_list_shows_card_counts_models_and_platform_time(client, world):
    node = world["shared_node"]
    Node.objects.filter(pk=node.pk).update(last_report_at=datetime(2025, 3, 1, 0, 30, tzinfo=UTC))
    client.force_login(world["staff"])
    response = client.get(reverse("inventory:node-list"))
    listed = {n.name: n for n in response.context["page"].object_list}
    assert listed["gpu-shared-01"].card_count == 4
    assert any(m["name"] == "H100 80GB HBM3" and m["count"] == 3 for m in listed["gpu-shared-01"].card_models)
    # 00:30 UTC is 08:30 in Asia/Shanghai, the platform time zone.
    assert "2025-03-01 08:30" in response.content.decode()


@pytest.mark.django_db
def test_member_card_count_only_counts_visible_cards(client, world):
    client.force_login(world["member_a"])
    response = client.get(reverse("inventory:node-list"))
    listed = {n.name: n for n in response.context["page"].object_list}
    assert listed["gpu-shared-01"].card_count == 3  # bravo's card on the shared node is not counted


def _nodes_with_cards(count: int, start: int = 0) -> None:
    cluster = make_cluster("bj1")
    h100 = make_device_model()
    for i in range(start, start + count):
        node = make_node(cluster, f"load-{i:03d}")
        make_device(node, 0, model=h100)
        make_device(node, 1, model=None)


@pytest.mark.django_db
@pytest.mark.parametrize("url_name", ["inventory:node-list", "inventory:device-list"])
@pytest.mark.parametrize("who", ["staff", "member_a"])
def test_list_query_counts_do_not_grow_with_rows(client, world, django_assert_max_num_queries, url_name, who):
    client.force_login(world[who])
    _nodes_with_cards(5)
    with CaptureQueriesContext(connection) as five:
        assert client.get(reverse(url_name)).status_code == 200
    _nodes_with_cards(25, start=5)
    with django_assert_max_num_queries(len(five.captured_queries)):
        response = client.get(reverse(url_name))
    assert response.status_code == 200
    assert len(response.context["page"].object_list) >= 30
    assert len(five.captured_queries) <= 16


@pytest.mark.django_db
def test_node_detail_shows_facts_devices_topology_and_events(client, world):
    node = world["shared_node"]
    Node.objects.filter(pk=node.pk).update(
        rack="R12",
        switch="leaf-07",
        taints=[{"key": "suanchi.io/maintenance", "value": "true", "effect": "NoSchedule"}],
        rdma_nics=[{"name": "mlx5_0", "numa_node": 0, "link": "RoCE"}],
    )
    client.force_login(world["staff"])
    response = client.get(reverse("inventory:node-detail", args=[node.pk]))
    body = response.content.decode()
    for text in (
        "R12",
        "leaf-07",
        "mlx5_0",
        "suanchi.io/maintenance=true:NoSchedule",
        "suanchi.io/pool=training",
    ):
        assert text in body
    assert "Mystery Accelerator X" in body and "unrecognized" in body
    assert world["shared_card"].pci_bus_id in body
    # The matrix: X on the diagonal, NV18 both ways, SYS, and a dash where nothing is known.
    rows = response.context["topology"]["rows"]
    assert len(rows) == 4
    assert rows[0]["cells"][0] == {"self": True}
    assert rows[0]["cells"][1]["link"].link == "NV18"
    assert rows[1]["cells"][0]["link"].link == "NV18"
    assert rows[1]["cells"][3]["link"].link == "SYS"
    assert rows[0]["cells"][3]["link"] is None
    assert 'class="topo topo--link-1"' in body
    assert 'class="topo topo--link-6"' in body
    assert 'class="topo topo--none"' in body
    assert "card registered on shared node" in body


@pytest.mark.django_db
def test_node_detail_of_an_unknown_node_is_404(client, world):
    client.force_login(world["staff"])
    assert client.get(reverse("inventory:node-detail", args=[999999])).status_code == 404


# ---------------------------------------------------------------------------- device pages


@pytest.mark.django_db
def test_device_list_filters_and_export_links_keep_the_filters(client, world):
    client.force_login(world["staff"])
    response = client.get(reverse("inventory:device-list"), {"search": "alpha", "health": "healthy"})
    body = response.content.decode()
    assert "GPU-alpha-0001" in body
    assert "GPU-shared-0000" not in body
    assert "/api/inventory/devices/export/?search=alpha&amp;health=healthy&amp;format=csv" in body
    assert "/api/inventory/devices/export/?search=alpha&amp;health=healthy&amp;format=xlsx" in body

    body = client.get(reverse("inventory:device-list"), {"unrecognized": "on"}).content.decode()
    assert "GPU-odd-0003" in body
    assert "GPU-alpha-0001" not in body

    body = client.get(reverse("inventory:device-list"), {"node": world["b_node"].pk}).content.decode()
    assert "GPU-bravopool-0000" in body
    assert "GPU-alpha-0001" not in body


@pytest.mark.django_db
def test_device_list_does_not_offer_invisible_nodes_as_filters(client, world):
    client.force_login(world["member_a"])
    response = client.get(reverse("inventory:device-list"))
    assert "gpu-bravo-only-01" not in response.content.decode()
    # Asking for an invisible node by id is a form error, not a leak.
    response = client.get(reverse("inventory:device-list"), {"node": world["b_node"].pk})
    assert "GPU-bravopool-0000" not in response.content.decode()
    assert response.context["form"]["node"].errors


@pytest.mark.django_db
def test_device_list_paginates_by_fifty(client, world):
    node = make_node(make_cluster("bj1"), "big-01")
    for i in range(55):
        make_device(node, i, model=make_device_model())
    client.force_login(world["staff"])
    first = client.get(reverse("inventory:device-list"), {"node": node.pk})
    assert len(first.context["page"].object_list) == 50
    assert f"?node={node.pk}&amp;page=2" in first.content.decode()
    second = client.get(reverse("inventory:device-list"), {"node": node.pk, "page": 2})
    assert len(second.context["page"].object_list) == 5


@pytest.mark.django_db
def test_device_detail_shows_facts_history_and_node_link(client, world):
    card = world["shared_card"]
    make_event(
        card.node,
        card,
        kind=DeviceEvent.Kind.VERSION_CHANGED,
        message="firmware upgraded",
        before={"firmware_version": "96.00.5E"},
        after={"firmware_version": "96.00.74"},
    )
    client.force_login(world["staff"])
    body = client.get(reverse("inventory:device-detail", args=[card.pk])).content.decode()
    assert card.uuid in body and card.serial in body
    assert reverse("inventory:node-detail", args=[card.node_id]) in body
    assert "firmware upgraded" in body
    assert "card registered on shared node" in body
    assert "96.00.74" in body
    assert "NV18" in body  # its links to other cards


# ---------------------------------------------------------------------------- login & language


@pytest.mark.django_db
def test_login_page_renders_and_reports_bad_credentials(client, world, settings):
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    page = client.get(reverse("login"))
    assert page.status_code == 200
    assert 'name="username"' in page.content.decode()
    bad = client.post(reverse("login"), {"username": "alice", "password": "wrong"})
    assert bad.status_code == 200
    body = bad.content.decode()
    assert "Login failed." in body
    assert "Please enter a correct username and password" in body
    good = client.post(reverse("login"), {"username": "alice", "password": "pw-for-tests-1"})
    assert good.status_code == 302
    assert good["Location"] == reverse("inventory:fleet")


@pytest.mark.django_db
def test_switching_to_chinese_translates_the_pages(client, world):
    client.force_login(world["member_a"])
    english = client.get(reverse("inventory:node-list")).content.decode()
    assert "Nodes" in english and "节点" not in english

    response = client.post(
        reverse("set_language"), {"language": "zh-hans", "next": reverse("inventory:fleet")}
    )
    assert response.status_code == 302

    fleet = client.get(reverse("inventory:fleet")).content.decode()
    assert '<html lang="zh-hans">' in fleet
    assert "集群总览" in fleet
    assert "节点" in fleet
    assert "台账" in fleet
    nodes = client.get(reverse("inventory:node-list")).content.decode()
    assert "资源池" in nodes
    assert "就绪" in nodes  # the "ready" status badge
    devices = client.get(reverse("inventory:device-list")).content.decode()
    assert "健康" in devices
