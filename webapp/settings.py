"""The one settings module. Every value that differs between machines comes from the
environment (see docs/reference/configuration.md); defaults give the embedded setup of ``make run``:
SQLite and Celery's filesystem broker under ``SHARDYARD_DATA`` (``SHARDYARD_HOME``), no Redis or Postgres needed.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import dj_database_url

from shardcore.config import ConfigError, env_bool, env_int, env_list, env_paths, env_roots, env_str
from webapp.ops.netguard import parse_networks
from webapp.ops.oidc_map import parse_role_map

BASE_DIR = Path(__file__).resolve().parent.parent

DEBUG = env_bool("DEBUG", False)
_DATA = env_str("SHARDYARD_DATA", str(BASE_DIR / "data")).strip()
# Where artifacts are written: a local directory (a Path), or an s3:// prefix (a string) on
# any S3-compatible store, credentials and endpoint from the usual AWS variables.
DATA_ROOT: Path | str
if "://" in _DATA and not _DATA.startswith("file://"):
    if not _DATA.lower().startswith("s3://") or not _DATA[5:].strip("/"):
        raise ConfigError(f"SHARDYARD_DATA: {_DATA!r}: give a directory or s3://bucket/prefix")
    DATA_ROOT = "s3://" + _DATA[5:].strip("/")
    _HOME_DEFAULT = BASE_DIR / "data"
else:
    DATA_ROOT = Path(_DATA.removeprefix("file://")).expanduser().resolve()
    _HOME_DEFAULT = DATA_ROOT
# What must stay on a local file system whatever the data root: the SQLite file, the
# filesystem broker, static files and the default source and tokenizer roots.
HOME_ROOT = Path(env_str("SHARDYARD_HOME", str(_HOME_DEFAULT))).expanduser().resolve()
# Sources may only be registered from below these roots: local directories (Paths) and
# s3://bucket/prefix locations (strings). No s3:// root unless configured: the service's
# credentials may read buckets that editors must not register.
SOURCE_ROOTS = env_roots("SHARDYARD_SOURCE_ROOTS", [HOME_ROOT / "sources"])
# hf:<path> tokenizers may only be loaded from below these directories.
TOKENIZER_ROOTS = env_paths("SHARDYARD_TOKENIZER_ROOTS", [HOME_ROOT / "tokenizers"])
# Planning a job from user input (reading sidecars through a filter, loading a tokenizer)
# runs in a child process with these limits, never in the web process itself.
PLAN_SECONDS = env_int("SHARDYARD_PLAN_SECONDS", 20, minimum=1)
PLAN_MEMORY_MB = env_int("SHARDYARD_PLAN_MEMORY_MB", 2048, minimum=64)
# User work over at most this many documents (planning a pool, evaluating a flag's filter)
# is done in the request; beyond it, by a worker (the request records what to do).
PLAN_INLINE_DOCUMENTS = env_int("SHARDYARD_PLAN_INLINE_DOCUMENTS", 1_000_000, minimum=0)

_secret = env_str("SECRET_KEY")
if _secret is None:
    if not DEBUG:
        raise ConfigError("SECRET_KEY must be set unless DEBUG=1")
    _secret = "insecure-debug-key-do-not-use-in-production"
# Example values from our own docs and compose file, and Django's: never a production key.
PLACEHOLDER_SECRET_KEYS = {
    "change-me",
    "changeme",
    "change-me-in-production",
    "secret",
    "secret-key",
    "your-secret-key",
    "insecure-debug-key-do-not-use-in-production",
}
if not DEBUG and (
    _secret.strip().lower() in PLACEHOLDER_SECRET_KEYS or _secret.startswith("django-insecure")
):
    raise ConfigError(
        f"SECRET_KEY={_secret!r} is a placeholder from an example; set a long random value "
        "(python -c 'import secrets; print(secrets.token_urlsafe(50))') or DEBUG=1"
    )
# Django signs sessions, CSRF tokens and password-reset links with it: a short or repetitive
# key can be guessed. The test suite's processes (SHARDYARD_TESTING, set by its pytest
# plugin, tests/support/testing.py) use a short throwaway key.
SECRET_KEY_MIN_LENGTH, SECRET_KEY_MIN_DISTINCT = 32, 10
if (
    not DEBUG
    and not env_bool("SHARDYARD_TESTING", False)
    and (len(_secret) < SECRET_KEY_MIN_LENGTH or len(set(_secret)) < SECRET_KEY_MIN_DISTINCT)
):
    raise ConfigError(
        f"SECRET_KEY is too weak ({len(_secret)} characters, {len(set(_secret))} distinct): "
        f"with DEBUG=0 it needs at least {SECRET_KEY_MIN_LENGTH} characters and "
        f"{SECRET_KEY_MIN_DISTINCT} distinct ones; set a long random value "
        "(python -c 'import secrets; print(secrets.token_urlsafe(50))')"
    )
SECRET_KEY = _secret

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

# --- Hardening switches (docs/reference/configuration.md): off by default for the plain-HTTP
# embedded setup, on behind TLS in production.
_SECURE_COOKIES = env_bool("SHARDYARD_SECURE_COOKIES", False)
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = _SECURE_COOKIES
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = CSRF_COOKIE_SAMESITE = "Lax"
SECURE_HSTS_SECONDS = env_int("SHARDYARD_HSTS_SECONDS", 0, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = False
if env_bool("SHARDYARD_BEHIND_TLS_PROXY", False):
    # The proxy terminates TLS and says so; only then is a request "secure" (HSTS, cookies).
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_SSL_REDIRECT = env_bool("SHARDYARD_SSL_REDIRECT", False)
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
# Every script and style the pages use is served from here (plotly.js too, no CDN).
DEFAULT_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data: blob:; font-src 'self' data:; connect-src 'self'; "
    "object-src 'none'; base-uri 'self'; frame-ancestors 'none'; form-action 'self'"
)
# SHARDYARD_CSP: empty or 0 = no header, 1 = the policy above, anything else = that policy.
_CSP = (env_str("SHARDYARD_CSP", "") or "").strip()
if _CSP.lower() in ("", "0", "off", "false", "no"):
    CSP_POLICY = ""
elif _CSP.lower() in ("1", "on", "true", "yes"):
    CSP_POLICY = DEFAULT_CSP
else:
    CSP_POLICY = _CSP
# Failed logins within the window before a 429: per user name from one client address,
# and per client address over all user names (never per user name from everywhere: that
# would let anyone lock a named user out).
LOGIN_ATTEMPTS = env_int("SHARDYARD_LOGIN_ATTEMPTS", 5, minimum=1)
# One address may try four user names as often as one name; the window is a quarter hour.
LOGIN_ADDRESS_ATTEMPTS = 4 * LOGIN_ATTEMPTS
LOGIN_WINDOW = 900
AUTHENTICATION_BACKENDS = ["webapp.dashboard.throttle.ThrottledModelBackend"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "webapp.ops",
    "webapp.jobs",
    "webapp.catalog",
    "webapp.dashboard",
    "webapp.api",
]

MIDDLEWARE = [
    "webapp.ops.metrics.RequestLatencyMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "webapp.security.ContentSecurityPolicyMiddleware",
    # Unmatched addresses under /api/ (an id above 2^63) answer JSON, not an HTML page.
    "webapp.api.middleware.ApiNotFoundMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # Every page needs a login; public views opt out with @login_not_required.
    "django.contrib.auth.middleware.LoginRequiredMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "webapp.dashboard.middleware.NotFoundMiddleware",
    "webapp.dashboard.middleware.ArtifactScopeMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # What a request's reads found missing (a fact never measured) is asked for after it.
    "webapp.catalog.middleware.FactRequestsMiddleware",
]

ROOT_URLCONF = "webapp.urls"
WSGI_APPLICATION = "webapp.wsgi.application"

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
                "webapp.dashboard.context_processors.corruption",
                "webapp.ops.oidc.sso",
            ],
        },
    },
]


def _database() -> dict[str, Any]:
    url = env_str("DATABASE_URL", f"sqlite:///{HOME_ROOT / 'shardyard.sqlite3'}")
    scheme = urlparse(url).scheme
    if scheme not in {"sqlite", "postgres", "postgresql", "pgsql"}:
        raise ConfigError(
            f"DATABASE_URL scheme {scheme!r} is not supported (use postgresql:// or sqlite://)"
        )
    db = dj_database_url.parse(url, conn_max_age=env_int("DATABASE_CONN_MAX_AGE", 0, minimum=0))
    if db["ENGINE"].endswith("sqlite3"):
        Path(db["NAME"]).parent.mkdir(parents=True, exist_ok=True)
        # A file, not memory, for the test database too: worker subprocesses must see it.
        db["TEST"] = {"NAME": str(Path(db["NAME"]).with_suffix(".test.sqlite3"))}
        # Every transaction takes the write lock when it begins (IMMEDIATE): a transaction
        # that read first and writes later would otherwise fail at once with "database is
        # locked" while a worker writes, instead of waiting its turn. WAL lets pages read
        # while a worker writes.
        db.setdefault("OPTIONS", {}).update(
            timeout=30,
            transaction_mode="IMMEDIATE",
            init_command="PRAGMA journal_mode=WAL;",
        )
    return dict(db)


DATABASES = {"default": _database()}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = HOME_ROOT / "staticfiles"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # whitenoise warns on every request otherwise
# plotly.js comes from the installed plotly package, served as static/plotly/plotly.min.js:
# pages work offline and the JS always matches the Python figure format.
_PLOTLY_SPEC = importlib.util.find_spec("plotly")
if _PLOTLY_SPEC is None or _PLOTLY_SPEC.origin is None:
    raise ConfigError("the plotly package is not installed (pip install -r requirements.lock)")
_PLOTLY_JS_DIR = Path(_PLOTLY_SPEC.origin).parent / "package_data"
STATICFILES_DIRS = [BASE_DIR / "webapp" / "static", ("plotly", _PLOTLY_JS_DIR)]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
# Serve from the finders in development and tests; collectstatic is for production.
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG

# --- Celery -----------------------------------------------------------------------------
BROKER_DIR = HOME_ROOT / "broker"
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", "filesystem://")
if CELERY_BROKER_URL.startswith("filesystem://"):
    CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, Any] = {  # kombu reads str and bool values
        "data_folder_in": str(BROKER_DIR / "out"),
        "data_folder_out": str(BROKER_DIR / "out"),
        "processed_folder": str(BROKER_DIR / "processed"),
        "store_processed": False,
        # kombu's exchange tables (``<exchange>.exchange``); its default is ./control.
        "control_folder": str(BROKER_DIR / "control"),
    }
elif not CELERY_BROKER_URL.startswith(("redis://", "rediss://")):
    raise ConfigError(f"CELERY_BROKER_URL={CELERY_BROKER_URL!r}: use redis:// or filesystem://")
# Job state lives in the database, not in a Celery result backend.
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SOFT_TIME_LIMIT = env_int("SHARDYARD_TASK_SOFT_LIMIT", 6 * 3600, minimum=1)
CELERY_TASK_TIME_LIMIT = CELERY_TASK_SOFT_TIME_LIMIT + 300
# A running unit renews its claim (a heartbeat from a thread beside the work) every
# SHARDYARD_UNIT_HEARTBEAT seconds; one whose heartbeat is older than SHARDYARD_UNIT_LEASE
# lost its worker (SIGKILL, OOM, lost host) and every worker's sweeper (every
# SHARDYARD_SWEEP_INTERVAL seconds, 0 = off) queues it again. So a dead worker's units run
# again within lease + sweep interval (90 s by default), with no operator.
SHARDYARD_UNIT_HEARTBEAT = env_int("SHARDYARD_UNIT_HEARTBEAT", 15, minimum=1)
SHARDYARD_UNIT_LEASE = env_int("SHARDYARD_UNIT_LEASE", 60, minimum=1)
if SHARDYARD_UNIT_LEASE <= SHARDYARD_UNIT_HEARTBEAT:
    raise ConfigError(
        f"SHARDYARD_UNIT_LEASE={SHARDYARD_UNIT_LEASE} must be longer than "
        f"SHARDYARD_UNIT_HEARTBEAT={SHARDYARD_UNIT_HEARTBEAT} (a few heartbeats)"
    )
SHARDYARD_SWEEP_INTERVAL = env_int("SHARDYARD_SWEEP_INTERVAL", 30, minimum=0)
# A phase's units are queued and sent this many at a time: its first batch by the phase's
# start, the others by the dispatcher's steps (webapp.jobs.dispatch), so no task sends a
# whole phase and the broker holds at most about 1.5 batches of a job's units.
SHARDYARD_DISPATCH_BATCH = env_int("SHARDYARD_DISPATCH_BATCH", 1000, minimum=2)
# Every worker writes its own row (name, host, queue, last seen) this often: the overview's
# live list of workers. Three missed beats mark a worker as gone.
SHARDYARD_WORKER_BEAT = env_int("SHARDYARD_WORKER_BEAT", 10, minimum=1)
# Database errors (OperationalError: a dropped or terminated connection) while a worker
# records a result are retried this many times, reconnecting, with backoff.
SHARDYARD_DB_RETRIES = env_int("SHARDYARD_DB_RETRIES", 5, minimum=0)
# The scrub re-verifies every built artifact against its checksums when the newest scrub
# is older than this (seconds; 0 = never on its own). Started by the workers' sweepers.
SHARDYARD_SCRUB_INTERVAL = env_int("SHARDYARD_SCRUB_INTERVAL", 7 * 86400, minimum=0)
# The sweepers queue a storage measurement (webapp.ops.storage) when the newest is older
# than this many seconds; 0: only when asked (the Storage page, the API, manage.py).
SHARDYARD_STORAGE_INTERVAL = env_int("SHARDYARD_STORAGE_INTERVAL", 3600, minimum=0)
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", False)
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True

# --- API --------------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "webapp.api.exceptions.exception_handler",
    # JSON bodies nested deeper than webapp.api.parsers.MAX_DEPTH are a 400, not a 500.
    "DEFAULT_PARSER_CLASSES": [
        "webapp.api.parsers.JSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Shardyard API",
    "DESCRIPTION": "Sources, pools, mixtures, jobs, training runs and lineage.",
    "VERSION": "0.1.0",
    # The schema lists every operation and field: for signed-in users and tokens only.
    "SERVE_PERMISSIONS": ["rest_framework.permissions.IsAuthenticated"],
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    # boto's notes on where it found the credentials and the endpoint, once per process:
    # not worth a line beside every command's answer (LOG_LEVEL=DEBUG shows them).
    "loggers": {
        name: {"level": "DEBUG" if env_str("LOG_LEVEL", "INFO") == "DEBUG" else "WARNING"}
        for name in ("botocore.credentials", "botocore.configprovider")
    },
}

# --- Operations (webapp.ops): probes, metrics ---------------------------------------------
# /readyz gives the database and the broker this long (seconds) to answer.
SHARDYARD_READY_TIMEOUT = 3
# A bearer token that may read /metrics (a Prometheus server has no user); API tokens and
# signed-in sessions may read it too. Empty: no bearer is accepted.
SHARDYARD_METRICS_TOKEN = env_str("SHARDYARD_METRICS_TOKEN", "") or ""
# Webhooks (webapp.ops.webhooks): every worker's webhook thread looks for new events and due
# deliveries this often (seconds; 0 = this worker sends none), gives a receiver this long to
# answer, and tries a delivery this many times, waiting BACKOFF seconds, doubling.
SHARDYARD_WEBHOOK_POLL = env_int("SHARDYARD_WEBHOOK_POLL", 5, minimum=0)
SHARDYARD_WEBHOOK_TIMEOUT = env_int("SHARDYARD_WEBHOOK_TIMEOUT", 5, minimum=1)
SHARDYARD_WEBHOOK_ATTEMPTS = env_int("SHARDYARD_WEBHOOK_ATTEMPTS", 6, minimum=1)
SHARDYARD_WEBHOOK_BACKOFF = env_int("SHARDYARD_WEBHOOK_BACKOFF", 30, minimum=1)
# Endpoints each worker sends to side by side (one thread each): a slow receiver holds
# only its own thread.
SHARDYARD_WEBHOOK_SENDERS = 4
# Webhooks reach public addresses only (webapp.ops.netguard); these CIDR networks
# (comma-separated, e.g. "10.20.0.0/16,fd00::/8") are let through too, for internal receivers.
try:
    SHARDYARD_WEBHOOK_ALLOW_NETWORKS = parse_networks(
        env_str("SHARDYARD_WEBHOOK_ALLOW_NETWORKS", "") or ""
    )
except ValueError as _exc:
    raise ConfigError(str(_exc)) from None

# --- Single sign-on (OpenID Connect, webapp.ops.oidc): on when a client id is given ----------
SHARDYARD_OIDC_ENABLED = bool(env_str("SHARDYARD_OIDC_CLIENT_ID", ""))
if SHARDYARD_OIDC_ENABLED:
    OIDC_RP_CLIENT_ID = env_str("SHARDYARD_OIDC_CLIENT_ID")
    OIDC_RP_CLIENT_SECRET = env_str("SHARDYARD_OIDC_CLIENT_SECRET", "")
    # The provider's endpoints, as its /.well-known/openid-configuration lists them.
    OIDC_OP_AUTHORIZATION_ENDPOINT = env_str("SHARDYARD_OIDC_AUTHORIZATION_ENDPOINT", "")
    OIDC_OP_TOKEN_ENDPOINT = env_str("SHARDYARD_OIDC_TOKEN_ENDPOINT", "")
    OIDC_OP_USER_ENDPOINT = env_str("SHARDYARD_OIDC_USER_ENDPOINT", "")
    OIDC_OP_JWKS_ENDPOINT = env_str("SHARDYARD_OIDC_JWKS_ENDPOINT", "")
    for _name in ("AUTHORIZATION", "TOKEN", "USER", "JWKS"):
        if not globals()[f"OIDC_OP_{_name}_ENDPOINT"]:
            raise ConfigError(
                f"SHARDYARD_OIDC_{_name}_ENDPOINT must be set with SHARDYARD_OIDC_CLIENT_ID "
                "(see the provider's /.well-known/openid-configuration)"
            )
    OIDC_RP_SIGN_ALGO = env_str("SHARDYARD_OIDC_SIGN_ALGO", "RS256")
    OIDC_RP_SCOPES = env_str("SHARDYARD_OIDC_SCOPES", "openid email profile groups")
    AUTHENTICATION_BACKENDS = [*AUTHENTICATION_BACKENDS, "webapp.ops.oidc.RoleMappingBackend"]
SHARDYARD_OIDC_GROUPS_CLAIM = env_str("SHARDYARD_OIDC_GROUPS_CLAIM", "groups")
# The provider's issuer (its ID tokens' "iss"); a token from another issuer is refused.
SHARDYARD_OIDC_ISSUER = env_str("SHARDYARD_OIDC_ISSUER", "") or ""
# Seconds each call to the provider (token, user info, keys) may take before the sign-in
# fails with that reason: a provider that hangs never holds a web thread longer.
OIDC_TIMEOUT = env_int("SHARDYARD_OIDC_TIMEOUT", 10, minimum=1)
# Link a provider's user to the one local account with its e-mail address when the provider
# marks the address verified; off by default (then only an admin links existing accounts).
SHARDYARD_OIDC_LINK_VERIFIED_EMAIL = env_bool("SHARDYARD_OIDC_LINK_VERIFIED_EMAIL", False)
try:
    SHARDYARD_OIDC_ROLE_MAP = parse_role_map(env_str("SHARDYARD_OIDC_ROLE_MAP", "") or "")
except ValueError as _exc:
    raise ConfigError(str(_exc)) from None
OIDC_CREATE_USER = True
# mozilla-django-oidc redirects to this as written (no URL name lookup): a path.
LOGIN_REDIRECT_URL_FAILURE = "/accounts/login/"

# One queue name per deployment; tests use their own so that they never meet a running stack.
CELERY_TASK_DEFAULT_QUEUE = env_str("SHARDYARD_QUEUE", "shardyard")
