"""Schemathesis against the project's own OpenAPI schema: every operation, as a member, a viewer, an
outsider and staff, and as a node agent (agent token). No 5xx, every documented response matches its schema, and
nothing of another project leaks.

Besides the schema's own cases, every operation gets hostile ones (issue 15, finding 5): query parameters
set to far-off dates and integers beyond 64 bits, a path id beyond 64 bits, JSON bodies with wrong-typed
or deeply nested values in each field, and for job submission tolerations / env / node selectors of the
wrong shape; exporter pages with timestamps no date can hold; and issue 27's findings (unexpected fields
in a project body, impossible calendar dates for a token's expiry, throughputs no column holds with a
self-declared run count, node names with empty DNS labels).

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

from apps.inventory.models import Cluster
from apps.inventory.services.tokens import agent_token_create
from apps.jobs.models import Job
from apps.scheduling.services import scheduling_cycle_run
from tests.fixtures.jobs import submit_whole_cards
from tests.hardening.conftest import token_for

pytestmark = pytest.mark.django_db(transaction=True)

EXAMPLES = int(os.environ.get("SUANCHI_FUZZ_EXAMPLES", "4"))
SECRET = "secretvision"  # the member project's slug and namespace; also in its job names
CHECKS = [not_a_server_error, response_schema_conformance, content_type_conformance]
IDENTITIES = ("member", "viewer", "outsider", "staff", "agent")

# ---- hostile input ------------------------------------------------------------------------------

EXTREME_DATES = [
    "0001-01-01T00:00:00Z",
    "9999-12-31T23:59:59Z",
    "0001-01-01T00:00:00+23:59",
    "9999-12-31T23:59:59-23:59",
    "1970-01-01T00:00:00Z",
    "2100-01-01T00:00:01Z",
]
HUGE_NUMBERS = [
    "99999999999999999999999",
    "-99999999999999999999999",
    "9223372036854775808",
    "1e400",
    "NaN",
    "-Infinity",
]
_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
    | st.sampled_from(EXTREME_DATES + HUGE_NUMBERS)
)
JSON_VALUES = st.recursive(
    _SCALARS,
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=6), kids, max_size=3),
    max_leaves=6,
)


def _nested(depth: int, kind: type) -> object:
    value: object = []
    for _ in range(depth):
        value = [value] if kind is list else {"a": value}
    return value


NESTED = st.sampled_from([_nested(64, list), _nested(64, dict), _nested(400, list), _nested(400, dict)])
HOSTILE_VALUES = JSON_VALUES | NESTED
TOLERATIONS = st.lists(
    JSON_VALUES
    | st.dictionaries(
        st.sampled_from(["key", "operator", "value", "effect", "tolerationSeconds", "extra"]),
        JSON_VALUES | st.sampled_from(["", "Exists", "Equal", "NoExecute", "abc", 2**63, {"x": 1}]),
        max_size=5,
    ),
    min_size=1,
    max_size=3,
)
ENV = st.dictionaries(
    st.sampled_from(["", "A=B", "1X", "NVIDIA_VISIBLE_DEVICES", "SUANCHI_JOB_ID", "OK"])
    | st.text(max_size=8),
    JSON_VALUES,
    min_size=1,
    max_size=4,
)
_GOOD_LINE = 'DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="gpu-01-1",Hostname="gpu-01"} 10\n'
HOSTILE_EXPOSITION = st.sampled_from(
    [
        'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="gpu-01-0",Hostname="gpu-01"} 40 99999999999999999999',
        'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="gpu-01-0",Hostname="gpu-01"} -1e308\n'
        'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="gpu-01-0",Hostname="gpu-01"} 1e308 -99999999999999999999',
        'DCGM_FI_DEV_FB_USED{gpu="0",UUID="gpu-01-0",Hostname="gpu-01"} 1e308 0\nx 1 1e3',
        'DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="gpu-01-0"} NaN 4102444800000',
    ]
).map(lambda text: _GOOD_LINE + text)
HOSTILE_EXAMPLES = int(os.environ.get("SUANCHI_FUZZ_HOSTILE_EXAMPLES", "2"))  # per hostile strategy

# Issue 27's findings, sent by every identity: fields a serializer does not expect, impossible calendar
# dates, figures no column holds, self-declared counters and node names with empty DNS labels.
_BAD_DATES = ["2026-13-01", "2026-02-30T00:00:00Z", "2026-12-01T25:00:00Z", "0000-01-01", "10000-01-01"]
_HUGE_FIGURES = [1e12, 999_999_999_999, 1e308, 2**63, -1, 0]
ISSUE_27_BODIES = {
    ("/api/accounts/projects/", "post"): st.fixed_dictionaries(
        {"name": st.just("p27"), "slug": st.just("p27"), "is_active": st.sampled_from([False, "no", None])},
        optional={"department": st.sampled_from([1, 2**63, "x"]), "namespace": st.just("p27")},
    ),
    ("/api/accounts/tokens/", "post"): st.fixed_dictionaries(
        {"name": st.just("child"), "expires_at": st.sampled_from(_BAD_DATES + EXTREME_DATES)}
    ),
    ("/api/jobs/jobs/{id}/throughput/", "post"): st.fixed_dictionaries(
        {"throughput": st.sampled_from(_HUGE_FIGURES), "runs": st.sampled_from([10000, 2**63, -5])},
        optional={"unit": st.sampled_from(["samples/s", "tokens/s", ""]), "profile": st.just("llm-train")},
    ),
    ("/api/benchlib/measurements/", "post"): st.fixed_dictionaries(
        {"throughput": st.sampled_from(_HUGE_FIGURES), "runs": st.sampled_from([10000, 2**63])},
        optional={"device_model": st.sampled_from([1, "a100-40g"]), "source_label": st.just("job 1")},
    ),
    ("/api/inventory/node-reports/", "post"): st.fixed_dictionaries(
        {
            "node": st.sampled_from(["a..b", ".gpu-01", "gpu-01.", "x" * 64 + ".lab", "a" * 254]),
            "kind": st.sampled_from(["nvidia-smi", "inventory", "rocm-smi-json"]),
            "text": st.just(""),
        }
    ),
}


def _job_bodies(device_model: str) -> st.SearchStrategy:
    base = {
        "project": st.sampled_from([SECRET, "elsewhere", "nope"]),
        "name": st.just("hostile"),
        "image": st.just("pytorch:2.3"),
        "request_kind": st.just("whole_cards"),
        "device_model": st.just(device_model),
    }
    optional = {
        "tolerations": TOLERATIONS,
        "env": ENV | NESTED,
        "node_selector": st.dictionaries(st.text(max_size=10), JSON_VALUES, max_size=3),
        "command": HOSTILE_VALUES,
        "count": st.sampled_from([0, 2**63, -1, "abc", 1e308]),
        "expected_duration_s": st.sampled_from([2**63, -(2**63) - 1, 1e308]),
        "min_memory_mib": st.sampled_from([2**63, 2**31]),
    }
    return st.fixed_dictionaries(base, optional=optional)


def _patched_body(operation, case) -> st.SearchStrategy:
    """The schema's own body with one or two fields set to hostile values (or the whole body nested)."""
    keys = sorted(case.body) if isinstance(case.body, dict) else []
    patches = (
        st.dictionaries(st.sampled_from(keys), HOSTILE_VALUES, min_size=1, max_size=2)
        if keys
        else st.just({})
    )
    return st.one_of(
        patches.map(lambda patch: {**case.body, **patch}) if keys else NESTED,
        NESTED,
    ).map(
        lambda body: operation.Case(
            path_parameters=case.path_parameters,
            query=case.query,
            body=body,
            media_type="application/json",
        )
    )


def _hostile_strategies(operation, raw: dict, ids: list, device_model: str) -> list:
    spec = raw["paths"][operation.path][operation.method.lower()]
    path_id = {"id": ids[0] if ids else 1} if "{id}" in operation.path else {}
    out = []
    names = sorted(p["name"] for p in spec.get("parameters", []) if p.get("in") == "query")
    if names:
        out.append(
            st.dictionaries(
                st.sampled_from(names), st.sampled_from(EXTREME_DATES + HUGE_NUMBERS), min_size=1, max_size=2
            ).map(lambda query: operation.Case(path_parameters=path_id, query=query))
        )
    if "{id}" in operation.path:
        out.append(st.just(operation.Case(path_parameters={"id": "99999999999999999999999"})))
    if "application/json" in spec.get("requestBody", {}).get("content", {}):
        known_bad = ISSUE_27_BODIES.get((operation.path, operation.method.lower()))
        if known_bad is not None:
            out.append(
                known_bad.map(
                    lambda body: operation.Case(
                        path_parameters=path_id, body=body, media_type="application/json"
                    )
                )
            )
        if operation.path == "/api/jobs/jobs/" and operation.method.lower() == "post":
            out.append(
                _job_bodies(device_model).map(
                    lambda body: operation.Case(body=body, media_type="application/json")
                )
            )
        elif operation.path == "/api/telemetry/scrapes/":
            out.append(
                st.fixed_dictionaries(
                    {"text": HOSTILE_EXPOSITION}, optional={"at": st.sampled_from(EXTREME_DATES)}
                ).map(lambda body: operation.Case(body=body, media_type="application/json"))
            )
        positive = operation.as_strategy(
            generation_mode=GenerationMode.POSITIVE, media_type="application/json"
        )
        out.append(positive.flatmap(lambda case: _patched_body(operation, case)))
    return out


def build_schema():
    raw = SchemaGenerator().get_schema(request=None, public=True)
    schema = schemathesis.openapi.from_dict(raw)
    schema.app = get_wsgi_application()
    return raw, schema


def _world(tenants, a100, staff_user):
    member, outsider = tenants["member"], tenants["outsider"]
    for i in range(3):
        submit_whole_cards(tenants["project"], member, a100, name=f"{SECRET}-train-{i}", image="pytorch:2.3")
    submit_whole_cards(tenants["other"], outsider, a100, name="elsewhere-train", image="pytorch:2.3")
    scheduling_cycle_run()
    return {
        "member": token_for(member),
        "viewer": token_for(tenants["viewer"]),
        "outsider": token_for(outsider),
        "staff": token_for(staff_user),
        "agent": agent_key(),
    }


def agent_key() -> str:
    """A node agent's token for the fleet's cluster, any node (what the DaemonSet's agents hold)."""
    _, key = agent_token_create(cluster=Cluster.objects.get(slug="prod"), name="fuzz-agent", actor="test")
    return key


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


def _fuzz_operation(
    operation, *, headers: dict, ids: list, recorder: Recorder, identity: str, hostile: list = ()
):
    strategies = [operation.as_strategy(generation_mode=GenerationMode.POSITIVE)]
    with contextlib.suppress(Exception):  # an operation with nothing to negate (no parameters, no body)
        strategies.append(operation.as_strategy(generation_mode=GenerationMode.NEGATIVE))
    if "{id}" in operation.path:
        strategies += [operation.as_strategy(path_parameters={"id": i}) for i in ids]
    examples = EXAMPLES * len(strategies) + HOSTILE_EXAMPLES * len(hostile)
    strategies += list(hostile)

    @settings(
        max_examples=examples,
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
        if (
            identity in ("outsider", "agent")
            and response.status_code < 300
            and SECRET.encode() in response.content
        ):
            recorder.failures.append(
                f"[{identity}] {operation.method.upper()} {operation.path} -> {response.status_code} "
                f"leaks {SECRET!r}: {response.content[:300]!r}"
            )

    run()


def test_every_operation_survives_fuzzing_as_member_viewer_outsider_staff_and_agent(
    tenants, fleet, a100, staff_user
):
    keys = _world(tenants, a100, staff_user)
    raw, schema = build_schema()
    ids = _known_ids({"Authorization": f"Token {keys['staff']}"}, raw)
    recorder = Recorder()
    got_request_exception.connect(recorder.on_exception)
    operations = [result.ok() for result in schema.get_all_operations()]
    try:
        for identity in IDENTITIES:
            for operation in operations:
                # A fuzzed DELETE may revoke the caller's own token: a fresh one for every operation.
                if identity == "agent":
                    key = agent_key()
                else:
                    key = token_for(tenants[identity] if identity != "staff" else staff_user)
                known = ids.get(_collection_of(operation.path), [])
                _fuzz_operation(
                    operation,
                    # identity: the WSGI transport hands back the body as sent and does not inflate a
                    # gzip one (compression is tested in tests/core/test_http_basics.py)
                    headers={"Authorization": f"Token {key}", "Accept-Encoding": "identity"},
                    ids=known,
                    recorder=recorder,
                    identity=identity,
                    hostile=_hostile_strategies(operation, raw, known, a100.slug),
                )
    finally:
        got_request_exception.disconnect(recorder.on_exception)
    print(
        f"\nschemathesis: {len(operations)} operations x {len(IDENTITIES)} identities, {recorder.requests} requests, "
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
