"""Soak: the demo as ``make run`` serves it, under steady browser-like and API traffic, for ``--minutes``.

What runs (all on 127.0.0.1): a temporary var directory (SQLite in WAL mode, the embedded
``filesystem://`` broker, the simulated cluster; no PostgreSQL or Redis), migrated and loaded with
``load_demo``, then ``manage.py serve`` on a free port (gunicorn, a Celery worker and Celery beat).
For the whole run:

- browser-like visitors (``--visitors``, default 2), logged in as the demo user ``alice``: open a page
  (home, jobs, quotas, fleet, nodes, devices, telemetry, billing, job detail), fetch the stylesheets and
  scripts it names that are not cached yet (a new visitor with an empty cache every 20 pages), think
  0.5 s;
- one API client, logged in as ``alice`` (session and CSRF token, as the site's own pages call the API):
  reads lists (jobs, quotas, nodes, devices, device models), submits a one-card job every ~5 s and
  cancels it ~10 s later (the scheduling cycle has usually placed it and the simulated cluster runs it);
- probe tasks: every 2 s one task with a known id on each queue in turn (the beat tasks of the default,
  scheduler, push, ingest and billing queues: idempotent, meant to run periodically), sent through the
  same broker from this process.

At the end traffic stops, the queues drain (up to ``--drain`` seconds), Ctrl-C stops ``serve``, and it
prints: requests made (pages, static, API), 5xx answers, connection failures, restarts (the
supervisor's "restarting it in" lines), and tasks: probes sent vs. finished (a ``succeeded``, ``raised``,
``retry`` or ``Discarding revoked`` line for its id in ``worker.log``) = lost tasks, and every task
the worker received that never finished. Exits 1 when restarts, 5xx or lost tasks are not all 0.
Figures only; nothing is timed.

    python benchmarks/soak_demo.py --minutes 30
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from apps.core import task_names  # noqa: E402 - plain constants, no Django needed

USER, PASSWORD = "alice", "suanchi-demo"  # apps/demo/accounts.py
PAGES = ["/", "/jobs/", "/quotas/", "/inventory/", "/inventory/nodes/", "/inventory/devices/", "/telemetry/"]
PAGES += ["/billing/"]
API_LISTS = [
    "/api/jobs/jobs/",
    "/api/quotas/quotas/",
    "/api/inventory/nodes/",
    "/api/inventory/devices/",
    "/api/catalog/device-models/",
]
PROBES = [  # one beat task per queue (worker/celery.py BEAT, task_routes)
    task_names.DELIVERIES_SEND,  # default
    task_names.SCHEDULING_CYCLE,  # scheduler
    task_names.PUSH_CLUSTERS,  # push
    task_names.NODE_STALENESS_CHECK,  # ingest
    task_names.METERING,  # billing
]
ASSET = re.compile(r'(?:href|src)="(/static/[^"]+\.(?:css|js|svg|png|woff2?))"')
JOB_LINK = re.compile(r'href="(/jobs/\d+/)"')
TASK_LINE = re.compile(r"Task (?P<name>[\w.]+)\[(?P<id>[0-9a-f-]{36})\] (?P<what>\w+)")
DISCARDED = re.compile(r"Discarding revoked task: [\w.]+\[(?P<id>[0-9a-f-]{36})\]")


class Tally:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.kinds: Counter[str] = Counter()
        self.statuses: Counter[int] = Counter()
        self.server_errors: list[str] = []
        self.failures: list[str] = []
        self.jobs: Counter[str] = Counter()

    def request(self, session: requests.Session, kind: str, method: str, url: str, **kwargs):
        try:
            response = session.request(method, url, timeout=60, **kwargs)
        except requests.RequestException as exc:
            with self.lock:
                self.kinds[kind] += 1
                self.failures.append(f"{method} {url}: {exc.__class__.__name__}")
            return None
        with self.lock:
            self.kinds[kind] += 1
            self.statuses[response.status_code] += 1
            if response.status_code >= 500:
                self.server_errors.append(f"{method} {url} -> {response.status_code}")
        return response


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _env(work: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_BROKER_URL", "REDIS_URL")}
    env.update(
        DJANGO_SETTINGS_MODULE="config.settings.local",
        SUANCHI_VAR_DIR=str(work / "var"),
        DJANGO_STATIC_ROOT=str(work / "static"),
        PYTHONUNBUFFERED="1",
    )
    return env


def login(base: str, tally: Tally) -> requests.Session:
    session = requests.Session()
    page = tally.request(session, "page", "GET", f"{base}/accounts/login/")
    if page is None:
        raise SystemExit("the login page did not answer")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
    answer = tally.request(
        session,
        "page",
        "POST",
        f"{base}/accounts/login/",
        data={"username": USER, "password": PASSWORD, "csrfmiddlewaretoken": token},
        headers={"Referer": f"{base}/accounts/login/"},
    )
    if answer is None or "sessionid" not in session.cookies:
        raise SystemExit(f"could not log in as {USER}: {answer and answer.status_code}")
    session.headers["X-CSRFToken"] = session.cookies["csrftoken"]
    session.headers["Referer"] = f"{base}/"
    return session


def browse(base: str, tally: Tally, stop: threading.Event) -> None:
    session = login(base, tally)
    cached: set[str] = set()
    job_pages: list[str] = []
    for n in itertools.count():
        if stop.is_set():
            return
        if n % 20 == 0:
            cached.clear()  # a new visitor
        path = random.choice(PAGES + job_pages[-5:])
        page = tally.request(session, "page", "GET", base + path)
        if page is not None and page.ok:
            job_pages = (job_pages + JOB_LINK.findall(page.text))[-20:]
            for asset in dict.fromkeys(ASSET.findall(page.text)):
                if asset not in cached:
                    cached.add(asset)
                    tally.request(session, "static", "GET", base + asset)
        stop.wait(0.5)


def api(base: str, tally: Tally, stop: threading.Event) -> None:
    session = login(base, tally)
    models = tally.request(session, "api", "GET", f"{base}/api/catalog/device-models/").json()
    rows = models.get("results", models) if isinstance(models, dict) else models
    slugs = [row["slug"] for row in rows]
    model = next((s for s in slugs if "a100" in s), slugs[0])
    pending: list[tuple[float, int]] = []
    next_submit = 0.0
    while not stop.is_set():
        tally.request(session, "api", "GET", base + random.choice(API_LISTS))
        now = time.monotonic()
        if now >= next_submit:
            next_submit = now + 5
            body = {
                "project": "vision",
                "name": f"soak-{uuid.uuid4().hex[:8]}",
                "image": "pytorch:2.3",
                "request_kind": "whole_cards",
                "device_model": model,
                "count": 1,
            }
            answer = tally.request(session, "api", "POST", f"{base}/api/jobs/jobs/", json=body)
            if answer is not None and answer.status_code == 201:
                tally.jobs["submitted"] += 1
                pending.append((now + 10, answer.json()["id"]))
        while pending and pending[0][0] <= now:
            _, job = pending.pop(0)
            answer = tally.request(
                session, "api", "POST", f"{base}/api/jobs/jobs/{job}/cancel/", json={"reason": "soak"}
            )
            if answer is not None and answer.status_code == 200:
                tally.jobs["cancelled"] += 1
        stop.wait(0.5)


def probe(sent: list[str], stop: threading.Event) -> None:
    from worker.celery import app  # the settings of os.environ (set in main): the soak's broker folder

    for n in itertools.count():
        if stop.wait(2):
            return
        task_id = str(uuid.uuid4())
        app.send_task(PROBES[n % len(PROBES)], task_id=task_id)
        sent.append(task_id)


def task_ids(log: Path) -> tuple[set[str], set[str]]:
    """Ids the worker received, and ids it finished (succeeded, failed, retried, discarded)."""
    received, finished = set(), set()
    if not log.exists():
        return received, finished
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        if match := TASK_LINE.search(line):
            (received if match["what"] == "received" else finished).add(match["id"])
        elif match := DISCARDED.search(line):
            finished.add(match["id"])
    return received, finished


def run_serve(env: dict[str, str], port: int, work: Path) -> subprocess.Popen:
    manage = [sys.executable, "manage.py"]
    subprocess.run([*manage, "migrate", "--noinput", "-v", "0"], cwd=ROOT, env=env, check=True)
    subprocess.run([*manage, "load_demo"], cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
    return subprocess.Popen(
        [*manage, "serve", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=(work / "serve.out").open("w"),
        stderr=(work / "serve.err").open("w"),
    )


def wait_until_up(base: str, serve: subprocess.Popen) -> None:
    for _ in range(600):
        if serve.poll() is not None:
            raise SystemExit(f"serve exited with code {serve.returncode}")
        try:
            if requests.get(f"{base}/healthz", timeout=5).ok:
                return
        except requests.RequestException:
            pass
        time.sleep(0.5)
    raise SystemExit("serve did not answer")


def report(args, tally: Tally, sent: list[str], work: Path, seconds: float) -> int:
    var = work / "var"
    received, finished = task_ids(var / "log" / "worker.log")
    lost = [t for t in sent if t not in finished]
    out = (work / "serve.out").read_text(encoding="utf-8", errors="replace")
    restarts = Counter(m[1] for m in re.finditer(r"^(\w+) exited with code .*restarting it in", out, re.M))
    worker_log = (var / "log" / "worker.log").read_text(encoding="utf-8", errors="replace")
    set_aside = var / "broker" / "queue" / ".unreadable"
    print(f"soak: {seconds / 60:.1f} min of traffic; work dir {work}")
    print(
        f"requests: {sum(tally.kinds.values())} (pages {tally.kinds['page']}, static {tally.kinds['static']},"
        f" api {tally.kinds['api']}); status counts {dict(sorted(tally.statuses.items()))}"
    )
    print(f"5xx: {len(tally.server_errors)}  connection failures: {len(tally.failures)}")
    for line in (tally.server_errors + tally.failures)[:10]:
        print(f"  {line}")
    print(f"jobs via API: submitted {tally.jobs['submitted']}, cancelled {tally.jobs['cancelled']}")
    print(f"restarts: {sum(restarts.values())} {dict(restarts)}")
    print(
        f"tasks: probes sent {len(sent)}, finished {len(sent) - len(lost)}, lost {len(lost)};"
        f" worker received {len(received)} task ids, finished {len(received & finished)},"
        f" unfinished {len(received - finished)}"
    )
    print(
        f"broker: JSONDecodeError lines in worker.log {worker_log.count('JSONDecodeError')},"
        f" files set aside {len(os.listdir(set_aside)) if set_aside.exists() else 0}"
    )
    print(
        f"figures: restarts {sum(restarts.values())}, 5xx {len(tally.server_errors)}, lost tasks {len(lost)}"
    )
    return 1 if (restarts or tally.server_errors or lost) else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--visitors", type=int, default=2)
    parser.add_argument("--drain", type=float, default=180.0, help="seconds to wait for the queues to drain")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="suanchi-soak-"))
    env = _env(work)
    os.environ.update(env)
    for name in ("DATABASE_URL", "CELERY_BROKER_URL", "REDIS_URL"):
        os.environ.pop(name, None)
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    serve = run_serve(env, port, work)
    tally, stop, sent = Tally(), threading.Event(), []
    seconds = 0.0
    try:
        wait_until_up(base, serve)
        threads = [threading.Thread(target=browse, args=(base, tally, stop)) for _ in range(args.visitors)]
        threads += [threading.Thread(target=api, args=(base, tally, stop))]
        threads += [threading.Thread(target=probe, args=(sent, stop))]
        started = time.monotonic()
        for thread in threads:
            thread.start()
        stop.wait(args.minutes * 60)
        stop.set()
        for thread in threads:
            thread.join()
        seconds = time.monotonic() - started
        deadline = time.monotonic() + args.drain
        log = work / "var" / "log" / "worker.log"
        while time.monotonic() < deadline and not set(sent) <= task_ids(log)[1]:
            time.sleep(2)
    finally:
        serve.send_signal(signal.SIGINT)
        serve.wait(timeout=60)
    code = report(args, tally, sent, work, seconds)
    if not args.keep:
        import shutil

        shutil.rmtree(work, ignore_errors=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
