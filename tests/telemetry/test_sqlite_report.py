"""The fleet report on the SQLite demo (config.settings.local): the busiest nodes read from the node
summaries and the fleet rollups run there too (SQLite has no FETCH FIRST … WITH TIES), as do the three
figures and the series by pool."""

from __future__ import annotations

import json

from tests.fixtures.sqlite_demo import run_on_sqlite_demo

DEMO_SCRIPT = """
import json
from datetime import UTC, datetime, timedelta

from django.contrib.auth import get_user_model

from apps.inventory.models import Cluster, Device, Node, Pool
from apps.telemetry import selectors
from apps.telemetry.ingest import samples_ingest
from apps.telemetry.samples import Sample

cluster = Cluster.objects.create(name="Demo", slug="demo-sqlite")
pool = Pool.objects.create(cluster=cluster, name="p", slug="p")
cards = []
for i, busy in enumerate((90.0, 40.0, 40.0, 10.0)):
    node = Node.objects.create(cluster=cluster, pool=pool, name=f"gpu-{i:02d}")
    cards.append((Device.objects.create(node=node, vendor="nvidia", index=0, memory_mib=81920), busy))
w0 = datetime(2026, 11, 29, 6, 50, tzinfo=UTC)
samples = [
    Sample(at=w0 + timedelta(minutes=m), device_id=card.pk, utilization_pct=busy)
    for m in range(0, 75, 5)
    for card, busy in cards
]
samples_ingest(samples=samples, source="t", now=w0 + timedelta(hours=2))
staff = get_user_model().objects.create_user(username="staff", password="x", is_staff=True)
# A whole hour (07:00-08:00) from the node summaries, the edges from the fleet rollups.
period = selectors.period_parse(w0, w0 + timedelta(minutes=75))
top = selectors.top_nodes(user=staff, period=period, limit=2, source="t")
reference = selectors.fleet._top_nodes_from_cards(period, 2, "t")  # the card rollups' way
figures = selectors.three_figures(user=staff, period=period, source="t")
by_pool = selectors.fleet_utilization(user=staff, period=period, group_by="pool", source="t")
print(json.dumps({"top": top, "reference": reference, "cards": figures["cards_with_telemetry"],
                  "pools": sorted({s["group"] for s in by_pool["series"]})}, default=str))
"""


def test_the_busiest_nodes_run_on_the_sqlite_demo(tmp_path):
    out = json.loads(run_on_sqlite_demo(DEMO_SCRIPT, tmp_path).strip().splitlines()[-1])
    assert out["top"] == out["reference"]
    assert out["cards"] == 4 and out["pools"] == ["p"]
    # 90 % busy first, then the first by name of the two 40 % nodes (the sample values above).
    assert [(r["node"], r["utilization_pct"]) for r in out["top"]] == [("gpu-00", 90.0), ("gpu-01", 40.0)]


BACKFILL_SCRIPT = """
import importlib
import json
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from apps.accounts.models import Department, Project
from apps.inventory.models import Cluster, Device, Node, Pool
from apps.jobs.models import Allocation, Job
from apps.telemetry.ingest import samples_ingest
from apps.telemetry.models import CardSummary, JobSummary, NodeSummary
from apps.telemetry.samples import Sample

cluster = Cluster.objects.create(name="Demo", slug="demo-sqlite")
node = Node.objects.create(cluster=cluster, pool=Pool.objects.create(cluster=cluster, name="p", slug="p"), name="n")
card = Device.objects.create(node=node, vendor="nvidia", index=0, memory_mib=81920)
project = Project.objects.create(
    department=Department.objects.create(name="d", slug="d"), name="p", slug="p", namespace="p"
)
job = Job.objects.create(project=project, name="j", image="x", state="running", request_kind="whole_cards", count=1)
w0 = datetime(2026, 11, 29, 6, 50, tzinfo=UTC)
Allocation.objects.create(
    job=job, device=card, node=node, whole_card=True, memory_mib=1, compute_milli=1000,
    compute_units=Decimal(1), trace_id=uuid.uuid4(), started_at=w0 - timedelta(hours=1),
)
samples = [Sample(at=w0 + timedelta(minutes=m), device_id=card.pk, utilization_pct=50.0) for m in range(0, 75, 5)]
samples_ingest(samples=samples, source="t", now=w0 + timedelta(hours=2))
out = {}
for model, migration in (
    (CardSummary, "0006_card_summary"),
    (JobSummary, "0007_job_summary_fleet_total"),
    (NodeSummary, "0008_node_summary"),
):
    written = sorted(map(str, model.objects.values_list()))
    model.objects.all().delete()
    with connection.schema_editor() as editor:
        importlib.import_module(f"apps.telemetry.migrations.{migration}").backfill(None, editor)
    backfilled = sorted(map(str, model.objects.values_list()))
    out[migration] = [[row.split(", ", 1)[1] for row in rows] for rows in (written, backfilled)]
print(json.dumps(out))
"""


def test_the_summaries_backfill_on_the_sqlite_demo_gives_the_rows_ingest_wrote(tmp_path):
    """The migrations' backfill SQL runs through the schema editor, whose SQLite cursor reads ``%s``
    as a placeholder: a bucket of ``strftime('%s', …)`` was 1970-01-01 for every row."""
    out = json.loads(run_on_sqlite_demo(BACKFILL_SCRIPT, tmp_path).strip().splitlines()[-1])
    assert set(out) == {"0006_card_summary", "0007_job_summary_fleet_total", "0008_node_summary"}
    for written, backfilled in out.values():
        assert written  # ingest wrote them (and the attribution, the job summaries)
        assert backfilled == written
