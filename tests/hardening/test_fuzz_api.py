"""Schemathesis against the project's own OpenAPI schema: every operation, as a member, an outsider and
staff. No 5xx, every documented response matches its schema, and nothing of another project leaks.

The run is bounded for CI: ``SUANCHI_FUZZ_EXAMPLES`` generated cases per operation and identity (default
4), plus one case per known object id for operations on ``{id}``; Hypothesis is derandomized, so a CI
failure reproduces locally. The figures (operations, requests, failures) are printed at the end.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import traceback
from collections import Counter

import pytest
import schemathesis
from django.core.signals import got_request_exception
from django.core.wsgi import get_wsgi_application
from drf_spectacular.generators import SchemaGenerator
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.specs.openapi.checks import content_type_conformance, response_schema_conformance

from apps.jobs.models import Job
from apps.jobs.services import job_submit
from apps.scheduling.services import scheduling_cycle_run
from tests.hardening.conftest import token_for

pytestmark = pytest.mark.django_db(transaction=True)

EXAMPLES = int(os.environ.get("SUANCHI_FUZZ_EXAMPLES", "4"))
SECRET = "secretvision"  # the member project's slug and namespace; also in its job names
CHECKS = [not_a_server_error, response_schema_conformance, content_type_conformance]


def build_schema():
    raw = SchemaGenerator().get_schema(request=None, public=True)
    schema = schemathesis.openapi.from_dict(raw)
    schema.app = get_wsgi_application()
    return raw, schema


def _world(tenants, a100, staff_user):
    member, outsider = tenants["member"], tenants["outsider"]
    for i in range(3):
        job_submit(
            project=tenants["project"],
            actor=member,
            name=f"{SECRET}-train-{i}",
            image="pytorch:2.3",
            request_kind="whole_cards",
            device_model=a100,
            count=1,
        )
    job_submit(
        project=tenants["other"],
        actor=outsider,
        name="elsewhere-train",
        image="pytorch:2.3",
        request_kind="whole_cards",
        device_model=a100,
        count=1,
    )
    scheduling_cycle_run()
    return {
        "member": token_for(member),
        "outsider": token_for(outsider),
        "staff": token_for(staff_user),
    }


def _known_ids(client_headers, raw) -> dict[str, list]:
    """Ids per collection path, read through the API as staff (so every {id} operation gets real ids)."""
    from rest_framework.test import APIClient

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=client_headers["Authorization"])
    ids: dict[str, list] = {}
    for path, ops in raw["paths"].items():
        if "{" in path or "get" not in ops:
            continue
        response = client.get(path, {"page_size": 20})
        if not response.get("Content-Type", "").startswith("application/json"):
            continue  # an export
        body = response.json()
        rows = body.get("results") if isinstance(body, dict) else body
        if isinstance(rows, list):
            ids[path] = [r["id"] for r in rows if isinstance(r, dict) and "id" in r][:3]
    ids["/api/telemetry/jobs/"] = list(Job.objects.values_list("pk", flat=True)[:3])
    ids["/api/telemetry/projects/"] = ids.get("/api/accounts/projects/", [])
    return ids


def _collection_of(path: str) -> str:
    return path.split("{id}", 1)[0]


class Recorder:
    def __init__(self):
        self.requests = 0
        self.failures: list[str] = []
        self.statuses: Counter = Counter()
        self.exceptions: list[str] = []

    def on_exception(self, sender, request=None, **kwargs):
        self.exceptions.append(
            f"{request.method if request else '?'} {request.path if request else '?'}\n{traceback.format_exc()}"
        )


def _fuzz_operation(operation, *, headers: dict, ids: list, recorder: Recorder, identity: str):
    strategies = [operation.as_strategy(generation_mode=GenerationMode.POSITIVE)]
    with contextlib.suppress(Exception):  # an operation with nothing to negate (no parameters, no body)
        strategies.append(operation.as_strategy(generation_mode=GenerationMode.NEGATIVE))
    if "{id}" in operation.path:
        strategies += [operation.as_strategy(path_parameters={"id": i}) for i in ids]

    @settings(
        max_examples=EXAMPLES * len(strategies),
        deadline=None,
        derandomize=True,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=st.one_of(*strategies))
    def run(case):
        recorder.requests += 1
        response = case.call(headers=headers)
        recorder.statuses[response.status_code] += 1
        try:
            case.validate_response(response, checks=CHECKS)
        except (FailureGroup, Exception) as e:  # noqa: BLE001 - record every failure, keep fuzzing
            recorder.failures.append(
                f"[{identity}] {operation.method.upper()} {operation.path} -> {response.status_code}: "
                f"{str(e)[:600]}\n  reproduce: {case.as_curl_command()}"
            )
        if identity == "outsider" and response.status_code < 300 and SECRET.encode() in response.content:
            recorder.failures.append(
                f"[outsider] {operation.method.upper()} {operation.path} -> {response.status_code} "
                f"leaks {SECRET!r}: {response.content[:300]!r}"
            )

    run()


def test_every_operation_survives_fuzzing_as_member_outsider_and_staff(tenants, fleet, a100, staff_user):
    keys = _world(tenants, a100, staff_user)
    raw, schema = build_schema()
    ids = _known_ids({"Authorization": f"Token {keys['staff']}"}, raw)
    recorder = Recorder()
    got_request_exception.connect(recorder.on_exception)
    operations = [result.ok() for result in schema.get_all_operations()]
    try:
        for identity in ("member", "outsider", "staff"):
            for operation in operations:
                # A fuzzed DELETE may revoke the caller's own token: a fresh one for every operation.
                user = tenants[identity] if identity != "staff" else staff_user
                headers = {"Authorization": f"Token {token_for(user)}"}
                _fuzz_operation(
                    operation,
                    headers=headers,
                    ids=ids.get(_collection_of(operation.path), []),
                    recorder=recorder,
                    identity=identity,
                )
    finally:
        got_request_exception.disconnect(recorder.on_exception)
    print(
        f"\nschemathesis: {len(operations)} operations x 3 identities, {recorder.requests} requests, "
        f"statuses {dict(sorted(recorder.statuses.items()))}, {len(recorder.failures)} failures"
    )
    problems = recorder.failures + recorder.exceptions
    if os.environ.get("SUANCHI_FUZZ_REPORT"):
        with open(os.environ["SUANCHI_FUZZ_REPORT"], "w") as report:
            report.write("\n\n".join(problems))
    assert not problems, f"{len(problems)} problems:\n" + "\n\n".join(problems[:40])


def test_an_outsider_reads_nothing_of_another_project_by_id(tenants, fleet, a100, staff_user, api_client):
    """Every GET on ``{id}`` with the member project's real ids: the outsider gets 404 (or, for the
    fleet-wide ledger and catalog, a body without the project's data)."""
    keys = _world(tenants, a100, staff_user)
    raw, _ = build_schema()
    ids = _known_ids({"Authorization": f"Token {keys['staff']}"}, raw)
    member_job_ids = list(Job.objects.filter(project=tenants["project"]).values_list("pk", flat=True))
    assert member_job_ids
    api_client.credentials(HTTP_AUTHORIZATION=f"Token {keys['outsider']}")
    checked = 0
    for path, ops in raw["paths"].items():
        if "get" not in ops:
            continue
        if "{id}" not in path:
            response = api_client.get(path)
            assert response.status_code < 500, path
            assert SECRET not in response.content.decode(), f"{path} lists {SECRET}"
            checked += 1
            continue
        for pk in set(ids.get(_collection_of(path), [])) | set(member_job_ids):
            response = api_client.get(path.replace("{id}", str(pk)))
            assert response.status_code < 500, path
            assert SECRET not in response.content.decode(), f"{path} with id {pk} shows {SECRET}"
            checked += 1
    # The member sees the project's own jobs (the marker is findable, so its absence above means something).
    api_client.credentials(HTTP_AUTHORIZATION=f"Token {keys['member']}")
    assert SECRET in api_client.get("/api/jobs/jobs/").content.decode()
    for pk in member_job_ids:
        assert re.search(SECRET, json.dumps(api_client.get(f"/api/jobs/jobs/{pk}/").json()))
    assert checked > 50
