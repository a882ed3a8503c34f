"""API load: concurrent users list, submit and cancel jobs while the scheduler cycles and telemetry ingests.

What runs (all on 127.0.0.1, real PostgreSQL and Redis):

- the API under gunicorn (``config.wsgi``, test settings, 2 workers × 4 threads) on a free port, against
  a benchmark database it creates from scratch (``suanchi_load``, dropped and migrated each run);
- Redis database 12 as the Celery broker and cache: each submission enqueues a cycle request there
  (not consumed); the scheduling cycle itself runs in its own process every second, as beat and the
  scheduler worker do (``scheduling_cycle_run``, the production path with quotas);
- a telemetry process ingesting one sample per card per second through ``samples_ingest``;
- USERS threads, each with its own API token in one of four projects (quotas: 30 CU guaranteed,
  10 CU borrowable each, on a 160-card A100 fleet), for DURATION seconds: 45 % list jobs, 30 % submit
  (1 or 2 whole cards), 15 % cancel one of their own jobs, 10 % read a job's trace.

Baseline, measured in the same run: one user, no cycle and no ingestion, BASELINE seconds.

Prints throughput and p50 / p95 / p99 per endpoint for both, then checks that no card is over-allocated,
no quota is exceeded, and every job a user submitted (201) is in the database with a valid state
(those whose cancel answered 200 are cancelled). Figures only; nothing is asserted on time.

    python benchmarks/load_api.py            # BENCH_USERS=8 BENCH_DURATION=30 BENCH_BASELINE=8
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import defaultdict
from datetime import date
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DB_NAME = os.environ.get("BENCH_DB", "suanchi_load")
DB_URL = f"postgres://postgres@127.0.0.1:5432/{DB_NAME}"
REDIS = os.environ.get("BENCH_REDIS", "redis://127.0.0.1:6379/12")
os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings.test"
os.environ["DATABASE_URL"] = DB_URL
os.environ["REDIS_URL"] = REDIS
os.environ["CELERY_BROKER_URL"] = REDIS

USERS = int(os.environ.get("BENCH_USERS", 8))
DURATION = float(os.environ.get("BENCH_DURATION", 30))
BASELINE = float(os.environ.get("BENCH_BASELINE", 8))
NODES = 20  # × 8 A100 = 160 cards
PROJECTS = 4


# ------------------------------------------------------------------------------------------ setup
def recreate_database() -> None:
    import psycopg

    with psycopg.connect("postgres://postgres@127.0.0.1:5432/postgres", autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (DB_NAME,))
        conn.execute(f'DROP DATABASE IF EXISTS "{DB_NAME}"')
        conn.execute(f'CREATE DATABASE "{DB_NAME}"')
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--verbosity", "0"], cwd=ROOT, check=True, env=os.environ
    )


def build_world() -> dict:
    from django.contrib.auth import get_user_model

    from apps.accounts.models import Department, Membership, Project
    from apps.accounts.services import api_token_create
    from apps.catalog.models import ComputeCoefficient, DeviceModel
    from apps.inventory.models import Cluster, Device, Node, Pool
    from apps.quotas.services import quota_create

    a100 = DeviceModel.objects.create(
        vendor="nvidia", kind="gpu", name="A100 80GB SXM4", slug="a100", memory_mib=81920
    )
    ComputeCoefficient.objects.create(
        device_model=a100, value=Decimal("1.0000"), effective_from=date(2024, 1, 1)
    )
    cluster = Cluster.objects.create(name="Load", slug="load")
    pool = Pool.objects.create(cluster=cluster, name="training", slug="training")
    for n in range(NODES):
        node = Node.objects.create(
            cluster=cluster, pool=pool, name=f"gpu-{n:03d}", driver_version="550.54.15"
        )
        Device.objects.bulk_create(
            Device(node=node, vendor="nvidia", index=i, uuid=f"GPU-{n:03d}-{i}", device_model=a100)
            for i in range(8)
        )
    staff = get_user_model().objects.create_user("load-admin", is_staff=True, is_superuser=True)
    department = Department.objects.create(name="Research", slug="research")
    users = []
    for p in range(PROJECTS):
        project = Project.objects.create(department=department, name=f"p{p}", slug=f"p{p}", namespace=f"p{p}")
        quota_create(
            actor=staff,
            project=project,
            resource_class="any",
            guaranteed_cu=Decimal("30"),
            borrowing_limit_cu=Decimal("10"),
        )
        for u in range(USERS // PROJECTS + (1 if p < USERS % PROJECTS else 0)):
            user = get_user_model().objects.create_user(f"u{p}-{u}")
            Membership.objects.create(user=user, project=project, role="member")
            _, key = api_token_create(user=user, name="load", actor=user)
            users.append({"project": project.slug, "key": key, "name": user.username})
    return {"users": users}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(port: int) -> subprocess.Popen:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "config.wsgi:application",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            "2",
            "--threads",
            "4",
            "--log-level",
            "warning",
        ],
        cwd=ROOT,
        env=os.environ,
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return proc
        except OSError:
            time.sleep(0.2)
    raise SystemExit("gunicorn did not start")


# The background loops run as separate processes (their own DB connections and interpreters).
CYCLE_LOOP = """
import time, django; django.setup()
from apps.scheduling.services import scheduling_cycle_run
n = placed = 0
end = time.monotonic() + {duration}
while time.monotonic() < end:
    placed += len(scheduling_cycle_run(actor="scheduler").placed_job_ids); n += 1
    time.sleep(1.0)
print(f"CYCLES {{n}} PLACED {{placed}}")
"""
INGEST_LOOP = """
import time, django; django.setup()
from django.utils import timezone
from apps.inventory.models import Device
from apps.telemetry.samples import Sample
from apps.telemetry.services import samples_ingest
ids = list(Device.objects.values_list("pk", flat=True))
n = used = 0
end = time.monotonic() + {duration}
while time.monotonic() < end:
    now = timezone.now()
    report = samples_ingest(samples=[Sample(at=now, device_id=i, utilization_pct=float((i + n) % 100),
        memory_used_mib=1024.0 * (i % 80)) for i in ids], source="load", now=now)
    n += 1; used += report.used
    time.sleep(1.0)
print(f"INGESTS {{n}} SAMPLES {{used}}")
"""


def background(code: str, duration: float) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", code.format(duration=duration)],
        cwd=ROOT,
        env=os.environ,
        stdout=subprocess.PIPE,
        text=True,
    )


# ------------------------------------------------------------------------------------------- load
class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.latencies: dict[str, list[float]] = defaultdict(list)
        self.statuses: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
        self.submitted: dict[int, str] = {}  # job id → user
        self.cancelled: set[int] = set()
        self.errors: list[str] = []

    def record(self, label: str, seconds: float, status: int) -> None:
        with self.lock:
            self.latencies[label].append(seconds)
            self.statuses[label][status] += 1


def user_loop(base: str, user: dict, stats: Stats, until: float, seed: int, mix=(0.45, 0.30, 0.15)) -> None:
    import requests

    rng = random.Random(seed)
    session = requests.Session()
    session.headers["Authorization"] = f"Token {user['key']}"
    mine: list[int] = []

    def call(label: str, method: str, path: str, **kwargs):
        started = time.perf_counter()
        response = session.request(method, base + path, timeout=60, **kwargs)
        stats.record(label, time.perf_counter() - started, response.status_code)
        if response.status_code >= 500:
            stats.errors.append(f"{method} {path} -> {response.status_code}")
        return response

    n = 0
    while time.monotonic() < until:
        n += 1
        roll = rng.random()
        if roll < mix[0] or (not mine and roll >= mix[0] + mix[1]):
            call(
                "GET  /api/jobs/jobs/",
                "GET",
                "/api/jobs/jobs/",
                params={"page_size": 20, "ordering": "-created_at"},
            )
        elif roll < mix[0] + mix[1]:
            body = {
                "project": user["project"],
                "name": f"{user['name']}-{n}",
                "image": "pytorch:2.3",
                "request_kind": "whole_cards",
                "device_model": "a100",
                "count": rng.choice((1, 1, 2)),
                "expected_duration_s": 3600,
            }
            response = call("POST /api/jobs/jobs/", "POST", "/api/jobs/jobs/", json=body)
            if response.status_code == 201:
                job_id = response.json()["id"]
                mine.append(job_id)
                with stats.lock:
                    stats.submitted[job_id] = user["name"]
        elif roll < mix[0] + mix[1] + mix[2]:
            job_id = mine.pop(rng.randrange(len(mine)))
            response = call(
                "POST /api/jobs/jobs/{id}/cancel/", "POST", f"/api/jobs/jobs/{job_id}/cancel/", json={}
            )
            if response.status_code == 200:
                with stats.lock:
                    stats.cancelled.add(job_id)
        else:
            job_id = rng.choice(mine)
            call("GET  /api/jobs/jobs/{id}/trace/", "GET", f"/api/jobs/jobs/{job_id}/trace/")


def run_load(base: str, users: list[dict], seconds: float, stats: Stats, seed: int) -> float:
    until = time.monotonic() + seconds
    threads = [
        threading.Thread(target=user_loop, args=(base, u, stats, until, seed + i))
        for i, u in enumerate(users)
    ]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.monotonic() - started


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))] * 1000


def report(title: str, stats: Stats, elapsed: float) -> None:
    total = sum(len(v) for v in stats.latencies.values())
    print(f"\n{title}: {total} requests in {elapsed:.1f} s = {total / elapsed:.1f} req/s")
    print(f"  {'endpoint':36} {'n':>6} {'req/s':>7} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8}  statuses")
    for label in sorted(stats.latencies):
        v = stats.latencies[label]
        codes = ", ".join(f"{c}×{n}" for c, n in sorted(stats.statuses[label].items()))
        print(
            f"  {label:36} {len(v):6d} {len(v) / elapsed:7.1f} {pct(v, 50):8.1f} {pct(v, 95):8.1f} "
            f"{pct(v, 99):8.1f}  {codes}"
        )


# ----------------------------------------------------------------------------------------- checks
def check_invariants(stats: Stats) -> bool:
    from django.db.models import Q, Sum

    from apps.inventory.models import Device
    from apps.jobs.models import Allocation, Job, JobState
    from apps.quotas.models import Quota

    ok = True
    active = Allocation.objects.filter(released_at__isnull=True)
    over = []
    for row in active.values("device_id").annotate(mem=Sum("memory_mib"), milli=Sum("compute_milli")):
        device = Device.objects.select_related("device_model").get(pk=row["device_id"])
        whole = active.filter(device_id=row["device_id"], whole_card=True).count()
        others = active.filter(device_id=row["device_id"]).count()
        if row["mem"] > device.device_model.memory_mib or row["milli"] > 1000 or (whole and others > 1):
            over.append(row)
    print(
        f"\ncheck: active allocations {active.count()} on {active.values('device_id').distinct().count()} cards; "
        f"over-allocated cards: {len(over)}"
    )
    ok &= not over

    for quota in Quota.objects.select_related("project"):
        mine = active.filter(job__project=quota.project)
        own = mine.filter(borrowed=False).aggregate(cu=Sum("compute_units"))["cu"] or Decimal(0)
        borrowed = mine.filter(borrowed=True).aggregate(cu=Sum("compute_units"))["cu"] or Decimal(0)
        limit = quota.borrowing_limit_cu if quota.borrowing_limit_cu is not None else Decimal("Infinity")
        good = own <= quota.guaranteed_cu and borrowed <= limit
        ok &= good
        print(
            f"check: quota {quota.project.slug}: guaranteed use {own} / {quota.guaranteed_cu} CU, "
            f"borrowed {borrowed} / {quota.borrowing_limit_cu} CU -> {'ok' if good else 'EXCEEDED'}"
        )

    ids = set(stats.submitted)
    rows = dict(Job.objects.filter(pk__in=ids).values_list("pk", "state"))
    missing = ids - set(rows)
    wrong_cancel = [i for i in stats.cancelled if rows.get(i) != JobState.CANCELLED]
    terminal_with_cards = (
        active.filter(job__state__in=[JobState.CANCELLED, JobState.SUCCEEDED, JobState.FAILED])
        .values("job_id")
        .distinct()
        .count()
    )
    by_state: dict[str, int] = defaultdict(int)
    for state in rows.values():
        by_state[state] += 1
    unknown = Job.objects.filter(~Q(pk__in=ids)).count()
    print(
        f"check: submitted (201) {len(ids)}, in the database {len(rows)}, missing {len(missing)}, "
        f"unexpected extra jobs {unknown}; by state {dict(sorted(by_state.items()))}"
    )
    print(
        f"check: cancels answered 200: {len(stats.cancelled)}, not cancelled in the database: {len(wrong_cancel)}; "
        f"finished jobs still holding cards: {terminal_with_cards}; 5xx responses: {len(stats.errors)}"
    )
    ok &= not missing and not wrong_cancel and not terminal_with_cards and not unknown and not stats.errors
    return ok


def main() -> int:
    import django

    recreate_database()
    django.setup()
    import redis

    redis.Redis.from_url(REDIS).flushdb()
    world = build_world()
    port = free_port()
    server = start_server(port)
    base = f"http://127.0.0.1:{port}"
    print(
        f"load_api: {NODES * 8} A100 cards on {NODES} nodes, {PROJECTS} projects with quotas, "
        f"{len(world['users'])} users; gunicorn 2 workers × 4 threads on {base}; broker/cache {REDIS} "
        f"(cycle requests not consumed: the cycle runs every 1 s in its own process)"
    )
    try:
        baseline = Stats()
        elapsed = run_load(base, world["users"][:1], BASELINE, baseline, seed=1)
        report(f"baseline (1 user, no scheduler, no ingestion, {BASELINE:.0f} s)", baseline, elapsed)

        cycle = background(CYCLE_LOOP, DURATION)
        ingest = background(INGEST_LOOP, DURATION)
        stats = Stats()
        elapsed = run_load(base, world["users"], DURATION, stats, seed=100)
        cycle_out = cycle.communicate(timeout=300)[0].strip()
        ingest_out = ingest.communicate(timeout=300)[0].strip()
        report(
            f"load ({len(world['users'])} users, scheduler every 1 s, ingestion of {NODES * 8} cards every 1 s, "
            f"{DURATION:.0f} s)",
            stats,
            elapsed,
        )
        print(f"background: {cycle_out}; {ingest_out}")
        stats.submitted.update(baseline.submitted)
        stats.cancelled |= baseline.cancelled
        ok = check_invariants(stats)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
    print(f"\nload_api: invariants {'hold' if ok else 'BROKEN'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
