"""The inventory API: scoping, agent tokens, bad input, and no N+1 on lists."""

from __future__ import annotations

import pytest

from apps.accounts.models import ApiToken
from apps.inventory.models import AgentToken, Cluster, Device, DeviceEvent, Node, Pool
from tests.api_contract import APIContract, Case, Endpoint
from tests.inventory.test_discovery import gpu_csv, uuids

pytestmark = pytest.mark.django_db


@pytest.fixture
def fleet(cluster, make_user, make_project):
    """Two projects: vision owns a pool with one node; a shared node holds a shared and an owned card."""
    alice, bob = make_user("alice"), make_user("bob")
    vision = make_project("vision", members=[alice])
    nlp = make_project("nlp", members=[bob])
    shared_pool = Pool.objects.create(cluster=cluster, name="shared", slug="shared")
    vision_pool = Pool.objects.create(cluster=cluster, name="vision", slug="vision", owner_project=vision)
    shared_node = Node.objects.create(cluster=cluster, pool=shared_pool, name="shared-01")
    vision_node = Node.objects.create(cluster=cluster, pool=vision_pool, name="vision-01")
    Device.objects.create(node=shared_node, vendor="nvidia", index=0, uuid="GPU-shared-0")
    Device.objects.create(node=shared_node, vendor="nvidia", index=1, uuid="GPU-nlp-1", owner_project=nlp)
    Device.objects.create(node=vision_node, vendor="nvidia", index=0, uuid="GPU-vision-0")
    return {"alice": alice, "bob": bob, "vision": vision, "nlp": nlp}


def agent_key(cluster) -> str:
    key = "sca_" + ApiToken.generate_key("x")
    AgentToken.objects.create(
        cluster=cluster, name="agent", prefix=key[:10], key_hash=AgentToken.hash_key(key)
    )
    return key


def test_members_see_shared_and_own_devices_only(api_client, fleet):
    api_client.force_authenticate(fleet["alice"])
    seen = {d["uuid"] for d in api_client.get("/api/inventory/devices/").json()["results"]}
    assert seen == {"GPU-shared-0", "GPU-vision-0"}
    api_client.force_authenticate(fleet["bob"])
    seen = {d["uuid"] for d in api_client.get("/api/inventory/devices/").json()["results"]}
    assert seen == {"GPU-shared-0", "GPU-nlp-1"}
    nodes = {n["name"] for n in api_client.get("/api/inventory/nodes/").json()["results"]}
    assert nodes == {"shared-01"}


def test_a_user_of_no_project_sees_no_device(api_client, fleet, make_user):
    api_client.force_authenticate(make_user("eve"))
    assert api_client.get("/api/inventory/devices/").json()["count"] == 0


def test_anonymous_inventory_calls_get_401(api_client, fleet):
    for path in ("/api/inventory/nodes/", "/api/inventory/device-events/"):  # devices: TestDevices
        assert api_client.get(path).status_code == 401


class TestDevices(APIContract):
    """Another project's card is a 404 for alice; cordon and retire are staff's (tests/api_contract.py)."""

    endpoint = Endpoint(
        list="/api/inventory/devices/",
        detail="/api/inventory/devices/{pk}/",
        staff_writes=(
            ("post", "/api/inventory/devices/{pk}/cordon/", {"reason": "x"}),
            ("post", "/api/inventory/devices/{pk}/retire/", {"reason": "x"}),
        ),
        not_allowed=(("post", "/api/inventory/devices/"), ("delete", "/api/inventory/devices/{pk}/")),
        json_write=("post", "/api/inventory/devices/{pk}/cordon/"),
    )

    @pytest.fixture
    def case(self, fleet, staff_user):
        pk = {d.uuid: d.pk for d in Device.objects.all()}
        return Case(
            pk=pk["GPU-nlp-1"],
            member=fleet["bob"],
            outsider=fleet["alice"],
            staff=staff_user,
            member_sees=[pk["GPU-shared-0"], pk["GPU-nlp-1"]],
            outsider_sees=[pk["GPU-shared-0"], pk["GPU-vision-0"]],
            count=DeviceEvent.objects.count,
        )


def test_an_agent_token_posts_reports_for_its_cluster_and_nothing_else(api_client, cluster):
    key = agent_key(cluster)
    api_client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    response = api_client.post(
        "/api/inventory/node-reports/",
        {"node": "gpu-new", "kind": "nvidia-smi-csv", "text": gpu_csv(uuids(2))},
        format="json",
    )
    assert response.status_code == 201, response.content
    assert response.json()["result"]["created"] == 2
    node = Node.objects.get(name="gpu-new")
    assert node.cluster == cluster
    # A node an agent registers takes no work until staff approve it.
    assert node.pending_approval and response.json()["node_pending_approval"] is True
    # The same token reads nothing.
    assert api_client.get("/api/inventory/devices/").status_code == 403
    assert api_client.get("/api/inventory/node-reports/").status_code == 403
    assert api_client.get("/api/accounts/me/").status_code == 403
    # And cannot post for another cluster.
    Cluster.objects.create(name="Other", slug="other")
    other = api_client.post(
        "/api/inventory/node-reports/",
        {"node": "x", "cluster": "other", "kind": "nvidia-smi-csv", "text": gpu_csv(uuids(1))},
        format="json",
    )
    assert other.status_code == 403


def test_agent_authentication_leaves_user_keys_alone_and_refuses_unknown_agent_keys(
    api_client, cluster, make_user
):
    from rest_framework.test import APIRequestFactory

    from apps.accounts.services import api_token_create
    from apps.inventory.authentication import AgentPrincipal, AgentTokenAuthentication

    user = make_user()
    _, user_key = api_token_create(user=user, name="ci", actor=user)
    factory = APIRequestFactory()
    auth = AgentTokenAuthentication()
    assert auth.authenticate(factory.get("/", HTTP_AUTHORIZATION=f"Token {user_key}")) is None
    key = agent_key(cluster)
    principal, token = auth.authenticate(factory.get("/", HTTP_AUTHORIZATION=f"Bearer {key}"))
    assert isinstance(principal, AgentPrincipal) and principal.cluster == cluster
    assert token.last_used_at is None and AgentToken.objects.get(pk=token.pk).last_used_at is not None
    # Through the API: a user key still reaches its user, an unknown agent key is a 401 that says so.
    api_client.credentials(HTTP_AUTHORIZATION=f"Token {user_key}")
    assert api_client.get("/api/accounts/me/").json()["username"] == user.username
    api_client.credentials(HTTP_AUTHORIZATION="Token sca_" + "x" * 43)
    response = api_client.get("/api/inventory/devices/")
    assert response.status_code == 401
    assert response.json()["error"]["message"] == "Invalid or revoked agent token."
    assert response["WWW-Authenticate"] == "Token"


def test_the_schema_describes_the_user_and_the_agent_token_schemes(api_client, staff_user):
    import yaml

    api_client.force_authenticate(staff_user)
    schema = yaml.safe_load(api_client.get("/api/schema/").content)
    schemes = schema["components"]["securitySchemes"]
    assert {"tokenAuth", "agentTokenAuth"} <= set(schemes)
    assert "sca_" in schemes["agentTokenAuth"]["description"]


def test_a_member_cannot_post_node_reports(api_client, fleet):
    api_client.force_authenticate(fleet["alice"])
    response = api_client.post(
        "/api/inventory/node-reports/",
        {"node": "shared-01", "kind": "nvidia-smi-csv", "text": gpu_csv(uuids(1))},
        format="json",
    )
    assert response.status_code == 403


def test_a_malformed_report_is_a_400_naming_the_line_and_writes_nothing(api_client, cluster, staff_user):
    api_client.force_authenticate(staff_user)
    before = Device.objects.count()
    response = api_client.post(
        "/api/inventory/node-reports/",
        {
            "node": "gpu-x",
            "cluster": "prod",
            "kind": "nvidia-smi-csv",
            "text": gpu_csv(uuids(2)) + "2, broken\n",
        },
        format="json",
    )
    assert response.status_code == 400
    body = response.json()["error"]
    assert body["code"] == "parse_error"
    assert "line 3" in body["message"]
    assert Device.objects.count() == before
    assert not Node.objects.filter(name="gpu-x").exists()


def test_an_unknown_kind_and_an_empty_text_are_field_errors(api_client, cluster, staff_user):
    api_client.force_authenticate(staff_user)
    response = api_client.post(
        "/api/inventory/node-reports/", {"node": "n", "kind": "dmesg", "text": "x"}, format="json"
    )
    assert response.status_code == 400
    assert "kind" in response.json()["error"]["details"]
    response = api_client.post(
        "/api/inventory/node-reports/", {"node": "n", "kind": "nvidia-smi-csv", "text": "   "}, format="json"
    )
    assert response.status_code == 400


def test_device_list_query_count_does_not_grow_with_rows(
    api_client, cluster, staff_user, django_assert_max_num_queries
):
    api_client.force_authenticate(staff_user)
    node = Node.objects.create(cluster=cluster, name="big")

    def count_queries(n: int) -> int:
        for i in range(Device.objects.filter(node=node).count(), n):
            Device.objects.create(node=node, vendor="nvidia", index=i, uuid=f"GPU-{i}")
        from django.db import connection
        from django.test.utils import CaptureQueriesContext

        with CaptureQueriesContext(connection) as ctx:
            assert api_client.get("/api/inventory/devices/?page_size=100").status_code == 200
        return len(ctx.captured_queries)

    few, many = count_queries(3), count_queries(40)
    assert few == many
    with django_assert_max_num_queries(few):
        api_client.get("/api/inventory/nodes/?page_size=100")


def test_node_list_query_count_does_not_grow_with_rows(api_client, cluster, staff_user):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    api_client.force_authenticate(staff_user)

    def count_queries(n: int) -> int:
        for i in range(Node.objects.count(), n):
            node = Node.objects.create(cluster=cluster, name=f"n{i}")
            Device.objects.create(node=node, vendor="nvidia", index=0, uuid=f"GPU-n{i}")
        with CaptureQueriesContext(connection) as ctx:
            assert api_client.get("/api/inventory/nodes/?page_size=100").status_code == 200
        return len(ctx.captured_queries)

    assert count_queries(3) == count_queries(30)


def test_staff_put_a_node_into_maintenance_and_members_cannot(api_client, fleet, staff_user):
    node = Node.objects.get(name="shared-01")
    api_client.force_authenticate(fleet["alice"])
    assert (
        api_client.post(f"/api/inventory/nodes/{node.pk}/status/", {"status": "maintenance"}).status_code
        == 403
    )
    api_client.force_authenticate(staff_user)
    response = api_client.post(
        f"/api/inventory/nodes/{node.pk}/status/",
        {"status": "maintenance", "reason": "PSU swap"},
        format="json",
    )
    assert response.status_code == 200, response.content
    assert response.json()["status"] == "maintenance"
    bad = api_client.post(f"/api/inventory/nodes/{node.pk}/status/", {"status": "sleeping"}, format="json")
    assert bad.status_code == 400


def test_the_openapi_schema_and_docs_are_served_to_users(api_client, client, staff_user):
    api_client.force_authenticate(staff_user)
    schema = api_client.get("/api/schema/?format=json")
    assert schema.status_code == 200
    client.force_login(staff_user)
    docs = client.get("/api/docs/")
    assert docs.status_code == 200
    assert b"swagger" in docs.content.lower()


def test_the_precheck_endpoint_answers_with_the_table_row_or_the_precise_reason(
    api_client, cluster, staff_user
):
    node = Node.objects.create(cluster=cluster, name="gpu-old", driver_version="535.104.05")
    Device.objects.create(node=node, vendor="nvidia", index=0, uuid="GPU-old-0")
    api_client.force_authenticate(staff_user)
    url = f"/api/inventory/nodes/{node.pk}/precheck/"
    refused = api_client.get(url, {"requirement": "cuda 12.4"}).json()
    assert refused["ok"] is False
    assert "driver 535.104.05 < 550.54.14 required by CUDA 12.4" in refused["reason"]
    assert api_client.get(url, {"requirement": "cuda 12.2"}).json()["ok"] is True
    mvc = api_client.get(url, {"requirement": "cuda 12.4", "allow_minor_version_compat": "true"}).json()
    assert mvc["ok"] is True and "minor-version" in mvc["reason"]
    bad = api_client.get(url, {"requirement": "tensorflow please"})
    assert bad.status_code == 400


def test_a_cluster_with_an_unknown_plugin_mode_is_invalid():
    from django.core.exceptions import ValidationError

    cluster = Cluster(name="X", slug="x", device_plugin_modes={"nvidia": "magic"})
    with pytest.raises(ValidationError) as excinfo:
        cluster.full_clean()
    assert "magic" in str(excinfo.value)
    Cluster(
        name="Y", slug="y", device_plugin_modes={"nvidia": "mig-mixed", "huawei": "ascend-vnpu"}
    ).full_clean()
