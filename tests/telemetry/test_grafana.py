"""platform/grafana: the provisioned dashboard is sound JSON for Grafana, and every panel query parses and
answers from the real Prometheus of test_prometheus.py (the shipped recording rules loaded, the fixture
exporters scraped). The test FAILS (never skips) without /usr/bin/prometheus, like test_prometheus.py."""

from __future__ import annotations

import json
import time
import urllib.parse
from pathlib import Path

import pytest
import yaml

from tests.fixtures.prometheus import get_json

ROOT = Path(__file__).resolve().parents[2]
GRAFANA = ROOT / "platform" / "grafana"
DASHBOARD = GRAFANA / "dashboards" / "suanchi-fleet.json"
BRANDS = {"nvidia", "huawei", "amd", "hygon", "cambricon"}
WAIT_S = 30


def _dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def _datasource() -> dict:
    (source,) = yaml.safe_load((GRAFANA / "provisioning" / "datasources" / "suanchi.yaml").read_text())[
        "datasources"
    ]
    return source


def _targets(dashboard: dict):
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            yield panel, target


def _expand(expr: str, dashboard: dict, value: str | None = None) -> str:
    """Grafana's variable interpolation for a regex matcher: All = the variable's allValue."""
    for variable in dashboard["templating"]["list"]:
        expr = expr.replace(f"${variable['name']}", value if value is not None else variable["allValue"])
    assert "$" not in expr, expr
    return expr


def test_the_dashboard_json_has_what_grafana_needs():
    dashboard = _dashboard()
    assert dashboard["uid"] == "suanchi-fleet" and len(dashboard["uid"]) <= 40
    assert (
        dashboard["title"]
        and isinstance(dashboard["schemaVersion"], int)
        and dashboard["schemaVersion"] >= 36
    )
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids)) >= 7
    uid = _datasource()["uid"]
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert set(grid) == {"h", "w", "x", "y"} and grid["w"] > 0 and grid["h"] > 0, panel["title"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]  # Grafana's 24-column grid
        assert panel["type"] in {"stat", "timeseries", "bargauge", "table"} and panel["title"]
        assert panel["datasource"] == {"type": "prometheus", "uid": uid}
        assert panel["targets"], panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs)), panel["title"]
        for target in panel["targets"]:
            assert target["expr"].strip() and target["datasource"]["uid"] == uid, panel["title"]
    # Panels do not overlap on the grid.
    cells = set()
    for panel in dashboard["panels"]:
        g = panel["gridPos"]
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not cells & mine, panel["title"]
        cells |= mine
    (variable,) = dashboard["templating"]["list"]
    assert variable["datasource"]["uid"] == uid and variable["allValue"] == ".*"


def test_the_provisioning_files_are_grafanas_format():
    source = _datasource()
    assert source["type"] == "prometheus" and source["access"] == "proxy"
    assert source["url"] == "${PROMETHEUS_URL}"  # from Grafana's environment, nothing hard-coded
    (provider,) = yaml.safe_load((GRAFANA / "provisioning" / "dashboards" / "suanchi.yaml").read_text())[
        "providers"
    ]
    assert provider["type"] == "file" and provider["options"]["path"].startswith("/")
    assert provider["allowUiUpdates"] is False  # the JSON in the repository is the source of truth
    for path in (GRAFANA / "provisioning").rglob("*.yaml"):
        assert yaml.safe_load(path.read_text())["apiVersion"] == 1, path


def test_the_seed_panels_and_the_allocation_panel_are_there():
    exprs = {panel["title"]: [t["expr"] for t in panel["targets"]] for panel in _dashboard()["panels"]}
    joined = " ".join(e for group in exprs.values() for e in group)
    for series in (
        "gpu_brand:gpu_count:count",  # cards per vendor
        "gpu_brand:gpu_utilization_percent:avg",  # average utilization per vendor
        "node_gpu_brand:gpu_utilization_percent:avg",  # per-node utilization
        "topk(10, node_gpu_brand:gpu_utilization_percent:avg",  # top 10 nodes
        "gpu:memory_used_ratio:percent",  # memory used ratio
        "gpu_brand:gpu_allocated_percent:avg",  # Suanchi's allocation ...
    ):
        assert series in joined, series
    allocation = exprs["Allocated vs utilized, per vendor"]
    assert any("allocated" in e for e in allocation) and any("utilization" in e for e in allocation)


def _query(url: str, expr: str) -> list[dict]:
    data = get_json(f"{url}/api/v1/query?query={urllib.parse.quote(expr)}")
    assert data["status"] == "success", (expr, data)
    return data["data"]["result"]


def _answers(url: str, dashboard: dict, value: str | None = None) -> dict[str, list[dict]]:
    """Each panel query's instant result; waits (bounded) for rules that depend on other rules."""
    deadline = time.monotonic() + WAIT_S
    while True:
        results = {
            t["expr"]: _query(url, _expand(t["expr"], dashboard, value)) for _, t in _targets(dashboard)
        }
        if all(results.values()) or time.monotonic() > deadline:
            return results
        time.sleep(1)


def test_every_panel_query_answers_from_the_real_prometheus(stack):
    dashboard = _dashboard()
    url = stack["url"]
    results = _answers(url, dashboard)
    for panel, target in _targets(dashboard):
        assert results[target["expr"]], f"{panel['title']}: {target['expr']} returned no series"
        # The range form Grafana's time series panels send parses and answers too.
        now = time.time()
        query = urllib.parse.urlencode(
            {"query": _expand(target["expr"], dashboard), "start": now - 60, "end": now, "step": 5}
        )
        ranged = get_json(f"{url}/api/v1/query_range?{query}")
        assert ranged["status"] == "success" and ranged["data"]["result"], target["expr"]

    def by_brand(expr_start: str) -> dict[str, float]:
        (expr,) = [e for e in results if e.startswith(expr_start)]
        return {r["metric"]["gpu_brand"]: float(r["value"][1]) for r in results[expr]}

    # The fixture fleet: 7 whole cards; Suanchi pods hold gpu-01/0, npu-01/1, the DCU and the MLU.
    assert by_brand("gpu_brand:gpu_count:count") == {
        "nvidia": 2,
        "huawei": 2,
        "amd": 1,
        "hygon": 1,
        "cambricon": 1,
    }
    assert by_brand("gpu_brand:gpu_allocated_percent:avg") == {
        "nvidia": 50,
        "huawei": 50,
        "amd": 0,
        "hygon": 100,
        "cambricon": 100,
    }
    assert by_brand("gpu_brand:gpu_utilization_percent:avg") == {
        "nvidia": 43.5,
        "huawei": 71.5,
        "amd": 73,
        "hygon": 55,
        "cambricon": 33,
    }
    (lowest,) = [e for e in results if e.startswith("bottomk")]
    assert sorted(float(r["value"][1]) for r in results[lowest]) == [33, 55, 87, 98]
    (top,) = [e for e in results if e.startswith("topk")]
    assert len(results[top]) <= 10


def test_the_vendor_variable_lists_the_brands_and_filters_the_panels(stack):
    dashboard = _dashboard()
    (variable,) = dashboard["templating"]["list"]
    metric, label = variable["query"]["query"].removeprefix("label_values(").removesuffix(")").split(", ")
    values = get_json(f"{stack['url']}/api/v1/label/{label}/values?match[]={urllib.parse.quote(metric)}")
    assert set(values["data"]) == BRANDS
    results = _answers(stack["url"], dashboard, value="huawei")
    for expr, series in results.items():
        assert series, expr
        assert {s["metric"].get("gpu_brand") for s in series} == {"huawei"}, expr


def test_an_unknown_metric_would_be_caught(stack):
    # The check above means something: a panel on a metric nothing records returns no series.
    assert _query(stack["url"], "gpu_brand:gpu_allocation_made_up:avg") == []
    with pytest.raises(Exception, match="400"):
        get_json(f"{stack['url']}/api/v1/query?query={urllib.parse.quote('topk(10, ')}")
