"""Issue 15, findings 5 and 11: what Kubernetes would refuse in the pod is refused at submission (400),
through the API and through the service, and nothing is written."""

from __future__ import annotations

import pytest

from apps.core.errors import ValidationFailed
from apps.jobs.models import Job
from apps.jobs.validation import ENV_MAX_COUNT, ENV_MAX_TOTAL_BYTES, toleration_errors
from apps.scheduling.lifecycle import job_submit

pytestmark = pytest.mark.django_db


def _body(a100, **extra):
    return {
        "project": "vision",
        "name": "llm",
        "image": "pytorch:2.3",
        "request_kind": "whole_cards",
        "device_model": a100.slug,
        "count": 1,
        **extra,
    }


def _post(api_client, user, body):
    api_client.force_authenticate(user)
    return api_client.post("/api/jobs/jobs/", body, format="json")


@pytest.mark.parametrize(
    "toleration",
    [
        {"key": {"x": 1}},  # was TypeError: unhashable type (500)
        {"key": ["a"], "operator": "Exists"},
        {"key": "team", "value": {"a": 1}},
        {"key": "team", "operator": "Exists", "tolerationSeconds": "abc"},
        {"key": "team", "operator": "Sometimes"},
        {"key": "team", "effect": "NoRun"},
        {"key": "team", "surprise": 1},
        "team",
        17,
        None,
    ],
)
def test_a_wrong_typed_toleration_is_a_400_not_a_500(api_client, fleet, member_project, a100, toleration):
    user, _ = member_project
    response = _post(api_client, user, _body(a100, tolerations=[toleration]))
    assert response.status_code == 400, response.content
    assert response.json()["error"]["details"]["tolerations"]
    assert Job.objects.count() == 0


@pytest.mark.parametrize(
    ("toleration", "fragment"),
    [
        ({"key": "team", "operator": "Exists", "value": "a"}, "must be empty when operator is Exists"),
        ({"key": "team", "value": "a", "tolerationSeconds": 30}, "only with effect NoExecute"),
        ({"key": "team", "value": "a", "effect": "NoExecute", "tolerationSeconds": 2**63}, "int64"),
        ({"key": "team", "value": "a", "effect": "NoExecute", "tolerationSeconds": True}, "int64"),
        ({"key": "", "operator": "Equal", "value": "a"}, "must be Exists when key is empty"),
        ({"operator": "Exists"}, "tolerates every taint"),
        ({"key": "bad key!", "value": "a"}, "at most 63 characters"),
        ({"key": "Example.COM/team", "value": "a"}, "DNS subdomain"),
        ({"key": "team", "value": "not a label value"}, "at most 63 characters"),
        ({"key": "suanchi.io/quarantine", "operator": "Exists"}, "Suanchi taint"),
    ],
)
def test_a_toleration_follows_the_kubernetes_rules(toleration, fragment):
    errors = toleration_errors(toleration)
    assert errors and any(fragment in e for e in errors), errors


@pytest.mark.parametrize(
    "toleration",
    [
        {"key": "team", "operator": "Exists"},
        {"key": "team", "operator": "Equal", "value": "vision", "effect": "NoSchedule"},
        {"key": "example.com/team", "value": "", "effect": "PreferNoSchedule"},
        {
            "key": "node.kubernetes.io/unreachable",
            "operator": "Exists",
            "effect": "NoExecute",
            "tolerationSeconds": 300,
        },
    ],
)
def test_valid_tolerations_are_accepted_and_stored(api_client, fleet, member_project, a100, toleration):
    user, _ = member_project
    response = _post(api_client, user, _body(a100, tolerations=[toleration]))
    assert response.status_code == 201, response.content
    stored = Job.objects.get().tolerations
    assert stored == [{k: v for k, v in toleration.items()}]


@pytest.mark.parametrize(
    ("env", "fragment"),
    [
        ({"": "x"}, "not a valid variable name"),
        ({"A=B": "x"}, "not a valid variable name"),
        ({"1ABC": "x"}, "not a valid variable name"),
        ({"NVIDIA_VISIBLE_DEVICES": "all"}, "set by Suanchi or the device plugin"),
        ({"SUANCHI_JOB_ID": "7"}, "set by Suanchi or the device plugin"),
        ({f"V{i}": "x" for i in range(ENV_MAX_COUNT + 1)}, f"at most {ENV_MAX_COUNT} variables"),
        ({f"V{i}": "x" * 30000 for i in range(3)}, f"the limit is {ENV_MAX_TOTAL_BYTES} bytes"),
        ({"A": "x" * 40000}, "no more than 32768 characters"),
    ],
)
def test_env_names_and_sizes_are_bounded(api_client, fleet, member_project, a100, env, fragment):
    user, _ = member_project
    response = _post(api_client, user, _body(a100, env=env))
    assert response.status_code == 400, response.content
    details = response.json()["error"]["details"]["env"]
    assert fragment in str(details), details
    assert Job.objects.count() == 0


def test_kubernetes_env_names_with_dots_and_dashes_are_accepted(api_client, fleet, member_project, a100):
    user, _ = member_project
    env = {"NCCL_DEBUG": "INFO", "my.setting": "1", "-dash": "", "_x": "y"}
    response = _post(api_client, user, _body(a100, env=env))
    assert response.status_code == 201, response.content
    assert Job.objects.get().env == env


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("node_selector", {"bad key!": "a"}),
        ("node_selector", {"zone": "not valid!"}),
        ("command", ["python"] * 300),
        ("image", "pytorch 2.3"),
        ("required_features", ["x" * 61]),
        ("allowed_vendors", ["nvidia"] * 40),
    ],
)
def test_other_pod_fields_are_checked_as_kubernetes_would(
    api_client, fleet, member_project, a100, field, value
):
    user, _ = member_project
    response = _post(api_client, user, _body(a100, **{field: value}))
    assert response.status_code == 400, response.content
    assert field in response.json()["error"]["details"]
    assert Job.objects.count() == 0


def test_the_service_checks_the_same_rules_for_callers_other_than_the_api(fleet, member_project, a100):
    """The page's form and management commands call job_submit directly, with whatever types they hold."""
    user, project = member_project
    cases = {
        "tolerations": [{"key": {"x": 1}}],
        "env": {"A=B": "x"},
        "node_selector": {"zone": 5},
        "command": ["ok", 3],
    }
    for field, value in cases.items():
        with pytest.raises(ValidationFailed) as excinfo:
            job_submit(
                project=project,
                actor=user,
                name="x",
                image="pytorch:2.3",
                request_kind="whole_cards",
                device_model=a100,
                **{field: value},
            )
        assert field in excinfo.value.details, field
    assert Job.objects.count() == 0
