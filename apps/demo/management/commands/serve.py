"""python manage.py serve: the web server, a Celery worker and Celery beat as one supervised group.

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
        procs: dict[str, subprocess.Popen] = {}
        for name, cmd in commands.items():
            procs[name] = subprocess.Popen(cmd, env=env)
            self.stdout.write(f"started {name} (pid {procs[name].pid})")
        self.stdout.write(self.style.SUCCESS(f"Suanchi is up: http://{options['host']}:{options['port']}/"))

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
