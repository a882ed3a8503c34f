"""python manage.py serve: the web server, a Celery worker and Celery beat as one supervised group.

The web server writes to the terminal; the worker and beat write to ``var/log/worker.log`` and
``var/log/beat.log``, and only their warnings and errors also reach the terminal (``apps/demo/logtee.py``).
A worker or beat that exits is started again with a growing delay (``apps/demo/supervise.py``, one
line here per restart, its log appended); the web server keeps serving. Ctrl-C / SIGTERM stops all
three; the web server exiting stops the rest.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand

from apps.demo.logtee import LogTee, open_log
from apps.demo.supervise import Child, Supervisor

# Processes whose output goes to var/log/<name>.log (warnings and errors also to the terminal).
LOGGED = ("worker", "beat")


def _shown(path: Path) -> str:
    """A path as the person at the terminal would type it (relative to where they are, if inside)."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def background_commands(bin_dir: Path, var_dir: Path) -> dict[str, list[str]]:
    """The worker's and beat's command lines."""
    worker = [
        str(bin_dir / "celery"),
        "-A",
        "worker.celery",
        "worker",
        "--loglevel",
        "INFO",
        "--concurrency",
        "2",
        "-Q",
        "default,scheduler,push,ingest,billing",
    ]
    if settings.CELERY_BROKER_URL.startswith("filesystem://"):
        # no broadcast traffic on the embedded broker (config/settings/base.py, worker/broker.py)
        worker += ["--without-heartbeat", "--without-gossip", "--without-mingle"]
    beat = [
        str(bin_dir / "celery"),
        "-A",
        "worker.celery",
        "beat",
        "--loglevel",
        "INFO",
        "--schedule",
        str(var_dir / "celerybeat-schedule"),
    ]
    return {"worker": worker, "beat": beat}


class Command(BaseCommand):
    help = "Serve UI + API + admin (gunicorn) with a Celery worker and beat."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--web-workers", type=int, default=2)
        parser.add_argument("--no-worker", action="store_true", help="web only")

    def handle(self, *args, **options):
        bin_dir = Path(sys.executable).parent
        env = dict(os.environ)
        env.setdefault(
            "DJANGO_SETTINGS_MODULE", os.environ.get("DJANGO_SETTINGS_MODULE", "config.settings.local")
        )
        # The demo serves like production: DEBUG off (the styled 403/404/500 pages, not Django's
        # technical 404) and static files collected with hashed names and gzip copies, which WhiteNoise
        # serves compressed with a year-long immutable Cache-Control (config/settings/base.py STORAGES).
        # DJANGO_DEBUG=1 in the environment still turns DEBUG on.
        env.setdefault("DJANGO_DEBUG", "0")
        var_dir = Path(settings.VAR_DIR)
        var_dir.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                sys.executable,
                str(Path(settings.BASE_DIR) / "manage.py"),
                "collectstatic",
                "--noinput",
                "-v",
                "0",
            ],
            env=env,
            check=True,
        )
        commands = {
            "web": [
                str(bin_dir / "gunicorn"),
                "config.wsgi:application",
                "--bind",
                f"{options['host']}:{options['port']}",
                "--workers",
                str(options["web_workers"]),
                "--threads",
                "4",
                "--access-logfile",
                "-",
            ],
        }
        if not options["no_worker"]:
            commands.update(background_commands(bin_dir, var_dir))
        base_dir = Path(settings.BASE_DIR)  # gunicorn and celery import config/ and worker/ from here
        log_dir = var_dir / "log"
        children = []
        logs: dict[str, Path] = {}
        for name, cmd in commands.items():
            if name in LOGGED:
                logs[name] = log_dir / f"{name}.log"
                tee = LogTee(name, log=open_log(logs[name]), terminal=sys.stderr)
                children.append(Child(name, cmd, restart=True, tee=tee, env={**env, "PYTHONUNBUFFERED": "1"}))
            else:
                children.append(Child(name, cmd, env=env))
        supervisor = Supervisor(children, cwd=str(base_dir), write=self.stdout.write)
        signal.signal(signal.SIGINT, supervisor.stop)
        signal.signal(signal.SIGTERM, supervisor.stop)
        supervisor.start()
        self.stdout.write(self.style.SUCCESS(f"Suanchi is up: http://{options['host']}:{options['port']}/"))
        for name, path in logs.items():
            self.stdout.write(f"  {name} log: {_shown(path)} (its warnings and errors also appear here)")
        supervisor.run()
