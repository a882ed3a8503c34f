"""Chart pages in a real browser: page weight and cold / warm load time, before and after issue 21's static
settings, measured in the same run on this machine.

What runs (all on 127.0.0.1): the demo as ``manage.py serve`` runs it (local settings, a temporary var
directory, ``load_demo``) in a PostgreSQL database of its own (``suanchi_page_load``, recreated each
run; ``BENCH_DATABASE_URL`` overrides it), served by gunicorn twice:

- **before**: the old static settings, toggled by ``SUANCHI_PAGE_LOAD_LEGACY=1`` (this module is then the
  settings module): DEBUG on, WhiteNoise serving from the finders with ``max-age=0``, unhashed names,
  no compressed copies, and the full ``plotly.min.js`` (4.6 MB) from the plotly package;
- **after**: the settings of this tree as ``manage.py serve`` uses them: DEBUG off, ``collectstatic`` with
  CompressedManifestStaticFilesStorage (hashed names, gzip, ``max-age=315360000, immutable``) and
  plotly.js's basic bundle.

For each chart page (/jobs/<id>/, /quotas/, /rollout/batches/<id>/, /telemetry/), logged in as the demo
admin in Debian's Chromium (Playwright): **cold** = browser cache cleared (CDP
Network.clearBrowserCache), **warm** = the same page opened again in the same context. Time = the
navigation's loadEventEnd (plotly.js is parsed and the charts drawn by then); weight = bytes over the
wire (transferSize of the document and its resources). Median of BENCH_ROUNDS rounds (default 3).
Goal: cold < 1 s, warm < 300 ms. Figures only; nothing is asserted.

    python benchmarks/page_load.py
"""

from __future__ import annotations

import os

if os.environ.get("SUANCHI_PAGE_LOAD_LEGACY") == "1":
    # ------------------------------------------------------------ "before": the old static settings
    from pathlib import Path as _Path

    import plotly as _plotly

    from config.settings.local import *  # noqa: F403

    DEBUG = True
    STATICFILES_DIRS = [  # noqa: F405
        *STATICFILES_DIRS,  # noqa: F405
        ("vendor/plotly", _Path(_plotly.__file__).resolve().parent / "package_data"),
    ]
    STORAGES = {
        "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
        "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
    }
    SUANCHI_PLOTLY_JS = "vendor/plotly/plotly.min.js"

import socket  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import urllib.request  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ADMIN = ("admin", "suanchi-admin")  # apps/demo/accounts.py
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
DATABASE_URL = os.environ.get("BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/suanchi_page_load")

# Run in the demo database: the ids of a job with a utilization curve (one is given one if none has)
# and of a gray batch.
IDS_SCRIPT = """
from datetime import timedelta
from django.utils import timezone
from apps.inventory.models import Device
from apps.jobs.models import Job
from apps.rollout.models import GrayBatch
from apps.telemetry.models import JobUtilization
row = JobUtilization.objects.order_by("job_id").first()
if row is None:
    job = Job.objects.order_by("pk").first()
    device = Device.objects.order_by("pk").first()
    now = timezone.now().replace(second=0, microsecond=0)
    JobUtilization.objects.bulk_create(
        JobUtilization(job=job, device=device, window_start=now - timedelta(minutes=5 * i), source="benchmark",
                       quality="exact", share=1.0, busy_pct=40.0 + i % 7, project_id_snapshot=job.project_id)
        for i in range(48)
    )
    job_id = job.pk
else:
    job_id = row.job_id
batch = GrayBatch.objects.order_by("pk").first()
print(job_id, batch.pk if batch else 0)
"""


def _env(var_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL")}
    env.update(
        DJANGO_SETTINGS_MODULE="config.settings.local",
        SUANCHI_VAR_DIR=str(var_dir),
        DATABASE_URL=DATABASE_URL,
        DJANGO_LOG_LEVEL="WARNING",
        PYTHONPATH=str(ROOT),
    )
    env.update(extra)
    return env


def _recreate_database() -> None:
    import psycopg

    server, name = DATABASE_URL.rsplit("/", 1)
    with psycopg.connect(server + "/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def _manage(env: dict[str, str], *args: str) -> str:
    return subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), *args],
        env=env,
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(env: dict[str, str]) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    gunicorn = str(Path(sys.executable).parent / "gunicorn")
    proc = subprocess.Popen(
        [
            gunicorn,
            "config.wsgi:application",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            "2",
            "--threads",
            "4",
        ],
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(120):
        try:
            urllib.request.urlopen(url + "/healthz", timeout=1)  # noqa: S310 - our own local server
            return proc, url
        except OSError:
            time.sleep(0.25)
    proc.terminate()
    raise RuntimeError("gunicorn did not answer /healthz")


MEASURE = """() => {
  const nav = performance.getEntriesByType('navigation')[0];
  const all = [nav, ...performance.getEntriesByType('resource')];
  return {load_ms: nav.loadEventEnd, bytes: all.reduce((s, e) => s + (e.transferSize || 0), 0),
          decoded: all.reduce((s, e) => s + (e.decodedBodySize || 0), 0),
          charts: document.querySelectorAll('[data-plotly-drawn] .main-svg').length};
}"""


def _measure(browser, base: str, pages: list[str]) -> dict[str, dict[str, list]]:
    out: dict[str, dict[str, list]] = {p: {"cold": [], "warm": []} for p in pages}
    for _round in range(ROUNDS):
        for path in pages:
            context = browser.new_context(viewport={"width": 1280, "height": 900})
            page = context.new_page()
            page.goto(base + "/accounts/login/")
            page.fill("input[name=username]", ADMIN[0])
            page.fill("input[name=password]", ADMIN[1])
            with page.expect_navigation():
                page.press("input[name=password]", "Enter")
            cdp = context.new_cdp_session(page)
            cdp.send("Network.enable")
            cdp.send("Network.clearBrowserCache")
            for kind in ("cold", "warm"):
                response = page.goto(base + path, wait_until="load")
                if response is None or response.status != 200:
                    raise RuntimeError(f"{base}{path} answered {response and response.status}")
                page.wait_for_timeout(50)
                figures = page.evaluate(MEASURE)
                if not figures["charts"]:
                    print(f"warning: {path} drew no chart (no data for it in the demo)", flush=True)
                out[path][kind].append(figures)
            context.close()
    return out


def _median(rows: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in rows)


def main() -> None:
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="suanchi-page-load-") as tmp:
        var_dir = Path(tmp)
        env = _env(var_dir)
        if os.environ.get("BENCH_REUSE_DB") != "1":  # 1: the database of the previous run, as it is
            print("loading the demo (migrate + load_demo) …", flush=True)
            _recreate_database()
            _manage(env, "migrate", "--noinput")
            _manage(env, "load_demo")
        job_id, batch_id = (int(x) for x in _manage(env, "shell", "-c", IDS_SCRIPT).split()[-2:])
        pages = [f"/jobs/{job_id}/", "/quotas/", "/telemetry/"]
        if batch_id:
            pages.insert(2, f"/rollout/batches/{batch_id}/")
        after_env = _env(var_dir, DJANGO_DEBUG="0", DJANGO_STATIC_ROOT=str(var_dir / "static-after"))
        _manage(after_env, "collectstatic", "--noinput", "-v", "0")
        before_env = _env(
            var_dir,
            DJANGO_SETTINGS_MODULE="benchmarks.page_load",
            SUANCHI_PAGE_LOAD_LEGACY="1",
            DJANGO_STATIC_ROOT=str(var_dir / "static-before"),
        )
        results = {}
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            for name, server_env in (("before", before_env), ("after", after_env)):
                proc, base = _serve(server_env)
                try:
                    results[name] = _measure(browser, base, pages)
                finally:
                    proc.terminate()
                    try:
                        proc.wait(timeout=10)
                    except subprocess.TimeoutExpired:  # keep-alive connections hold the graceful stop
                        proc.kill()
                        proc.wait()
            browser.close()

    print(f"\nmedian of {ROUNDS} rounds; weight = bytes over the wire; time = loadEventEnd")
    header = f"{'page':28} {'':6} {'cold KB':>9} {'cold ms':>8} {'warm KB':>9} {'warm ms':>8} {'charts':>6}"
    print(header)
    print("-" * len(header))
    for path in pages:
        for name in ("before", "after"):
            r = results[name][path]
            print(
                f"{path:28} {name:6} {_median(r['cold'], 'bytes') / 1024:9.1f} {_median(r['cold'], 'load_ms'):8.0f} "
                f"{_median(r['warm'], 'bytes') / 1024:9.1f} {_median(r['warm'], 'load_ms'):8.0f} "
                f"{int(_median(r['cold'], 'charts')):6d}"
            )
        b, a = results["before"][path], results["after"][path]
        print(
            f"{'':28} {'ratio':6} {_median(a['cold'], 'bytes') / max(_median(b['cold'], 'bytes'), 1):9.2f} "
            f"{_median(a['cold'], 'load_ms') / max(_median(b['cold'], 'load_ms'), 1):8.2f} "
            f"{'':9} {_median(a['warm'], 'load_ms') / max(_median(b['warm'], 'load_ms'), 1):8.2f}"
        )
    cold = max(_median(results["after"][p]["cold"], "load_ms") for p in pages)
    warm = max(_median(results["after"][p]["warm"], "load_ms") for p in pages)
    print(
        f"\nafter: slowest cold load {cold:.0f} ms (goal < 1000), slowest warm load {warm:.0f} ms (goal < 300)"
    )


if __name__ == "__main__":
    main()
