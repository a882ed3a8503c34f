"""Deeply nested JSON is a 400, never a RecursionError 500 (issue 15, finding 5a)."""

from __future__ import annotations

import json

import pytest
from rest_framework.test import APIClient

from apps.core.errors import ParseFailed
from apps.core.jsondepth import MAX_JSON_DEPTH, nesting_depth, too_deep
from apps.inventory.services.tokens import agent_token_create
from apps.inventory.vendors.amd import parse_rocm_smi_json
from tests.hardening.conftest import token_for

pytestmark = pytest.mark.django_db

DEEP = "[" * 100_000
TOO_DEEP_MESSAGE = f"JSON nested deeper than {MAX_JSON_DEPTH} levels"


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def test_nesting_depth_counts_brackets_outside_strings_only():
    assert nesting_depth("5") == 0
    assert nesting_depth("[]") == 1
    assert nesting_depth('{"a": [1, {"b": "]]]["}]}') == 3
    assert nesting_depth('["\\"[[[[", "x"]') == 1  # an escaped quote does not end the string
    assert nesting_depth(DEEP) == 100_000
    assert not too_deep(nested(MAX_JSON_DEPTH))
    assert too_deep(nested(MAX_JSON_DEPTH + 1))
    assert not too_deep(json.dumps({"name": "[" * 5000}))


def test_a_deep_body_is_a_400_for_a_user_token(tenants, staff_user):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token_for(tenants['member'])}")
    signed_in = APIClient()  # tokens are made from a signed-in session only (issue 27 §4)
    signed_in.force_authenticate(tenants["member"])
    for caller, path in ((client, "/api/jobs/jobs/"), (signed_in, "/api/accounts/tokens/")):
        response = caller.generic("POST", path, DEEP, content_type="application/json")
        assert response.status_code == 400, (path, response.status_code)
        assert response.json()["error"]["message"] == TOO_DEEP_MESSAGE
    # The request-template import names its own parsers: the JSON one is the depth-limited one too.
    client.credentials(HTTP_AUTHORIZATION=f"Token {token_for(staff_user)}")
    for path in ("/api/catalog/request-templates/import/",):
        response = client.generic("POST", path, DEEP, content_type="application/json")
        assert response.status_code == 400, (path, response.status_code)
        assert response.json()["error"]["message"] == TOO_DEEP_MESSAGE


def test_a_body_at_the_limit_is_parsed_and_judged_on_its_content(tenants):
    client = APIClient()
    client.force_authenticate(tenants["member"])  # tokens are made from a signed-in session only
    response = client.generic(
        "POST", "/api/accounts/tokens/", nested(MAX_JSON_DEPTH), content_type="application/json"
    )
    assert response.status_code == 400
    assert response.json()["error"]["message"] != TOO_DEEP_MESSAGE  # parsed; then refused as not an object
    response = client.post(
        "/api/accounts/tokens/", {"name": "[{" * 40}, format="json"
    )  # brackets in a string
    assert response.status_code == 201


def test_a_deep_body_from_a_node_agent_is_a_400(fleet):
    _, key = agent_token_create(cluster=fleet["gpu-01"].cluster, name="agent", actor="test")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    response = client.generic("POST", "/api/inventory/node-reports/", DEEP, content_type="application/json")
    assert response.status_code == 400
    assert response.json()["error"]["message"] == TOO_DEEP_MESSAGE


def test_a_deep_rocm_smi_report_text_is_a_400(fleet):
    with pytest.raises(ParseFailed, match=TOO_DEEP_MESSAGE):
        parse_rocm_smi_json('{"card0": ' + DEEP)
    _, key = agent_token_create(cluster=fleet["gpu-01"].cluster, name="agent", actor="test")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    response = client.post(
        "/api/inventory/node-reports/",
        {"node": "gpu-01", "kind": "rocm-smi-json", "text": '{"card0": ' + DEEP},
        format="json",
    )
    assert response.status_code == 400, response.content[:300]
    assert TOO_DEEP_MESSAGE in response.json()["error"]["message"]
