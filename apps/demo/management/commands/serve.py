"""python manage.py serve: the web server, a Celery worker and Celery beat as one supervised group.

The web server writes to the terminal; the worker and beat write to ``var/log/worker.log`` and
``var/log/beat.log``, and only their warnings and errors also reach the terminal (``apps/demo/logtee.py``).
Stops all three when any of them exits or on Ctrl-C / SIGTERM.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand

from apps.demo.logtee import LogTee, open_log

# Processes whose output goes to var/log/<name>.log (warnings and errors also to the terminal).
LOGGED = ("worker", "beat")


def _shown(path: Path) -> str:
    """A path as the person at the terminal would type it (relative to where they are, if inside)."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


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
            commands["worker"] = [
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
            commands["beat"] = [
                str(bin_dir / "celery"),
                "-A",
                "worker.celery",
                "beat",
                "--loglevel",
                "INFO",
                "--schedule",
                str(var_dir / "celerybeat-schedule"),
            ]
        base_dir = Path(settings.BASE_DIR)  # gunicorn and celery import config/ and worker/ from here
        log_dir = var_dir / "log"
        procs: dict[str, subprocess.Popen] = {}
        tees: dict[str, LogTee] = {}
        logs: dict[str, Path] = {}
        pumps = []
        for name, cmd in commands.items():
            if name in LOGGED:
                logs[name] = log_dir / f"{name}.log"
                tees[name] = LogTee(name, log=open_log(logs[name]), terminal=sys.stderr)
                procs[name] = subprocess.Popen(
                    cmd,
                    cwd=base_dir,
                    env={**env, "PYTHONUNBUFFERED": "1"},
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    encoding="utf-8",
                    errors="replace",
                )
                pumps.append(tees[name].start(procs[name].stdout))
            else:
                procs[name] = subprocess.Popen(cmd, cwd=base_dir, env=env)
            self.stdout.write(f"started {name} (pid {procs[name].pid})")
        self.stdout.write(self.style.SUCCESS(f"Suanchi is up: http://{options['host']}:{options['port']}/"))
        for name, path in logs.items():
            self.stdout.write(f"  {name} log: {_shown(path)} (its warnings and errors also appear here)")

        stopping = False

        def stop(*_):
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        try:
            while not stopping:
                exited = [name for name, proc in procs.items() if proc.poll() is not None]
                if exited:
                    self.stderr.write(f"{', '.join(exited)} exited; stopping the rest")
                    for name in exited:
                        if name in tees:
                            time.sleep(0.2)  # let its last lines arrive
                            self.stderr.write(f"the last lines of {_shown(logs[name])}:")
                            for line in tees[name].recent:
                                self.stderr.write(f"{name} | {line}")
                    break
                time.sleep(0.5)
        finally:
            for proc in procs.values():
                if proc.poll() is None:
                    proc.terminate()
            deadline = time.monotonic() + 10
            for proc in procs.values():
                try:
                    proc.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            for pump in pumps:  # a pipe ends once its process (and any child holding it) is gone
                pump.join(timeout=2)
            for name, tee in tees.items():
                if not any(p.is_alive() for p in pumps if p.name == f"logtee-{name}"):
                    tee.log.close()
