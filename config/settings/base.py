"""Settings shared by every environment. Everything that differs comes from the environment.

Environment variables (see README): DATABASE_URL, CELERY_BROKER_URL, REDIS_URL, DJANGO_SECRET_KEY,
DJANGO_DEBUG, DJANGO_ALLOWED_HOSTS. Secrets may come from ``<NAME>_FILE`` (a path whose content is the
value). Clusters and metric sources are rows configured in the app; SUANCHI_CLUSTER_BACKEND,
KUBECONFIG and PROMETHEUS_URL only seed the default ones on the first start (see SUANCHI below).
"""

from __future__ import annotations

import os
from pathlib import Path

import environ

BASE_DIR = Path(__file__).resolve().parent.parent.parent
VAR_DIR = Path(os.environ.get("SUANCHI_VAR_DIR", BASE_DIR / "var"))

env = environ.Env()


def env_secret(name: str, default: str | None = None) -> str | None:
    """Read ``NAME`` or the content of the file named by ``NAME_FILE``."""
    file_path = os.environ.get(f"{name}_FILE")
    if file_path:
        return Path(file_path).read_text().strip()
    return os.environ.get(name, default)


DEBUG = env.bool("DJANGO_DEBUG", default=False)
SECRET_KEY = env_secret("DJANGO_SECRET_KEY") or ""
ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env.list("DJANGO_CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "apps.core",
    "apps.accounts",
    "apps.catalog",
    "apps.inventory",
    "apps.jobs",
    "apps.benchlib",
    "apps.clusters",
    "apps.scheduling",
    "apps.quotas",
    "apps.telemetry",
    "apps.billing",
    "apps.rollout",
    "apps.migration",
    "apps.notify",
    "apps.demo",
]

# The modules that register texts stored in the database (``stored(...)``: apps.core.stored_text). A
# process imports them all at its first ``localize()``, so a web page shows a text a worker module wrote
# in the reader's language even when the web process never imported that module. A new module that
# calls ``stored(`` belongs here: tests/core/test_stored_text.py checks the list is complete.
STORED_TEXT_MODULES = [
    "apps.benchlib.services",
    "apps.billing.services.close",
    "apps.catalog.selectors",
    "apps.catalog.services.builtin_templates",
    "apps.clusters.pusher",
    "apps.clusters.sync.apply",
    "apps.core.runs",
    "apps.inventory.apps",
    "apps.inventory.compat",
    "apps.inventory.services.discovery.common",
    "apps.inventory.services.health",
    "apps.inventory.services.labels",
    "apps.inventory.services.ledger.common",
    "apps.jobs.apps",
    "apps.jobs.services",
    "apps.migration.gates",
    "apps.migration.models",
    "apps.migration.services",
    "apps.notify.alerts",
    "apps.notify.services",
    "apps.quotas.admission",
    "apps.quotas.services",
    "apps.rollout.admin",
    "apps.rollout.autoscale",
    "apps.rollout.selectors",
    "apps.rollout.services.texts",
    "apps.scheduling.allocations",
    "apps.scheduling.board.figures",
    "apps.scheduling.engine_texts",
    "apps.scheduling.faults",
    "apps.scheduling.lifecycle",
    "apps.scheduling.persist",
    "apps.scheduling.proposals",
    "apps.scheduling.reclaim",
    "apps.scheduling.reconcile",
    "apps.scheduling.releasing",
    "apps.scheduling.scaling",
    "apps.scheduling.service_nodes",
    "apps.scheduling.services",
    "apps.telemetry.apps",
    "apps.telemetry.health_events",
    "apps.telemetry.readback",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "apps.core.middleware.ContentSecurityPolicyMiddleware",
    "apps.core.middleware.TraceNotAllowedMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    # Compresses the pages and API answers (static files come compressed from WhiteNoise, above, and
    # never reach it). Django's middleware pads each compressed body at random against BREACH
    # (a random file name in the gzip header: django/middleware/gzip.py max_random_bytes,
    # django/utils/text.py compress_string).
    "django.middleware.gzip.GZipMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "apps.accounts.middleware.UserPreferenceMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

# Content-Security-Policy (W3C CSP Level 3, https://www.w3.org/TR/CSP3/), sent by
# apps.core.middleware.ContentSecurityPolicyMiddleware. No inline scripts or styles: page scripts are
# static files and chart data rides in <script type="application/json"> blocks (not executed).
SUANCHI_CONTENT_SECURITY_POLICY = {
    "default-src": ["'self'"],
    "script-src": ["'self'"],
    # plotly.js (v3 lib/dom.js addStyleRule) appends one EMPTY <style> and fills it through the CSSOM
    # (insertRule, which CSP does not govern): the hash of the empty string admits exactly that element
    # and no inline style with any content (CSP3 §2.3.1 hash-source).
    # The bundle also inlines MapLibre's stylesheet at load (a constant <style>, plotly.js 3.7.0); its
    # hash admits that one text. A plotly upgrade changes it: tests/browser/test_pages.py then fails.
    "style-src": [
        "'self'",
        "'sha256-47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU='",
        "'sha256-V2sIX92Uh6ZaGSFTKMHghsB85b9toJtmazgG09AI2uk='",
    ],
    "img-src": ["'self'", "data:"],
    "font-src": ["'self'"],
    "connect-src": ["'self'"],
    "object-src": ["'none'"],
    "base-uri": ["'self'"],
    "form-action": ["'self'"],
    "frame-ancestors": ["'none'"],
}

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"
ASGI_APPLICATION = "config.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.template.context_processors.i18n",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]


def _sqlite_default() -> str:
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{VAR_DIR / 'suanchi.sqlite3'}"


# URLs carry passwords: each may come from NAME or from the file NAME_FILE names (a mounted secret).
DATABASES = {"default": environ.Env.db_url_config(env_secret("DATABASE_URL") or _sqlite_default())}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # web, worker and beat share one file in the demo: WAL + busy timeout + immediate transactions.
    DATABASES["default"]["OPTIONS"] = {
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        "transaction_mode": "IMMEDIATE",
        "timeout": 30,
    }
else:
    DATABASES["default"].setdefault("CONN_MAX_AGE", env.int("DATABASE_CONN_MAX_AGE", default=60))
    DATABASES["default"].setdefault("CONN_HEALTH_CHECKS", True)

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "inventory:fleet"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en"
LANGUAGES = [("en", "English"), ("zh-hans", "简体中文")]
LOCALE_PATHS = [BASE_DIR / "locale"]
# Platform time zone: bills, lending windows and every displayed time use it.
TIME_ZONE = env.str("SUANCHI_TIME_ZONE", default="Asia/Shanghai")
USE_I18N = True
USE_TZ = True
# One date format on every page, the admin's too: "2026-12-01 16:38" (config/formats/<lang>/formats.py).
FORMAT_MODULE_PATH = ["config.formats"]

STATIC_URL = "static/"
STATIC_ROOT = Path(os.environ.get("DJANGO_STATIC_ROOT", BASE_DIR / "staticfiles"))
STATIC_ROOT.mkdir(parents=True, exist_ok=True)
STATICFILES_DIRS = [BASE_DIR / "static"]
# The charts draw only scatter and bar traces (apps/*/charts.py), so the pages load plotly.js's "basic"
# bundle (scatter, bar, pie; 1.1 MB) instead of the full one (4.6 MB). It is the npm package
# plotly.js-basic-dist-min 3.7.0 (MIT, static/vendor/plotly/LICENSE), the plotly.js version the installed
# plotly package renders figures for (plotly 6.9.0 ships plotly.js 3.7.0). Bundles:
# https://github.com/plotly/plotly.js/blob/master/dist/README.md#partial-bundles
SUANCHI_PLOTLY_JS = "vendor/plotly/plotly-basic.min.js"
# collectstatic writes content-hashed names plus gzip copies; WhiteNoise serves a hashed name with
# "Cache-Control: max-age=315360000, public, immutable" and the compressed copy to clients that accept it
# (https://whitenoise.readthedocs.io/en/stable/django.html#add-compression-and-caching-support).
# Under DEBUG (runserver) Django's manifest storage serves the plain names from the finders.
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}

REDIS_URL = env_secret("REDIS_URL") or ""
if REDIS_URL:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            # Passed to redis-py's connection pool: an unreachable Redis fails within seconds (and the
            # login limiter falls back, apps/core/throttling.py) instead of hanging a web worker.
            "OPTIONS": {"socket_connect_timeout": 2, "socket_timeout": 2},
        }
    }
else:
    # Without Redis (the embedded demo) a file cache under var/ is shared by web, worker and beat:
    # login throttling, the scheduling-cycle lock and long-task progress work across processes.
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.filebased.FileBasedCache",
            "LOCATION": str(VAR_DIR / "cache"),
        }
    }

# The largest request body read into memory. It sits above every documented limit, so each of them
# answers with its own precise error instead of this one: node reports (SUANCHI_NODE_REPORT_MAX_BYTES,
# 4 MiB) and exporter pages (8 Mi characters, apps/telemetry/exposition.py), JSON-escaped (a quote or
# a backslash doubles). Beyond it an API call gets a JSON 413 naming the limit (apps/core/api/exceptions.py).
# https://docs.djangoproject.com/en/5.2/ref/settings/#data-upload-max-memory-size
DATA_UPLOAD_MAX_MEMORY_SIZE = 16 * 1024 * 1024

REST_FRAMEWORK = {
    # Agent keys ("sca_…") first, then user tokens, then the web UI's session. The first class also
    # answers 401s with WWW-Authenticate: Token (both token classes do).
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "apps.inventory.authentication.AgentTokenAuthentication",
        "apps.accounts.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["apps.core.api.permissions.IsUser"],
    # DRF's JSON parser refusing nesting deeper than 64 levels (apps/core/api/parsers.py).
    "DEFAULT_PARSER_CLASSES": [
        "apps.core.api.parsers.DepthLimitedJSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "DEFAULT_FILTER_BACKENDS": [
        "django_filters.rest_framework.DjangoFilterBackend",
        "rest_framework.filters.OrderingFilter",
        "rest_framework.filters.SearchFilter",
    ],
    "DEFAULT_PAGINATION_CLASS": "apps.core.api.pagination.StandardPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "apps.core.api.exceptions.exception_handler",
    "DEFAULT_THROTTLE_RATES": {"token": "30/minute", "login": "10/minute"},
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
    # "?format=csv" names an export format on our export endpoints, not a DRF renderer.
    "URL_FORMAT_OVERRIDE": None,
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Suanchi API",
    "DESCRIPTION": "One compute pool over a mixed fleet of GPUs and NPUs.",
    "VERSION": "0.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.IsAuthenticated"],
    # Swagger UI assets come from drf-spectacular-sidecar (served locally, no CDN).
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "ENUM_NAME_OVERRIDES": {
        "DeviceEventKindEnum": "apps.inventory.models.DeviceEvent.Kind",
        "NodeReportKindEnum": "apps.inventory.models.NodeReport.Kind",
        "DeviceLinkKindEnum": "apps.inventory.models.DeviceLink.Kind",
        "NodeStatusEnum": "apps.inventory.models.Node.Status",
        "DeviceHealthEnum": "apps.inventory.models.Device.Health",
        "DevicePoolStatusEnum": "apps.inventory.models.Device.PoolStatus",
        "DeviceKindEnum": "apps.catalog.models.DeviceKind",
        "IsolationEnum": "apps.catalog.models.Isolation",
        "JobKindEnum": "apps.jobs.models.Job.Kind",
        "MetricSourceKindEnum": "apps.telemetry.models.MetricSource.Kind",
        "JobEventKindEnum": "apps.jobs.models.JobEvent.Kind",
        "JobStateEnum": "apps.jobs.models.JobState",
        "BillStateEnum": "apps.billing.models.Bill.State",
        "BillingPeriodStateEnum": "apps.billing.models.BillingPeriod.State",
        "RateCardScopeEnum": "apps.billing.models.RateCard.Scope",
        "UsageBasisEnum": "apps.billing.models.UsageBasis",
        "BasisEnum": "apps.catalog.models.ComputeCoefficient.Basis",
        "IdlePolicyEnum": "apps.billing.models.IdlePolicy",
        "GrayBatchKindEnum": "apps.rollout.models.BatchKind",
        "GrayBatchStageEnum": "apps.rollout.models.GrayBatch.Stage",
        "ScaleDecisionActionEnum": "apps.rollout.models.ScaleDecision.Action",
        "GateKindEnum": "apps.migration.models.Gate.Kind",
        "MigratedServiceKindEnum": "apps.migration.models.MigratedService.Kind",
        "MigrationActionKindEnum": "apps.migration.models.MigrationAction.Kind",
        "VendorEnum": "apps.catalog.models.Vendor",
    },
}

# Celery: embedded default is kombu's filesystem transport under var/ (no server needed).
CELERY_BROKER_URL = env_secret("CELERY_BROKER_URL") or "filesystem://localhost//"
if CELERY_BROKER_URL.startswith("filesystem://"):
    _broker_dir = VAR_DIR / "broker"
    for _sub in ("queue", "processed"):
        (_broker_dir / _sub).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir / "queue"),
        "data_folder_out": str(_broker_dir / "queue"),
        "processed_folder": str(_broker_dir / "processed"),
        "control_folder": str(_broker_dir / "control"),  # exchange tables (default: ./control)
        "store_processed": False,
        "polling_interval": 0.2,  # seconds between folder scans (default 1: a push a second)
    }
    # filesystem:// resolves to worker/broker.py (whole message files, claims kept until ack). No
    # broadcast traffic on it: remote control (pidbox) and events are off; Celery itself leaves mingle
    # and gossip off on this transport (celery/worker/consumer/mingle.py, gossip.py
    # compatible_transports), and serve starts the worker --without-heartbeat.
    CELERY_WORKER_ENABLE_REMOTE_CONTROL = False
    CELERY_WORKER_SEND_TASK_EVENTS = False
    CELERY_TASK_SEND_SENT_EVENT = False
else:
    CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 3600}
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TIMEZONE = TIME_ZONE
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")
CELERY_WORKER_PREFETCH_MULTIPLIER = 1

# Notifications by e-mail go through Django's mail backend (SMTP by default; the demo prints them).
EMAIL_BACKEND = env.str("DJANGO_EMAIL_BACKEND", default="django.core.mail.backends.smtp.EmailBackend")
EMAIL_HOST = env.str("DJANGO_EMAIL_HOST", default="localhost")
EMAIL_PORT = env.int("DJANGO_EMAIL_PORT", default=25)
DEFAULT_FROM_EMAIL = env.str("DJANGO_DEFAULT_FROM_EMAIL", default="suanchi@localhost")

SUANCHI = {
    # Requests to addresses users enter (webhooks, chat robots) reach public addresses only, plus these
    # networks (comma-separated CIDRs; apps/core/outbound.py). The demo and the tests allow loopback:
    # their receivers run on 127.0.0.1. The old SUANCHI_NOTIFY_ALLOW_LOOPBACK_WEBHOOKS=true still
    # allows loopback (only: no longer link-local).
    "OUTBOUND_ALLOWED_NETWORKS": env.list("SUANCHI_OUTBOUND_ALLOWED_NETWORKS", default=[])
    + (
        ["127.0.0.0/8", "::1/128"]
        if env.bool("SUANCHI_NOTIFY_ALLOW_LOOPBACK_WEBHOOKS", default=False)
        else []
    ),
    "NODE_REPORT_MAX_BYTES": env.int("SUANCHI_NODE_REPORT_MAX_BYTES", default=4 * 1024 * 1024),
    # A node whose agent has not reported for this long gets a "reports overdue" event.
    "NODE_REPORT_STALE_MINUTES": env.int("SUANCHI_NODE_REPORT_STALE_MINUTES", default=30),
    # The scheduling engine's node-scoring policy (see apps/scheduling/engine/policies.py).
    "SCHEDULER_POLICY": env.str("SUANCHI_SCHEDULER_POLICY", default=""),
    # Billing (apps/billing): month boundaries and hourly slices in this zone; prices in this currency.
    "BILLING_TIME_ZONE": env.str("SUANCHI_BILLING_TIME_ZONE", default=TIME_ZONE),
    "BILLING_CURRENCY": env.str("SUANCHI_BILLING_CURRENCY", default="CNY"),
    # Idle cost: "none" (not charged), "spread" (over projects by use) or "platform".
    "BILLING_IDLE_POLICY": env.str("SUANCHI_BILLING_IDLE_POLICY", default="none"),
    # "allocated", or "max" = max(allocated, measured) where telemetry has measured the allocation.
    "BILLING_USAGE_BASIS": env.str("SUANCHI_BILLING_USAGE_BASIS", default="allocated"),
    "BILLING_METERING_LOOKBACK_HOURS": env.int("SUANCHI_BILLING_METERING_LOOKBACK_HOURS", default=72),
    # Fair share: past usage counts half as much after this many hours (Slurm's default is 7 days).
    "FAIR_SHARE_HALF_LIFE_HOURS": env.float("SUANCHI_FAIR_SHARE_HALF_LIFE_HOURS", default=168.0),
    # Simulated clusters run this many simulated seconds per wall-clock second (the demo speeds up).
    "SIMULATED_TIME_SCALE": env.float("SUANCHI_SIMULATED_TIME_SCALE", default=1.0),
    # Reverse proxies in front of the web server that append to X-Forwarded-For (0: trust none and
    # rate-limit logins by the connecting address).
    "TRUSTED_PROXIES": env.int("SUANCHI_TRUSTED_PROXIES", default=0),
    # Telemetry: retention of 5-minute and hourly rollups, tolerated clock skew, first look-back of
    # a new source, and policy thresholds (not vendor specs): temperature event, idle card.
    "TELEMETRY_ROLLUP_RETENTION_DAYS": env.int("SUANCHI_TELEMETRY_ROLLUP_RETENTION_DAYS", default=14),
    "TELEMETRY_HOURLY_RETENTION_DAYS": env.int("SUANCHI_TELEMETRY_HOURLY_RETENTION_DAYS", default=400),
    "TELEMETRY_MAX_CLOCK_SKEW_S": env.int("SUANCHI_TELEMETRY_MAX_CLOCK_SKEW_S", default=300),
    "TELEMETRY_FIRST_LOOKBACK_MINUTES": env.int("SUANCHI_TELEMETRY_FIRST_LOOKBACK_MINUTES", default=15),
    "TELEMETRY_TEMP_LIMIT_C": env.float("SUANCHI_TELEMETRY_TEMP_LIMIT_C", default=90.0),
    "TELEMETRY_IDLE_UTIL_PCT": env.float("SUANCHI_TELEMETRY_IDLE_UTIL_PCT", default=5.0),
    # First start (apps.clusters / apps.telemetry post_migrate): with no cluster yet, create the
    # default one with this backend ("" = none; "simulated" | "kubernetes"), kubeconfig ($KUBECONFIG;
    # empty = in-cluster service account) and metric source ($PROMETHEUS_URL).
    "CLUSTER_BACKEND": env.str("SUANCHI_CLUSTER_BACKEND", default=""),
    "KUBECONFIG": env.str("KUBECONFIG", default=""),
    "PROMETHEUS_URL": env.str("PROMETHEUS_URL", default=""),
    # Uploaded kubeconfigs are written here (mode 0600) and referenced by path from the Cluster row.
    "SECRETS_DIR": env.str("SUANCHI_SECRETS_DIR", default=str(VAR_DIR / "secrets")),
}
# Kubeconfig exec credential plugins (EKS, GKE, ACK, CCE) the server may run, by exact ``command``
# (comma-separated names or paths). Empty (the default): no kubeconfig can run a program
# (apps/clusters/kubeconfig_safety.py; SECURITY.md).
SUANCHI_KUBECONFIG_EXEC_COMMANDS = env.list("SUANCHI_KUBECONFIG_EXEC_COMMANDS", default=[])

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env.str("DJANGO_LOG_LEVEL", default="INFO")},
}
