"""The fake API server's resource.k8s.io/v1 (Dynamic Resource Allocation, GA in Kubernetes 1.34)
through the official client: DeviceClass / ResourceClaim / ResourceClaimTemplate / ResourceSlice
validation, 404 / 409, and the test-driven allocator (resourceclaim controller + the scheduler's
DynamicResources plugin) honouring DeviceClass and request CEL selectors.

https://kubernetes.io/docs/concepts/scheduling-eviction/dynamic-resource-allocation/"""

from __future__ import annotations

import copy
import json

import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from tests.kube.fake_apiserver import (
    CelError,
    FakeApiServer,
    cel_compile,
    cel_evaluate,
    dra_sample,
    kubeconfig_for,
)
from tests.kube.helpers import fake_client_fixtures

DRIVER = "gpu.nvidia.com"
UUIDS = [f"GPU-{i:08d}-aaaa-bbbb-cccc-{i:012d}" for i in range(4)]


server, api, core = fake_client_fixtures()


@pytest.fixture
def dra(api):
    return k8s.ResourceV1Api(api)


def devices(node: str, offset: int = 0) -> list[dict]:
    # The NVIDIA driver's real GPU device (fixtures/dra/nvidia-gpu-resourceslice.yaml), one per card
    # with this test's UUIDs. No "index" attribute: the driver publishes none (an earlier version of
    # these slices carried one, an assumption of ours, not the driver's).
    (real,) = dra_sample("nvidia-gpu-resourceslice")["spec"]["devices"]
    out = []
    for i in range(2):
        device = copy.deepcopy(real)
        device["name"] = f"gpu-{i}"
        device["attributes"]["uuid"] = {"string": UUIDS[i + offset]}
        out.append(device)
    return out


@pytest.fixture
def cluster(server, core):
    server.add_node("gpu-1")
    server.add_node("gpu-2")
    server.add_resource_slice("gpu-1-gpu.nvidia.com", "gpu-1", DRIVER, devices("gpu-1"))
    server.add_resource_slice("gpu-2-gpu.nvidia.com", "gpu-2", DRIVER, devices("gpu-2", offset=2))
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "proj-a"}})
    server.objects("Namespace")
    return server


def device_class(name="gpu.nvidia.com", expression=f'device.driver == "{DRIVER}"'):
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }


def claim_spec(uuids=None, count=None, mode=None, cls="gpu.nvidia.com"):
    exactly: dict = {"deviceClassName": cls}
    if uuids:
        listed = ", ".join(json.dumps(u) for u in uuids)
        exactly["selectors"] = [{"cel": {"expression": f'device.attributes["{DRIVER}"].uuid in [{listed}]'}}]
    if count is not None:
        exactly["count"] = count
    if mode:
        exactly["allocationMode"] = mode
    return {"devices": {"requests": [{"name": "gpus", "exactly": exactly}]}}


def claim(name, **kw):
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "proj-a"},
        "spec": claim_spec(**kw),
    }


def pod(name, claims, node=None):
    spec = {
        "restartPolicy": "Never",
        "resourceClaims": claims,
        "containers": [
            {
                "name": "main",
                "image": "pytorch:2.4",
                "resources": {"claims": [{"name": c["name"]} for c in claims]},
            }
        ],
    }
    if node:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "proj-a"},
        "spec": spec,
    }


def status_of(e: ApiException) -> dict:
    return json.loads(e.body)


def raw_post(api: k8s.ApiClient, path: str, body: dict) -> ApiException:
    """POST a body the client's own models would refuse to build, through the client's transport;
    returns the API's error."""
    method, url, headers, data, _ = api.param_serialize(
        "POST",
        path,
        header_params={"Content-Type": "application/json", "Accept": "application/json"},
        body=body,
    )
    response = api.call_api(method, url, headers, data)
    response.read()
    with pytest.raises(ApiException) as exc:
        api.response_deserialize(response, {"201": "object"})
    return exc.value


# -- CEL subset ----------------------------------------------------------------------------------------


def test_the_cel_subset_evaluates_driver_attributes_lists_and_logic():
    env = {"driver": DRIVER, "attributes": {DRIVER: {"uuid": "GPU-1", "index": 3, "mig": False}}}
    assert cel_evaluate(cel_compile(f'device.driver == "{DRIVER}"'), env) is True
    assert cel_evaluate(cel_compile(f'device.attributes["{DRIVER}"].uuid in ["GPU-0", "GPU-1"]'), env) is True
    assert cel_evaluate(cel_compile(f'device.attributes["{DRIVER}"].index == 4 || device.driver != "x"'), env)
    assert cel_evaluate(cel_compile(f'(device.attributes["{DRIVER}"].mig == true) && true'), env) is False
    assert cel_evaluate(cel_compile(f"device.attributes['{DRIVER}']['index'] == 3"), env) is True
    # An int never equals a string (heterogeneous equality is false), a missing key is a runtime error
    # unless the other side of && / || decides.
    assert cel_evaluate(cel_compile(f'device.attributes["{DRIVER}"].index == "3"'), env) is False
    with pytest.raises(CelError, match="no such key: model"):
        cel_evaluate(cel_compile(f'device.attributes["{DRIVER}"].model == "x"'), env)
    assert (
        cel_evaluate(
            cel_compile(f'device.driver == "other" && device.attributes["{DRIVER}"].model == "x"'), env
        )
        is False
    )
    for bad in (
        "device.capacity['x'].memory >= 1",
        "has(device.attributes)",
        "foo == 1",
        "device.driver",
        "(device.driver == 'a'",
    ):
        with pytest.raises(CelError):
            cel_compile(bad)


# -- validation, 404 / 409 ------------------------------------------------------------------------------


def test_claim_validation_answers_422_with_causes_like_the_real_server(cluster, api):
    body = claim("bad")
    req = body["spec"]["devices"]["requests"][0]
    req["name"] = "GPUs"
    req["exactly"].update(count=0, selectors=[{"cel": {"expression": "device.attributes.uuid.matches('x')"}}])
    del req["exactly"]["deviceClassName"]
    error = raw_post(api, "/apis/resource.k8s.io/v1/namespaces/proj-a/resourceclaims", body)
    assert error.status == 422
    status = status_of(error)
    assert status["reason"] == "Invalid" and status["details"]["group"] == "resource.k8s.io"
    assert status["message"].startswith('ResourceClaim.resource.k8s.io "bad" is invalid: [')
    causes = {c["field"]: c for c in status["details"]["causes"]}
    assert causes["spec.devices.requests[0].name"]["reason"] == "FieldValueInvalid"
    assert causes["spec.devices.requests[0].exactly.deviceClassName"]["reason"] == "FieldValueRequired"
    assert (
        causes["spec.devices.requests[0].exactly.count"]["message"]
        == "Invalid value: 0: must be greater than zero"
    )
    assert (
        "compilation failed"
        in causes["spec.devices.requests[0].exactly.selectors[0].cel.expression"]["message"]
    )
    assert cluster.objects("ResourceClaim") == []  # nothing half-written


def test_allocation_mode_all_with_count_and_unknown_mode_are_refused(cluster, dra):
    with pytest.raises(ApiException) as exc:
        dra.create_namespaced_resource_claim("proj-a", claim("all", mode="All", count=2))
    (cause,) = status_of(exc.value)["details"]["causes"]
    assert cause["field"] == "spec.devices.requests[0].exactly.count"
    with pytest.raises(ApiException) as exc:
        dra.create_namespaced_resource_claim("proj-a", claim("odd", mode="Some"))
    (cause,) = status_of(exc.value)["details"]["causes"]
    assert (
        cause["reason"] == "FieldValueNotSupported"
        and 'supported values: "All", "ExactCount"' in cause["message"]
    )


def test_defaults_not_found_and_already_exists(cluster, dra):
    created = dra.create_namespaced_resource_claim("proj-a", claim("one"))
    exactly = created.spec.devices.requests[0].exactly
    assert (exactly.allocation_mode, exactly.count) == ("ExactCount", 1)  # SetDefaults_ExactDeviceRequest
    with pytest.raises(ApiException) as exc:
        dra.create_namespaced_resource_claim("proj-a", claim("one"))
    assert exc.value.status == 409
    assert status_of(exc.value)["message"] == 'resourceclaims.resource.k8s.io "one" already exists'
    with pytest.raises(ApiException) as exc:
        dra.read_namespaced_resource_claim("nope", "proj-a")
    assert exc.value.status == 404
    assert status_of(exc.value)["message"] == 'resourceclaims.resource.k8s.io "nope" not found'
    with pytest.raises(ApiException) as exc:
        dra.read_device_class("nope")
    assert status_of(exc.value)["message"] == 'deviceclasses.resource.k8s.io "nope" not found'
    # A claim's spec is immutable.
    with pytest.raises(ApiException) as exc:
        dra.patch_namespaced_resource_claim("one", "proj-a", {"spec": claim_spec(count=2)})
    assert exc.value.status == 422 and status_of(exc.value)["details"]["causes"][0]["field"] == "spec"


def test_device_class_and_slice_validation(cluster, dra, api):
    with pytest.raises(ApiException) as exc:
        dra.create_device_class(device_class(expression='device.driver = "x"'))
    (cause,) = status_of(exc.value)["details"]["causes"]
    assert cause["field"] == "spec.selectors[0].cel.expression" and "compilation failed" in cause["message"]
    bad_slice = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "s"},
        "spec": {
            "driver": DRIVER,
            "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "gpu-0", "attributes": {"uuid": "GPU-x"}}, {"name": "gpu-0"}],
        },
    }
    error = raw_post(api, "/apis/resource.k8s.io/v1/resourceslices", bad_slice)
    fields = {c["field"]: c["reason"] for c in status_of(error)["details"]["causes"]}
    assert fields == {
        "spec": "FieldValueRequired",  # none of nodeName / nodeSelector / allNodes / perDeviceNodeSelection
        "spec.devices[0].attributes[uuid]": "FieldValueInvalid",  # not a typed value
        "spec.devices[1].name": "FieldValueDuplicate",
    }
    listed = dra.list_resource_slice()
    (first, second) = listed.items
    assert first.spec.node_name == "gpu-1" and first.spec.devices[0].attributes["uuid"].string == UUIDS[0]
    assert first.spec.pool.name == "gpu-1" and first.spec.driver == DRIVER


def test_pod_claim_references_are_validated(cluster, core):
    body = pod("p", [{"name": "gpu", "resourceClaimName": "a", "resourceClaimTemplateName": "b"}])
    body["spec"]["containers"][0]["resources"]["claims"].append({"name": "other"})
    with pytest.raises(ApiException) as exc:
        core.create_namespaced_pod("proj-a", body)
    causes = {c["field"]: c for c in status_of(exc.value)["details"]["causes"]}
    assert "at most one of" in causes["spec.resourceClaims[0]"]["message"]
    assert causes["spec.containers[0].resources.claims[1]"]["reason"] == "FieldValueNotFound"


# -- allocation ---------------------------------------------------------------------------------------


def test_a_claim_selecting_a_uuid_gets_exactly_that_device_and_the_pod_its_node(cluster, dra, core):
    dra.create_device_class(device_class())
    dra.create_namespaced_resource_claim("proj-a", claim("train-gpus", uuids=[UUIDS[3]]))
    core.create_namespaced_pod("proj-a", pod("train-0", [{"name": "gpu", "resourceClaimName": "train-gpus"}]))
    live = dra.read_namespaced_resource_claim("train-gpus", "proj-a")
    (result,) = live.status.allocation.devices.results
    assert (result.request, result.driver, result.pool, result.device) == ("gpus", DRIVER, "gpu-2", "gpu-1")
    assert [(r.resource, r.name) for r in live.status.reserved_for] == [("pods", "train-0")]
    assert core.read_namespaced_pod("train-0", "proj-a").spec.node_name == "gpu-2"


def test_a_device_is_never_given_twice_and_the_pod_that_cannot_get_one_stays_pending(cluster, dra, core):
    dra.create_device_class(device_class())
    dra.create_namespaced_resource_claim("proj-a", claim("first", uuids=[UUIDS[0]]))
    dra.create_namespaced_resource_claim("proj-a", claim("second", uuids=[UUIDS[0]]))
    core.create_namespaced_pod("proj-a", pod("a", [{"name": "gpu", "resourceClaimName": "first"}]))
    core.create_namespaced_pod("proj-a", pod("b", [{"name": "gpu", "resourceClaimName": "second"}]))
    waiting = core.read_namespaced_pod("b", "proj-a")
    assert waiting.spec.node_name is None and waiting.status.phase == "Pending"
    (cond,) = [c for c in waiting.status.conditions if c.type == "PodScheduled"]
    assert (cond.status, cond.reason) == ("False", "Unschedulable")
    assert "cannot allocate all claims" in cond.message
    events = core.list_namespaced_event("proj-a", field_selector="reason=FailedScheduling").items
    assert [e.involved_object.name for e in events] == ["b"]
    assert dra.read_namespaced_resource_claim("second", "proj-a").status is None
    # Deleting the first pod (never started: it goes at once) un-reserves and deallocates its claim;
    # the waiting pod gets the device.
    core.delete_namespaced_pod("a", "proj-a", grace_period_seconds=0)
    assert dra.read_namespaced_resource_claim("first", "proj-a").status is None
    second = dra.read_namespaced_resource_claim("second", "proj-a")
    assert second.status.allocation.devices.results[0].device == "gpu-0"
    assert core.read_namespaced_pod("b", "proj-a").spec.node_name == "gpu-1"


def test_count_and_all_modes_and_the_class_selector(cluster, dra, core):
    dra.create_device_class(device_class())
    dra.create_device_class(device_class("other.example.com", 'device.driver == "other.example.com"'))
    dra.create_namespaced_resource_claim("proj-a", claim("two", count=2))
    core.create_namespaced_pod(
        "proj-a", pod("pair", [{"name": "gpu", "resourceClaimName": "two"}], node="gpu-2")
    )
    results = dra.read_namespaced_resource_claim("two", "proj-a").status.allocation.devices.results
    assert sorted((r.pool, r.device) for r in results) == [("gpu-2", "gpu-0"), ("gpu-2", "gpu-1")]
    # All: every matching device of a node, none may be in use.
    dra.create_namespaced_resource_claim("proj-a", claim("all", mode="All"))
    core.create_namespaced_pod("proj-a", pod("whole", [{"name": "gpu", "resourceClaimName": "all"}]))
    results = dra.read_namespaced_resource_claim("all", "proj-a").status.allocation.devices.results
    assert sorted((r.pool, r.device) for r in results) == [("gpu-1", "gpu-0"), ("gpu-1", "gpu-1")]
    # A class whose selector no device matches allocates nothing.
    dra.create_namespaced_resource_claim("proj-a", claim("foreign", cls="other.example.com"))
    core.create_namespaced_pod("proj-a", pod("nothing", [{"name": "gpu", "resourceClaimName": "foreign"}]))
    assert core.read_namespaced_pod("nothing", "proj-a").spec.node_name is None


def test_a_missing_attribute_is_a_cel_runtime_error_not_a_match(cluster, dra, core):
    dra.create_device_class(device_class())
    body = claim("mig")
    body["spec"]["devices"]["requests"][0]["exactly"]["selectors"] = [
        {"cel": {"expression": f'device.attributes["{DRIVER}"].profile == "1g.10gb"'}}
    ]
    dra.create_namespaced_resource_claim("proj-a", body)
    core.create_namespaced_pod("proj-a", pod("m", [{"name": "gpu", "resourceClaimName": "mig"}]))
    (cond,) = [
        c for c in core.read_namespaced_pod("m", "proj-a").status.conditions if c.type == "PodScheduled"
    ]
    assert "CEL runtime error: no such key: profile" in cond.message


def test_a_template_claim_is_generated_per_pod_and_deleted_with_it(cluster, dra, core):
    dra.create_device_class(device_class())
    dra.create_namespaced_resource_claim_template(
        "proj-a",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "one-gpu"},
            "spec": {"metadata": {"labels": {"suanchi.io/job": "7"}}, "spec": claim_spec()},
        },
    )
    with pytest.raises(ApiException) as exc:
        dra.create_namespaced_resource_claim_template(
            "proj-a", {"metadata": {"name": "one-gpu"}, "spec": {"spec": claim_spec()}}
        )
    assert exc.value.status == 409
    for name in ("w-0", "w-1"):
        core.create_namespaced_pod(
            "proj-a", pod(name, [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}], node="gpu-1")
        )
    claims = {
        c.metadata.owner_references[0].name: c for c in dra.list_namespaced_resource_claim("proj-a").items
    }
    assert sorted(claims) == ["w-0", "w-1"]
    for name, c in claims.items():
        assert c.metadata.name.startswith(f"{name}-gpu-") and len(c.metadata.name) == len(name) + 10
        assert c.metadata.annotations["resource.kubernetes.io/pod-claim-name"] == "gpu"
        assert c.metadata.labels == {"suanchi.io/job": "7"}
        live = core.read_namespaced_pod(name, "proj-a")
        assert [(s.name, s.resource_claim_name) for s in live.status.resource_claim_statuses] == [
            ("gpu", c.metadata.name)
        ]
        assert live.spec.node_name == "gpu-1"
    devices_given = sorted(c.status.allocation.devices.results[0].device for c in claims.values())
    assert devices_given == ["gpu-0", "gpu-1"]
    # A third pod pinned to the full node waits.
    core.create_namespaced_pod(
        "proj-a", pod("w-2", [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}], node="gpu-1")
    )
    assert core.read_namespaced_pod("w-2", "proj-a").spec.node_name is None
    # The pod ends: its generated claim is deleted; the freed device goes to the waiting pod.
    cluster.set_pod_phase("proj-a", "w-0", "Succeeded")
    names = [c.metadata.name for c in dra.list_namespaced_resource_claim("proj-a").items]
    assert claims["w-0"].metadata.name not in names and len(names) == 2
    assert core.read_namespaced_pod("w-2", "proj-a").spec.node_name == "gpu-1"


def test_a_claim_in_use_is_kept_until_its_pod_is_gone(cluster, dra, core):
    dra.create_device_class(device_class())
    dra.create_namespaced_resource_claim("proj-a", claim("held"))
    core.create_namespaced_pod("proj-a", pod("user", [{"name": "gpu", "resourceClaimName": "held"}]))
    dra.delete_namespaced_resource_claim("held", "proj-a")
    held = dra.read_namespaced_resource_claim("held", "proj-a")
    assert held.metadata.deletion_timestamp is not None
    assert "resource.kubernetes.io/delete-protection" in held.metadata.finalizers
    core.delete_namespaced_pod("user", "proj-a")  # bound: Terminating for its grace period
    assert dra.read_namespaced_resource_claim("held", "proj-a").status.reserved_for
    cluster.advance(31)
    with pytest.raises(ApiException) as exc:
        dra.read_namespaced_resource_claim("held", "proj-a")
    assert exc.value.status == 404


def test_without_controllers_nothing_is_allocated(tmp_path):
    with FakeApiServer(controllers=False) as srv:
        srv.add_node("gpu-1")
        srv.add_resource_slice("s", "gpu-1", DRIVER, devices("gpu-1"))
        api_client = k8s_config.new_client_from_config(config_file=str(kubeconfig_for(srv, tmp_path)))
        try:
            core, dra = k8s.CoreV1Api(api_client), k8s.ResourceV1Api(api_client)
            core.create_namespace({"metadata": {"name": "proj-a"}})
            dra.create_device_class(device_class())
            dra.create_namespaced_resource_claim("proj-a", claim("c"))
            core.create_namespaced_pod(
                "proj-a", pod("p", [{"name": "gpu", "resourceClaimName": "c"}], node="gpu-1")
            )
            assert core.read_namespaced_pod("p", "proj-a").spec.node_name is None
            assert dra.read_namespaced_resource_claim("c", "proj-a").status is None
        finally:
            api_client.close()
