"""Production settings: `check --deploy` is clean, and the settings refuse to start half-configured."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCTION_ENV = {
    "DJANGO_SETTINGS_MODULE": "config.settings.production",
    "DJANGO_SECRET_KEY": "k3J9-pQ2_vX7!mZ4@rT8#wL1$yB6%nC0^hF5&dG2*sA9(eU3)oI7",
    "DATABASE_URL": "postgres://postgres@127.0.0.1:5432/suanchi",
    "CELERY_BROKER_URL": "redis://127.0.0.1:6379/0",
    "REDIS_URL": "redis://127.0.0.1:6379/0",
    "DJANGO_ALLOWED_HOSTS": "suanchi.example.com",
}


def _manage(*args: str, env: dict) -> subprocess.CompletedProcess:
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DJANGO_", "DATABASE_URL", "CELERY_", "REDIS_URL"))
    }
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_check_deploy_is_clean_under_production_settings():
    done = _manage("check", "--deploy", "--fail-level", "WARNING", env=PRODUCTION_ENV)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no issues" in done.stdout


def test_production_refuses_to_start_without_a_secret_key():
    env = {k: v for k, v in PRODUCTION_ENV.items() if k != "DJANGO_SECRET_KEY"}
    done = _manage("check", env=env)
    assert done.returncode != 0
    assert "DJANGO_SECRET_KEY" in done.stderr


def test_the_secret_key_can_come_from_a_file(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("Zq8-W1x_Pc4!Rv7@Ty2#Nm5$Lb9%Hk3^Gj6&Fd0*Sa1(Ew4)Qo8+Iu2\n")
    env = {k: v for k, v in PRODUCTION_ENV.items() if k != "DJANGO_SECRET_KEY"}
    env["DJANGO_SECRET_KEY_FILE"] = str(secret)
    done = _manage("check", "--deploy", "--fail-level", "WARNING", env=env)
    assert done.returncode == 0, done.stdout + done.stderr


def test_production_refuses_the_embedded_sqlite_and_filesystem_broker():
    env = {k: v for k, v in PRODUCTION_ENV.items() if k != "DATABASE_URL"}
    done = _manage("check", env=env)
    assert done.returncode != 0
    assert "DATABASE_URL" in done.stderr


def test_production_refuses_to_start_without_redis():
    """The login limiter and the scheduling-cycle lock must be shared across pods (issue 15, finding 10)."""
    env = {k: v for k, v in PRODUCTION_ENV.items() if k != "REDIS_URL"}
    done = _manage("check", env=env)
    assert done.returncode != 0
    assert "ImproperlyConfigured" in done.stderr
    assert "REDIS_URL (or REDIS_URL_FILE) must point at Redis in production" in done.stderr


def test_production_takes_redis_url_from_a_file_and_uses_it_as_the_cache(tmp_path):
    secret = tmp_path / "redis-url"
    secret.write_text("redis://127.0.0.1:6379/0\n")
    env = {k: v for k, v in PRODUCTION_ENV.items() if k != "REDIS_URL"}
    env["REDIS_URL_FILE"] = str(secret)
    done = _manage(
        "shell",
        "-c",
        "from django.conf import settings; print(settings.CACHES['default']['BACKEND'])",
        env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().endswith("RedisCache")
