# syntax=docker/dockerfile:1
# Suanchi image: web (gunicorn, the default command), worker and beat (celery, see platform/kubernetes/)
# and the node agent (platform/agent/suanchi-agent, copied to /usr/local/bin) all run from this one image.
#
#   docker build -t suanchi:0.1.0 .
#
# Base image pinned by tag AND digest (the multi-arch index of python:3.11.13-slim-bookworm). Refresh both
# together: `docker buildx imagetools inspect python:3.11-slim-bookworm` prints the current digest.
# Both stages use the same base. pyproject.toml requires Python >=3.11,<3.12; tests/deploy/ checks they agree.

# ---- build: a virtual environment with the project installed exactly as `pip install .` does ----------
FROM python:3.11.13-slim-bookworm@sha256:86adf8dbadc3d6e82ee5dd2c74bec2e1c2467cdad47886280501df722372d2e1 AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src
# pyproject.toml declares the dependencies (every one is a binary wheel: no compiler in this stage);
# README.md is its `readme`. The application code is not a wheel package (packages = []): it is copied
# into /app in the runtime stage and imported from there.
COPY pyproject.toml README.md ./
RUN pip install --no-cache-dir .

# ---- runtime: the venv, the application tree, static files collected at build time, a non-root user ----
FROM python:3.11.13-slim-bookworm@sha256:86adf8dbadc3d6e82ee5dd2c74bec2e1c2467cdad47886280501df722372d2e1 AS runtime
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    DJANGO_SETTINGS_MODULE=config.settings.production \
    SUANCHI_VAR_DIR=/var/lib/suanchi
# The PDF bill embeds a CJK font (apps/billing/exports.py looks for Debian's fonts-wqy-microhei).
RUN apt-get update \
    && apt-get install --yes --no-install-recommends fonts-wqy-microhei=0.2.0-beta-3.1 \
    && rm -rf /var/lib/apt/lists/*
RUN groupadd --system --gid 10001 suanchi \
    && useradd --system --no-log-init --uid 10001 --gid suanchi --home-dir /app --shell /usr/sbin/nologin suanchi \
    && install -d -o suanchi -g suanchi -m 0750 /var/lib/suanchi
COPY --from=build /opt/venv /opt/venv
WORKDIR /app
COPY manage.py pyproject.toml ./
COPY config ./config
COPY apps ./apps
COPY worker ./worker
COPY templates ./templates
COPY static ./static
COPY locale ./locale
COPY platform/agent/suanchi-agent /usr/local/bin/suanchi-agent
# collectstatic under the production settings the container runs with. Those settings refuse to load
# without a secret key, PostgreSQL and Redis URLs; collectstatic opens no connection, so build-only
# placeholders (scoped to this RUN, not kept in the image's environment) satisfy them.
RUN DJANGO_SECRET_KEY=build-only-placeholder-never-used-at-runtime-0123456789abcdef \
    DATABASE_URL=postgres://build@127.0.0.1:5432/build \
    CELERY_BROKER_URL=redis://127.0.0.1:6379/0 \
    REDIS_URL=redis://127.0.0.1:6379/1 \
    python manage.py collectstatic --noinput
USER 10001:10001
EXPOSE 8000
# /healthz runs SELECT 1. Production settings reject a Host outside DJANGO_ALLOWED_HOSTS (400) and redirect
# plain HTTP to HTTPS (301), so the probe sends the first allowed host and says it came through the TLS
# proxy (SECURE_PROXY_SSL_HEADER), exactly as the Kubernetes probes in platform/kubernetes/ do.
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request as r; h = os.environ.get('DJANGO_ALLOWED_HOSTS', 'localhost').split(',')[0].strip().lstrip('.').replace('*', 'localhost') or 'localhost'; r.urlopen(r.Request('http://127.0.0.1:8000/healthz', headers={'Host': h, 'X-Forwarded-Proto': 'https'}), timeout=4)"]
CMD ["gunicorn", "config.wsgi:application", "--bind", "0.0.0.0:8000", "--workers", "2", "--threads", "4", "--access-logfile", "-"]
