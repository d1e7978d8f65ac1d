"""Settings shared by every environment. Configuration comes from the environment; unset services fall
back to the embedded servers under `.kintsugi/` (see core.embedded)."""
import os
from datetime import timedelta
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured
from urllib.parse import urlsplit, urlunsplit

import environ

from core import db_roles, embedded, logcontext, secret_registry
from core.egress import parse_allow_list
from kintsugi_site.client_ip import trusted_proxies
from kintsugi_site.settings.deadlines import *  # noqa: F403  (every deadline a request waits by)

BASE_DIR = Path(__file__).resolve().parent.parent.parent
env = environ.Env()

SECRET_KEY = env("DJANGO_SECRET_KEY", default="kintsugi-local-development-only")
DEBUG = env.bool("DJANGO_DEBUG", default=False)
ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "testserver"])

INSTALLED_APPS = [
    "kintsugi_site.admin_site.KintsugiAdminConfig",  # django.contrib.admin with the dashboard as its index
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    # Registers OpClass as an index wrapper: without it the case search's trigram indexes render invalid SQL.
    "django.contrib.postgres",
    "rest_framework",
    # Before rest_framework.authtoken: its drf_create_token, over keys stored as digests.
    "provenance.token_cli",
    "rest_framework.authtoken",
    "axes",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "pgtrigger",
    "pghistory",
    "provenance",
    "repairs",
    "compensation",
    "kintsugi_site",  # the project's own commands (mcp_serve), which drive the top layer
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # A NUL in the query string answers 400 before any view (kintsugi_site.query_nul).
    "kintsugi_site.query_nul.RefuseNulInQueryString",
    "kintsugi_site.unavailable.AnswerUnavailableStores",  # a store past its deadline: 503, not 500
    # Static files (the admin's CSS and scripts) from the app server itself, compressed and cached.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    # Pushes an idle session's expiry forward, at most once a minute (kintsugi_site.session_touch).
    "kintsugi_site.session_touch.SessionTouchMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Content-Security-Policy on every page (CONTENT_SECURITY_POLICY below).
    "csp.middleware.CSPMiddleware",
    "pghistory.middleware.HistoryMiddleware",
    # Last, as django-axes asks: it turns a locked-out login into its 429 answer.
    "axes.middleware.AxesMiddleware",
]

# Sessions expire after KINTSUGI_SESSION_IDLE_SECONDS without a request (default 8 hours): the expiry is
# pushed forward by requests (at most once a minute, kintsugi_site.session_touch), so a working day stays
# logged in and a forgotten browser does not.
SESSION_COOKIE_AGE = env.int("KINTSUGI_SESSION_IDLE_SECONDS", default=8 * 60 * 60)

# Content-Security-Policy (django-csp): scripts only from this site, or inline with the request's nonce
# (the admin pages' few inline scripts carry it); styles may be inline (the admin, Swagger UI and Redoc
# set style attributes; a style cannot run code); Redoc starts its worker from a blob: URL; <object> only
# from the site (the blast-radius picture, served with a policy of its own that allows no script at all).
from csp.constants import NONCE, NONE, SELF  # noqa: E402

CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF, NONCE],
        "style-src": [SELF, "'unsafe-inline'"],
        "img-src": [SELF, "data:"],
        "font-src": [SELF, "data:"],
        "worker-src": [SELF, "blob:"],
        "connect-src": [SELF],
        "object-src": [SELF],  # the incident page embeds its blast-radius picture (SVG, its own stricter policy)
        "base-uri": [SELF],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
    },
}

# Login throttling (django-axes): failures are counted per username AND address together, so a guessing
# attack on one account locks that account from that address only; the same person elsewhere, and other
# accounts behind the same office NAT, still log in. The cache handler keeps the counters in the shared
# Redis cache (every web process sees them, they expire by themselves, and a password spray costs no
# Postgres writes nor tables for the DB role setup to grant); the price is no AccessAttempt history in the
# admin, and the login audit lives in the web server's log instead.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_HANDLER = "axes.handlers.cache.AxesCacheHandler"
AXES_CACHE = "default"
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_FAILURE_LIMIT = env.int("KINTSUGI_LOGIN_FAILURE_LIMIT", default=10)
AXES_COOLOFF_TIME = timedelta(minutes=env.int("KINTSUGI_LOGIN_LOCKOUT_MINUTES", default=30))
AXES_RESET_ON_SUCCESS = True
# Attempts live in the cache (AXES_HANDLER), so axes's admin pages would list tables that stay empty.
AXES_ENABLE_ADMIN = False
# The client's address: REMOTE_ADDR, which the web server sets to the forwarded client only when the peer
# is one of KINTSUGI_TRUSTED_PROXIES (addresses or CIDRs, empty: trust nobody; kintsugi_site.client_ip).
AXES_CLIENT_IP_CALLABLE = "kintsugi_site.client_ip.client_ip"
KINTSUGI_TRUSTED_PROXIES = trusted_proxies(env("KINTSUGI_TRUSTED_PROXIES", default=""))

ROOT_URLCONF = "kintsugi_site.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "provenance.context_processors.model_backend",
            ],
        },
    },
]
WSGI_APPLICATION = "kintsugi_site.wsgi.application"
ASGI_APPLICATION = "kintsugi_site.asgi.application"

# Two aliases on one database (core.db_roles): `owner` (DATABASE_URL, or the embedded server's
# superuser) runs migrations; `default`, which everything else uses, logs in as the application role
# KINTSUGI_DB_APP_ROLE, which may append to the audit record but never change or cut it.
DATABASE_URL = env("DATABASE_URL", default="") or embedded.ensure_postgres()
DATABASE_OWNER_URL = env("DATABASE_OWNER_URL", default="")
DATABASES = with_database_deadlines(db_roles.databases(env=env, owner_url=DATABASE_OWNER_URL, app_url=DATABASE_URL))  # noqa: F405
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
# Filled by `manage.py collectstatic` (make demo runs it; a deployment runs it on release).
STATIC_ROOT = env("KINTSUGI_STATIC_ROOT", default=str(BASE_DIR / ".kintsugi" / "static"))
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}
# Source maps are fetched only by a browser's developer tools; compressing them (gzip and brotli of the
# API docs' multi-megabyte maps) was five sixths of collectstatic's time, on every release and demo start.
WHITENOISE_SKIP_COMPRESS_EXTENSIONS = ("jpg", "jpeg", "png", "gif", "webp", "zip", "gz", "tgz", "bz2", "tbz", "xz",
                                       "br", "swf", "flv", "woff", "woff2", "3gp", "3gpp", "asf", "avi", "m4v",
                                       "mov", "mp4", "mpeg", "mpg", "webm", "wmv", "map")

# FalkorDB: the provenance graphs and the model response cache. Resolved lazily by
# provenance.graph.graph so that importing settings never starts a graph server.
FALKORDB_URL = env("FALKORDB_URL", default="")
# The servers new workspaces are placed on (comma-separated redis:// URLs with their passwords); empty:
# every workspace on FALKORDB_URL. Each new workspace goes to the one holding the fewest (provenance.placement).
KINTSUGI_FALKORDB_URLS = env.list("KINTSUGI_FALKORDB_URLS", default=[])
KINTSUGI_GRAPH_PREFIX = env("KINTSUGI_GRAPH_PREFIX", default="ks")

# The embedded broker starts in under a second when absent; one frozen on its port is not waited for.
CELERY_BROKER_URL = env("CELERY_BROKER_URL", default="") or embedded.broker_url()


def _beside_broker(broker_url: str) -> str:
    """The broker's Redis server, the next database number: throttle counters apart from the queues."""
    parts = urlsplit(broker_url)
    db = int(parts.path.strip("/") or 0)
    return urlunsplit(parts._replace(path=f"/{(db + 1) % 16}"))


# The default cache holds what every process must share: DRF throttle counters, login lockouts, report
# download budgets. A local-memory cache would give each web process its own count.
KINTSUGI_CACHE_URL = env("KINTSUGI_CACHE_URL", default="") or _beside_broker(CELERY_BROKER_URL)
CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": KINTSUGI_CACHE_URL,
        "KEY_PREFIX": env("KINTSUGI_CACHE_PREFIX", default=KINTSUGI_GRAPH_PREFIX),
        "OPTIONS": CACHE_OPTIONS,  # noqa: F405
    }
}
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_ALWAYS_EAGER = env.bool("CELERY_TASK_ALWAYS_EAGER", default=False)
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True

# Outages heal without anyone: a repair blocked by FalkorDB or Postgres retries with exponential backoff
# (jittered, each wait at most KINTSUGI_RETRY_BACKOFF_MAX_SECONDS; the defaults cover a quarter of an
# hour), and every KINTSUGI_SWEEP_SECONDS the beat schedule runs repairs.outages.heal_outages, which
# re-enqueues blocked and orphaned repairs once FalkorDB answers and executes approved items whose task
# was lost while the broker was down.
KINTSUGI_RETRY_BACKOFF_SECONDS = env.int("KINTSUGI_RETRY_BACKOFF_SECONDS", default=5)
KINTSUGI_RETRY_BACKOFF_MAX_SECONDS = env.int("KINTSUGI_RETRY_BACKOFF_MAX_SECONDS", default=180)
KINTSUGI_RETRY_MAX = env.int("KINTSUGI_RETRY_MAX", default=12)
# After this many attempts (the task's retries and the sweep's together) an incident still stopped by an
# outage is `needs attention`: still resumed by the sweep when the store answers, but alerted on.
KINTSUGI_INCIDENT_MAX_ATTEMPTS = env.int("KINTSUGI_INCIDENT_MAX_ATTEMPTS", default=30)
KINTSUGI_SWEEP_SECONDS = env.float("KINTSUGI_SWEEP_SECONDS", default=30)
# The bearer token a Prometheus scraper off loopback sends to /metrics (unset: loopback only).
KINTSUGI_METRICS_TOKEN = env("KINTSUGI_METRICS_TOKEN", default="")
CELERY_BEAT_SCHEDULE = {
    "heal-outages": {"task": "repairs.tasks.heal_outages_task", "schedule": KINTSUGI_SWEEP_SECONDS,
                     # A sweep that waited behind an outage is stale by the next one: never let them pile up.
                     "options": {"expires": KINTSUGI_SWEEP_SECONDS}},
    # Review notices still owed (compensation.notices): their task was refused by the broker, or lost.
    "review-notices": {"task": "compensation.tasks.send_owed_notices", "schedule": KINTSUGI_SWEEP_SECONDS,
                       "options": {"expires": KINTSUGI_SWEEP_SECONDS}},
}
# Beat's record of when each entry last ran lives with the rest of the local state, not in the checkout.
CELERY_BEAT_SCHEDULE_FILENAME = env("KINTSUGI_BEAT_SCHEDULE_FILE", default=str(
    Path(os.environ.get("KINTSUGI_HOME", BASE_DIR / ".kintsugi")) / "celerybeat-schedule"))

# What a repair's own verification re-runs (docs/verification.md): "radius" re-executes only what the
# flagged source could change and checks the boundary around it; "full" replays the whole desk every
# time. The whole-desk replay is also run on demand (`manage.py verify --full`) and by the deep check:
# KINTSUGI_DEEP_CHECK_HOUR (0-23, local time) runs it nightly on every workspace's latest repair; empty: off.
KINTSUGI_VERIFY_SCOPE = env("KINTSUGI_VERIFY_SCOPE", default="radius")
if KINTSUGI_VERIFY_SCOPE not in ("radius", "full"):
    raise ImproperlyConfigured("KINTSUGI_VERIFY_SCOPE must be 'radius' or 'full'")
KINTSUGI_DEEP_CHECK_HOUR = env("KINTSUGI_DEEP_CHECK_HOUR", default="")
if KINTSUGI_DEEP_CHECK_HOUR.strip():
    from celery.schedules import crontab

    CELERY_BEAT_SCHEDULE["deep-check"] = {"task": "repairs.tasks.deep_check_task",
                                          "schedule": crontab(minute=0, hour=int(KINTSUGI_DEEP_CHECK_HOUR))}

# A repairing worker hands what does not depend on its walk to idle workers: the verification baseline
# (from the start) and the compensation drafts (once the plan is known). With a single worker the
# tasks wait in the queue and find the work done.
KINTSUGI_REPAIR_HELPERS = env.bool("KINTSUGI_REPAIR_HELPERS", default=True)
# Repairs with a radius of at least KINTSUGI_REPAIR_PARALLEL_MIN actions are split into up to
# KINTSUGI_REPAIR_PARTS independent parts that idle workers walk at the same time (repairs.job). Off by
# default: on a 2-core machine that also runs FalkorDB and Postgres it was not faster (bench workers).
KINTSUGI_REPAIR_PARTS = env.int("KINTSUGI_REPAIR_PARTS", default=1)
KINTSUGI_REPAIR_PARALLEL_MIN = env.int("KINTSUGI_REPAIR_PARALLEL_MIN", default=2000)
# Workspace graphs whose topology each process keeps in memory for blast radius questions
# (provenance.graph.mirror; about 150 MB per million actions).
KINTSUGI_MIRROR_GRAPHS = env.int("KINTSUGI_MIRROR_GRAPHS", default=4)
# A process's first radius question is answered by FalkorDB while the mirror is read in the background
# (off: the first question reads the mirror and waits for it).
KINTSUGI_MIRROR_BACKGROUND = env.bool("KINTSUGI_MIRROR_BACKGROUND", default=True)
# Extra agent modules (comma-separated import paths) registered beside the built-in support desk.
KINTSUGI_AGENT_MODULES = [m for m in env.list("KINTSUGI_AGENT_MODULES", default=[]) if m]

# Model client: "offline" (deterministic, no network) unless a Gemini key is configured.
GEMINI_API_KEY = env("GEMINI_API_KEY", default="")
GEMINI_BASE_URL = env("GEMINI_BASE_URL", default="")
GEMINI_MODEL = env("GEMINI_MODEL", default="gemini-2.5-flash")
KINTSUGI_MODEL_BACKEND = env("KINTSUGI_MODEL_BACKEND", default="gemini" if GEMINI_API_KEY else "offline")

# The audit record's signed checkpoints (core.audit.checkpoints) live outside Postgres: the log of
# signed chain heads and the Ed25519 signing key (generated on first use unless required to exist;
# its public half is written beside it as signing-key.pub.pem, for verify_report elsewhere).
_AUDIT_HOME = Path(os.environ.get("KINTSUGI_HOME", BASE_DIR / ".kintsugi")) / "audit"
KINTSUGI_AUDIT_CHECKPOINT_LOG = env("KINTSUGI_AUDIT_CHECKPOINT_LOG", default=str(_AUDIT_HOME / "checkpoints.jsonl"))
# The checkpoint log's anchor (core.audit.anchor): a second append-only file, in a directory of its own
# that the database owner cannot write (another volume, a host the database does not run on).
KINTSUGI_AUDIT_ANCHOR_LOG = env("KINTSUGI_AUDIT_ANCHOR_LOG", default=str(_AUDIT_HOME.parent / "audit-anchor" / "anchor.jsonl"))
KINTSUGI_AUDIT_SIGNING_KEY = env("KINTSUGI_AUDIT_SIGNING_KEY", default=str(_AUDIT_HOME / "signing-key.pem"))
KINTSUGI_AUDIT_SIGNING_KEY_REQUIRED = env.bool("KINTSUGI_AUDIT_SIGNING_KEY_REQUIRED", default=False)
# The key that seals agents' replay secrets in the database (core.secret_box): a Fernet key file beside
# the signing key, generated on first use, never in a backup; a restored home brings the same file.
KINTSUGI_SECRET_BOX_KEY = env("KINTSUGI_SECRET_BOX_KEY", default=str(_AUDIT_HOME / "secret-box.key"))
# How far the signed head may trail the newest committed audit row (seconds).
KINTSUGI_AUDIT_CHECKPOINT_DELAY = env.float("KINTSUGI_AUDIT_CHECKPOINT_DELAY", default=1.0)
# Refused attempts written to the audit record per actor per minute; beyond it they are counted, not written.
KINTSUGI_REFUSALS_PER_MINUTE = env.int("KINTSUGI_REFUSALS_PER_MINUTE", default=10)
# Rows still unsigned after this long make verify_audit exit 1: the signer is failing (seconds).
KINTSUGI_AUDIT_UNSIGNED_MAX_SECONDS = env.float("KINTSUGI_AUDIT_UNSIGNED_MAX_SECONDS", default=60.0)

# Four-eyes: a reviewer may not decide items of an incident they flagged.
KINTSUGI_FOUR_EYES = env.bool("KINTSUGI_FOUR_EYES", default=True)
# Seconds a decision can be taken back by its author; execution waits for them to pass (0: none). Ten
# seconds is long enough to catch a wrong click from the toast and short enough that money still moves
# at once as far as a customer can tell.
KINTSUGI_UNDO_SECONDS = env.int("KINTSUGI_UNDO_SECONDS", default=10)
# How money is written in customer messages (a babel locale) when neither the ticket nor the workspace
# names one: compensation.drafting.customers.message_locale.
KINTSUGI_MESSAGE_LOCALE = env("KINTSUGI_MESSAGE_LOCALE", default="en_US")

EMAIL_BACKEND = "provenance.mail.OutboxBackend"
DEFAULT_FROM_EMAIL = env("DEFAULT_FROM_EMAIL", default="support@kintsugi.invalid")
# Delivery of approved items (compensation.delivery.connectors). Each item kind's default connector, e.g.
# "refund_reversal=stripe,replacement_refund=stripe,correction_email=smtp"; unset kinds use the sandbox
# ledger (money) and the outbox (email). A workspace admin may choose otherwise per workspace. Secrets
# are named by options from a registry (core.secret_registry, docs/connectors.md): the built-in
# KINTSUGI_STRIPE_API_KEY, KINTSUGI_STRIPE_WEBHOOK_SECRET, KINTSUGI_WEBHOOK_SECRET, KINTSUGI_SMTP_USERNAME
# / _PASSWORD (each its variable or the file its _FILE twin names), and those KINTSUGI_SECRETS lists,
# e.g. "acme_stripe@acme=env:ACME_STRIPE_KEY,hook=file:/run/secrets/hook". Checked here: an entry naming
# one of the deployment's own settings stops the start.
KINTSUGI_CONNECTORS = env("KINTSUGI_CONNECTORS", default="")
KINTSUGI_SECRETS = env("KINTSUGI_SECRETS", default="")
secret_registry.parse(KINTSUGI_SECRETS, audit_key=KINTSUGI_AUDIT_SIGNING_KEY)
# An email provider's Django backend (e.g. "anymail.backends.postmark.EmailBackend") for the smtp
# connector instead of SMTP: the operator's choice, never a workspace's option (an option naming code
# would make the worker import it).
KINTSUGI_EMAIL_BACKEND = env("KINTSUGI_EMAIL_BACKEND", default="")
# Where people reach this deployment: the links kintsugi mails to reviewers (their inbox) start with it.
KINTSUGI_PUBLIC_URL = env("KINTSUGI_PUBLIC_URL", default="http://localhost:8000")
EMAIL_HOST = env("KINTSUGI_SMTP_HOST", default="")
EMAIL_PORT = env.int("KINTSUGI_SMTP_PORT", default=25)
EMAIL_USE_TLS = env.bool("KINTSUGI_SMTP_TLS", default=False)
KINTSUGI_STRIPE_API_BASE = env("KINTSUGI_STRIPE_API_BASE", default="")  # a local fake in tests and benches
KINTSUGI_DELIVERY_TIMEOUT_SECONDS = env.float("KINTSUGI_DELIVERY_TIMEOUT_SECONDS", default=10.0)
KINTSUGI_DELIVERY_MAX_ATTEMPTS = env.int("KINTSUGI_DELIVERY_MAX_ATTEMPTS", default=8)

# The REST API (kintsugi_site/api): token first so that anonymous callers get 401 with WWW-Authenticate;
# session auth keeps the browsable API usable from a logged-in admin session.
REST_FRAMEWORK = {
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "kintsugi_site.api.authentication.ExpiringTokenAuthentication",
        "kintsugi_site.api.authentication.BearerTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["kintsugi_site.api.permissions.RolePermission"],
    "DEFAULT_PAGINATION_CLASS": "kintsugi_site.api.pagination.Pagination",
    "PAGE_SIZE": 50,
    "EXCEPTION_HANDLER": "kintsugi_site.api.errors.exception_handler",
    # JSON bodies over DATA_UPLOAD_MAX_MEMORY_SIZE answer 413, nested too deeply 400 (kintsugi_site.api.parsers).
    "DEFAULT_PARSER_CLASSES": [
        "kintsugi_site.api.parsers.JSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    # Only the expensive endpoints are throttled (kintsugi_site.api.throttles), each by its own scope.
    "DEFAULT_THROTTLE_RATES": {
        "blast_radius": env("KINTSUGI_API_RATE_BLAST_RADIUS", default="120/min"),
        "explain": env("KINTSUGI_API_RATE_EXPLAIN", default="120/min"),
        "report": env("KINTSUGI_API_RATE_REPORT", default="30/min"),
        "flag": env("KINTSUGI_API_RATE_FLAG", default="30/min"),
        "what_if": env("KINTSUGI_API_RATE_WHAT_IF", default="30/min"),
    },
}
# Incident report downloads from the admin (JSON, CSV, PDF), per user: PDFs cost seconds of CPU each.
KINTSUGI_REPORT_DOWNLOAD_RATE = env("KINTSUGI_REPORT_DOWNLOAD_RATE", default="30/min")
from .openapi import SPECTACULAR_SETTINGS  # noqa: E402,F401 - drf-spectacular's, kept in a module of their own
# Agents in other processes (provenance.recording.remote, provenance.recording.replay): an HTTP recording idle this long
# expires with nothing written; a repair serves a replay's calls on a loopback server bound here.
KINTSUGI_RECORDING_TIMEOUT_SECONDS = env.int("KINTSUGI_RECORDING_TIMEOUT_SECONDS", default=300)
# Threads per web process serving the recording protocol (kintsugi_site.recording_entrance): each holds a
# database connection while it serves a call.
KINTSUGI_RECORDING_THREADS = env.int("KINTSUGI_RECORDING_THREADS", default=6)
KINTSUGI_REPLAY_CALLBACK_HOST = env("KINTSUGI_REPLAY_CALLBACK_HOST", default="127.0.0.1")
# The MCP endpoint (python manage.py mcp_serve): loopback by default; Host/Origin headers are checked.
KINTSUGI_MCP_HOST = env("KINTSUGI_MCP_HOST", default="127.0.0.1")
# Where the web app (admin, API and MCP at /mcp, one ASGI app: kintsugi_site.asgi) listens.
KINTSUGI_WEB_HOST = env("KINTSUGI_WEB_HOST", default="127.0.0.1")
KINTSUGI_WEB_PORT = env.int("KINTSUGI_WEB_PORT", default=8000)
KINTSUGI_WEB_WORKERS = env.int("KINTSUGI_WEB_WORKERS", default=2)
KINTSUGI_MCP_PORT = env.int("KINTSUGI_MCP_PORT", default=8765)
# Where the worker may send requests an administrator's URL points it at (core.egress): public
# addresses, plus these CIDRs. Locally (`make demo`) the demo's own agents live on loopback, so loopback
# is allowed here; production's settings allow nothing beyond public addresses unless told. The
# deployment's own services stay refused whatever this says.
KINTSUGI_EGRESS_ALLOW = parse_allow_list(env.list("KINTSUGI_EGRESS_ALLOW", default=["127.0.0.0/8", "::1/128"]))
# A remote agent whose replay endpoint does not answer is an outage: the repair blocks and retries on the
# outage schedule (KINTSUGI_RETRY_BACKOFF_*, then the sweep) until the agent has been unreachable for
# KINTSUGI_REPLAY_OUTAGE_SECONDS, or failed KINTSUGI_REPLAY_MAX_ATTEMPTS times; then it needs attention
# (alerted) and the sweep still resumes it, at most every KINTSUGI_RETRY_BACKOFF_MAX_SECONDS, once the
# agent answers.
KINTSUGI_REPLAY_OUTAGE_SECONDS = env.float("KINTSUGI_REPLAY_OUTAGE_SECONDS", default=3600)
KINTSUGI_REPLAY_MAX_ATTEMPTS = env.int("KINTSUGI_REPLAY_MAX_ATTEMPTS", default=40)
# Who issues the MCP bearer tokens (this site: they are the REST API's tokens).
KINTSUGI_MCP_ISSUER_URL = env("KINTSUGI_MCP_ISSUER_URL", default="http://127.0.0.1:8000")

# Log lines carry the incident and workspace they are about (core.logcontext); JSON objects,
# one a line, with KINTSUGI_LOG_JSON for a log pipeline.
LOGGING = logcontext.logging_config(json_lines=env.bool("KINTSUGI_LOG_JSON", default=False),
                                    level=env("KINTSUGI_LOG_LEVEL", default="WARNING"))

# Deciding before flagging (repairs.what_if, repairs.suspicious): a flag page whose radius is over
# KINTSUGI_WHAT_IF_INLINE_MAX actions computes its what-if in a Celery task behind a progress bar; the
# ranking of sources worth a look runs a what-if on at most KINTSUGI_SUSPICIOUS_WHAT_IFS of them, each
# with a radius of at most KINTSUGI_SUSPICIOUS_WHAT_IF_MAX_RADIUS actions.
KINTSUGI_WHAT_IF_INLINE_MAX = env.int("KINTSUGI_WHAT_IF_INLINE_MAX", default=2000)
KINTSUGI_SUSPICIOUS_WHAT_IFS = env.int("KINTSUGI_SUSPICIOUS_WHAT_IFS", default=3)
KINTSUGI_SUSPICIOUS_WHAT_IF_MAX_RADIUS = env.int("KINTSUGI_SUSPICIOUS_WHAT_IF_MAX_RADIUS", default=5000)
