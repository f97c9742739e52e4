"""Settings for the AI Factory Portal.

Everything comes from environment variables with safe defaults for the embedded run
(SQLite, eager Celery tasks, demo accounts, dry-run Kubernetes backend). Set
PORTAL_MODE=production for a deployment: then SECRET_KEY, ALLOWED_HOSTS and DATABASE_URL
are required and the secure-cookie/HSTS settings are on.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from billing.stranded_thresholds import parse_pool_thresholds
from fleet.vocabulary import DEFAULT_GPU_CONDITIONS

from .env import env_bool, env_int, env_list, env_str

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("PORTAL_VAR_DIR", str(BASE_DIR / "var")))

PORTAL_MODE = env_str("PORTAL_MODE", "embedded")
if PORTAL_MODE not in {"embedded", "production"}:
    raise ImproperlyConfigured(f"PORTAL_MODE={PORTAL_MODE!r}: use 'embedded' or 'production'")
PRODUCTION = PORTAL_MODE == "production"


def _embedded_secret_key() -> str:
    """A dev secret generated once per checkout, so sessions survive a restart."""
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    path = VAR_DIR / "dev-secret-key"
    if not path.exists():
        # Written aside and linked into place: processes starting together (web, worker,
        # test workers) all read the one that won, never a half-written file.
        aside = path.with_name(f".{path.name}.{os.getpid()}")
        aside.write_text(secrets.token_urlsafe(50))
        try:
            os.link(aside, path)
        except FileExistsError:
            pass
        finally:
            aside.unlink()
    return path.read_text().strip()


SECRET_KEY = env_str("SECRET_KEY") or ("" if PRODUCTION else _embedded_secret_key())
if PRODUCTION and len(SECRET_KEY) < 50:
    raise ImproperlyConfigured("SECRET_KEY must be set to 50+ random characters in production")

# Off by default in every mode, so people see the portal's own error pages; DEBUG=true
# is for a developer who wants Django's debug pages.
DEBUG = env_bool("DEBUG", False)
if PRODUCTION and DEBUG:
    # Debug pages show settings and tracebacks to anyone: never in production.
    raise ImproperlyConfigured("DEBUG must be off in production (unset DEBUG)")
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", [] if PRODUCTION else ["127.0.0.1", "localhost"])
if PRODUCTION and not ALLOWED_HOSTS:
    raise ImproperlyConfigured("ALLOWED_HOSTS must be set in production")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "allauth",
    "allauth.account",
    "allauth.socialaccount",
    "allauth.socialaccount.providers.openid_connect",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Redoc from the portal's own static files, not a CDN
    "django_htmx",
    "template_partials",
    "tenants",
    "fleet",
    "intake",
    "billing",
    "portal",
]

MIDDLEWARE = [
    "portal.probes.ProbeMiddleware",  # kubelet probes come by pod IP and plain HTTP
    "django.middleware.security.SecurityMiddleware",
    "portal.security.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "tenants.auth.CachedAuthenticationMiddleware",  # Django's, the user from the cache
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "allauth.account.middleware.AccountMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "tenants.per_request.PerRequestMemoMiddleware",  # reads a page repeats, made once
]

ROOT_URLCONF = "portal.urls"
WSGI_APPLICATION = "portal.wsgi.application"

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
                "tenants.context_processors.portal_roles",
                "portal.context_processors.layout",
            ],
        },
    },
]

# --- Database: SQLite file by default, PostgreSQL (psycopg 3) through DATABASE_URL.
DATABASE_URL = env_str("DATABASE_URL")
if PRODUCTION and not DATABASE_URL:
    raise ImproperlyConfigured("DATABASE_URL must point at PostgreSQL in production")
if DATABASE_URL:
    DATABASES = {"default": dj_database_url.parse(
        DATABASE_URL, conn_max_age=env_int("DB_CONN_MAX_AGE", 60, minimum=0),
        conn_health_checks=True)}
    if DATABASES["default"]["ENGINE"].endswith("postgresql"):
        # A database that stops answering must cost a request seconds, not hang every
        # worker: connecting gives up after DB_CONNECT_TIMEOUT s, and the server cancels any
        # statement running longer than DB_STATEMENT_TIMEOUT_MS (0: no limit).
        DB_STATEMENT_TIMEOUT_MS = env_int("DB_STATEMENT_TIMEOUT_MS", 30000, minimum=0)
        DATABASES["default"].setdefault("OPTIONS", {}).update({
            "connect_timeout": env_int("DB_CONNECT_TIMEOUT", 5, minimum=1),
            "options": f"-c statement_timeout={DB_STATEMENT_TIMEOUT_MS}",
        })
        # Opt-in: a statement sent this many times on a connection is prepared there, so
        # the server plans it once (a page's joins can take PostgreSQL longer to plan than
        # to run: 2 ms against 0.3 for the requests API's page). Off by default, as in
        # Django: parameters bound on the server are limited to 65,535 a statement (a bulk
        # write or an IN list past that fails), and a pooler in transaction mode before
        # PgBouncer 1.21 cannot keep prepared statements.
        DB_PREPARE_THRESHOLD = env_int("DB_PREPARE_THRESHOLD", 0, minimum=0)
        if DB_PREPARE_THRESHOLD:
            DATABASES["default"]["OPTIONS"].update(server_side_binding=True,
                                                   prepare_threshold=DB_PREPARE_THRESHOLD)
else:
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    DATABASES = {"default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": VAR_DIR / "portal.sqlite3",
        "OPTIONS": {"transaction_mode": "IMMEDIATE", "timeout": 20},
    }}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
AUTHENTICATION_BACKENDS = [
    "django.contrib.auth.backends.ModelBackend",
    "allauth.account.auth_backends.AuthenticationBackend",
]
LOGIN_URL = "account_login"
LOGIN_REDIRECT_URL = "home"
ACCOUNT_LOGOUT_REDIRECT_URL = "home"

# --- allauth: local demo accounts only in the embedded run; Keycloak SSO when configured.
ACCOUNT_LOGIN_METHODS = {"username"}
ACCOUNT_SIGNUP_FIELDS = ["username*", "password1*", "password2*"]
ACCOUNT_EMAIL_VERIFICATION = "none"
ACCOUNT_ADAPTER = "tenants.auth.PortalAccountAdapter"
SOCIALACCOUNT_ADAPTER = "tenants.auth.PortalSocialAccountAdapter"
ACCOUNT_LOGOUT_ON_GET = False
KEYCLOAK_SERVER_URL = env_str("KEYCLOAK_SERVER_URL")  # the realm URL
KEYCLOAK_CLIENT_ID = env_str("KEYCLOAK_CLIENT_ID", "aifactory-portal")
KEYCLOAK_CLIENT_SECRET = env_str("KEYCLOAK_CLIENT_SECRET")
KEYCLOAK_PROVIDER_ID = "keycloak"  # allauth's provider id: one provider, one issuer
PORTAL_LOCAL_LOGIN = env_bool("PORTAL_LOCAL_LOGIN", not KEYCLOAK_SERVER_URL and not PRODUCTION)
SOCIALACCOUNT_PROVIDERS = {
    "openid_connect": {
        "APPS": ([{
            "provider_id": KEYCLOAK_PROVIDER_ID,
            "name": "Keycloak",
            "client_id": KEYCLOAK_CLIENT_ID,
            "secret": KEYCLOAK_CLIENT_SECRET,
            "settings": {"server_url": KEYCLOAK_SERVER_URL},
        }] if KEYCLOAK_SERVER_URL else []),
    },
}
# Claim names and group paths are settings, not constants (DESIGN.md).
PORTAL_GROUPS_CLAIM = env_str("PORTAL_GROUPS_CLAIM", "groups")
PORTAL_ROLES_CLAIM = env_str("PORTAL_ROLES_CLAIM", "roles")
PORTAL_LEAD_GROUP_PATTERN = env_str("PORTAL_LEAD_GROUP_PATTERN", "/tenants/{slug}/leads")
PORTAL_MEMBER_GROUP_PATTERN = env_str("PORTAL_MEMBER_GROUP_PATTERN", "/tenants/{slug}/members")
PORTAL_ADMIN_ROLE = env_str("PORTAL_ADMIN_ROLE", "platform-admin")
PORTAL_FINANCE_ROLE = env_str("PORTAL_FINANCE_ROLE", "finance")
# A Keycloak group of a tenant the portal does not know is ignored unless this is on.
PORTAL_CREATE_TENANTS_FROM_GROUPS = env_bool("PORTAL_CREATE_TENANTS_FROM_GROUPS", False)
PORTAL_API_AUDIENCE = env_str("PORTAL_API_AUDIENCE", KEYCLOAK_CLIENT_ID)
PORTAL_JWT_LEEWAY_SECONDS = env_int("PORTAL_JWT_LEEWAY_SECONDS", 10, minimum=0)
# End the Keycloak session too when signing out of the portal.
PORTAL_KEYCLOAK_LOGOUT = env_bool("PORTAL_KEYCLOAK_LOGOUT", True)
SOCIALACCOUNT_EMAIL_AUTHENTICATION = False
SOCIALACCOUNT_AUTO_SIGNUP = True
SOCIALACCOUNT_LOGIN_ON_GET = False

# --- REST API
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "tenants.api_auth.KeycloakJWTAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "portal.api.exception_handler",
    "DEFAULT_PAGINATION_CLASS": "portal.drf.BoundedLimitOffsetPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_PARSER_CLASSES": ["portal.drf.SafeJSONParser",
                               "rest_framework.parsers.FormParser",
                               "rest_framework.parsers.MultiPartParser"],
}
SPECTACULAR_SETTINGS = {
    "TITLE": "AI Factory Portal API",
    "DESCRIPTION": "GPU capacity requests, review and allocations for a multi-tenant platform.",
    "VERSION": "0.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "ENUM_NAME_OVERRIDES": {"RouteEnum": "fleet.domain.Route"},
    "REDOC_DIST": "SIDECAR",
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "POSTPROCESSING_HOOKS": ["drf_spectacular.hooks.postprocess_schema_enums",
                             "portal.api.document_refusals"],
}

# --- Cache: Redis (CACHE_URL), shared by every process; the embedded run (one process)
# keeps it in memory. Sessions, the signed-in user and each user's roles are read from it
# first — a query less each on every page — only where every process sees the same cache: a
# sign-out or a revoked role must reach all of them at once. Give it its own Redis (with a
# password or ACL): it holds sessions and pickled users, so writing to it is signing in.
_broker = env_str("CELERY_BROKER_URL")
CACHE_URL = env_str("CACHE_URL")
# A key prefix derived from SECRET_KEY: rotating the key retires every cached session and
# user at once, as it would signed ones.
_cache_prefix = "portal-" + hashlib.sha256(SECRET_KEY.encode()).hexdigest()[:12]
if CACHE_URL:
    CACHES = {"default": {"BACKEND": "portal.cache.PortalRedisCache", "LOCATION": CACHE_URL,
                          "KEY_PREFIX": _cache_prefix, "TIMEOUT": 300}}
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache",
                          "KEY_PREFIX": _cache_prefix, "TIMEOUT": 300,
                          "OPTIONS": {"MAX_ENTRIES": 20000}}}
# In memory it is shared only by the embedded run's single process (no broker: no workers).
SHARED_CACHE = bool(CACHE_URL) or not (PRODUCTION or _broker)
SESSION_ENGINE = ("django.contrib.sessions.backends.cached_db" if SHARED_CACHE
                  else "django.contrib.sessions.backends.db")
# How long the signed-in user and their roles may be served from the cache (0: not at all;
# always 0 without a shared cache). Every change to them retires the entries at once
# (tenants.identity_cache); this bounds what nothing else would.
PORTAL_USER_CACHE_SECONDS = env_int("PORTAL_USER_CACHE_SECONDS", 300, minimum=0) \
    if SHARED_CACHE else 0
PORTAL_ROLES_CACHE_SECONDS = env_int("PORTAL_ROLES_CACHE_SECONDS", 60, minimum=0) \
    if SHARED_CACHE else 0
# How long a page's read kept across requests (tenants.kept_reads: the pools' facts, request
# counts, the fleet page, the figures of /metrics and finance) may be served at most (0:
# never kept; always 0 without a shared cache). Every write through the portal retires what
# it touches at once; this bounds only what the portal cannot see: the database changed by
# hand.
PORTAL_KEPT_READS_SECONDS = env_int("PORTAL_KEPT_READS_SECONDS", 300, minimum=0) \
    if SHARED_CACHE else 0

# --- Celery: eager in the embedded run, Redis when CELERY_BROKER_URL is set.
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL")
if PRODUCTION and not CELERY_BROKER_URL:
    raise ImproperlyConfigured("CELERY_BROKER_URL must point at Redis in production")
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", not CELERY_BROKER_URL)
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_BROKER_URL = CELERY_BROKER_URL or "memory://"
CELERY_RESULT_BACKEND = None
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# A provisioning task that handed back its wait for the guards resumes from a queue of its
# own, which every worker consumes beside the default one (Kombu takes from non-empty queues
# in turn): a finished guard then waits behind at most one new allocation, not behind every
# approval queued before it (measured in tests/k8s/test_provisioning_benchmark.py).
CELERY_TASK_DEFAULT_QUEUE = "celery"
PROVISIONING_RESUME_QUEUE = "provisioning-resumes"
CELERY_TASK_QUEUES = {CELERY_TASK_DEFAULT_QUEUE: {}, PROVISIONING_RESUME_QUEUE: {}}
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BEAT_SCHEDULE = {
    "worker-heartbeat": {"task": "portal.tasks.record_worker_heartbeat", "schedule": 60.0},
}

# The sweep sends what its own task could not (a broker outage, retries used up): every
# PORTAL_NOTIFICATION_SWEEP_SECONDS, rows older than PORTAL_NOTIFICATION_SWEEP_AGE_SECONDS
# (older than a task's own first retries, so the sweep does not race them).
PORTAL_NOTIFICATION_SWEEP_SECONDS = env_int("PORTAL_NOTIFICATION_SWEEP_SECONDS", 60, minimum=5)
PORTAL_NOTIFICATION_SWEEP_AGE_SECONDS = env_int("PORTAL_NOTIFICATION_SWEEP_AGE_SECONDS", 60,
                                                minimum=5)
# An e-mail not delivered within this long is dropped (the page's history keeps the event): a
# week-old "ready" or "expires soon" tells nobody anything true.
PORTAL_NOTIFICATION_MAX_DELAY_SECONDS = env_int("PORTAL_NOTIFICATION_MAX_DELAY_SECONDS",
                                                7 * 24 * 3600, minimum=60)
# With a worker, one person's e-mails of this many seconds go as one message (0 or 1: each
# alone). Kept below the sweep's age, or the sweep would send a batch's rows one by one.
PORTAL_NOTIFICATION_BATCH_SECONDS = env_int("PORTAL_NOTIFICATION_BATCH_SECONDS", 5, minimum=0)
if PORTAL_NOTIFICATION_BATCH_SECONDS >= PORTAL_NOTIFICATION_SWEEP_AGE_SECONDS:
    raise ImproperlyConfigured(
        f"PORTAL_NOTIFICATION_BATCH_SECONDS={PORTAL_NOTIFICATION_BATCH_SECONDS} must be below "
        f"PORTAL_NOTIFICATION_SWEEP_AGE_SECONDS={PORTAL_NOTIFICATION_SWEEP_AGE_SECONDS}")
# A delivery that finds its row locked by another looks again after this long.
PORTAL_NOTIFICATION_BUSY_RETRY_SECONDS = env_int("PORTAL_NOTIFICATION_BUSY_RETRY_SECONDS", 3,
                                                 minimum=1)
CELERY_BEAT_SCHEDULE["resend-notifications"] = {
    "task": "tenants.tasks.resend_unsent", "schedule": float(PORTAL_NOTIFICATION_SWEEP_SECONDS),
    "options": {"expires": float(PORTAL_NOTIFICATION_SWEEP_SECONDS)}}

# API writes sent with an Idempotency-Key answer a retry with the first answer for this long.
PORTAL_IDEMPOTENCY_HOURS = env_int("PORTAL_IDEMPOTENCY_HOURS", 24, minimum=1)
CELERY_BEAT_SCHEDULE["forget-idempotency-keys"] = {
    "task": "tenants.tasks.forget_idempotency_keys", "schedule": 3600.0}

# --- E-mail notifications: printed to the console in the embedded run; SMTP when
# EMAIL_HOST is set. Links in e-mails start with PORTAL_BASE_URL.
EMAIL_HOST = env_str("EMAIL_HOST")
EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.smtp.EmailBackend"
                        if EMAIL_HOST else "django.core.mail.backends.console.EmailBackend")
EMAIL_PORT = env_int("EMAIL_PORT", 25, minimum=1)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER")
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
EMAIL_USE_SSL = env_bool("EMAIL_USE_SSL", False)
EMAIL_TIMEOUT = env_int("EMAIL_TIMEOUT", 10, minimum=1)
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "AI Factory Portal <portal@localhost>")
SERVER_EMAIL = DEFAULT_FROM_EMAIL
PORTAL_BASE_URL = env_str("PORTAL_BASE_URL", "http://127.0.0.1:8000")

# --- Kubernetes: a dry-run backend by default that records what it would apply.
PORTAL_KUBE_BACKEND = env_str("PORTAL_KUBE_BACKEND", "dry-run")
if PORTAL_KUBE_BACKEND not in {"dry-run", "kubeconfig", "in-cluster"}:
    raise ImproperlyConfigured("PORTAL_KUBE_BACKEND must be dry-run, kubeconfig or in-cluster")
PORTAL_KUBECONFIG = env_str("PORTAL_KUBECONFIG")
PORTAL_FIELD_MANAGER = env_str("PORTAL_FIELD_MANAGER", "aifactory-portal")
# Node conditions (written by Node Problem Detector from DCGM) that make a GPU node unhealthy.
PORTAL_GPU_CONDITION_TYPES = env_list(
    "PORTAL_GPU_CONDITION_TYPES", list(DEFAULT_GPU_CONDITIONS))
PORTAL_FLEET_SYNC_SECONDS = env_int("PORTAL_FLEET_SYNC_SECONDS", 120, minimum=10)
CELERY_BEAT_SCHEDULE["fleet-sync"] = {"task": "fleet.tasks.sync_fleet",
                                      "schedule": float(PORTAL_FLEET_SYNC_SECONDS)}
# How often each registered cluster is asked whether it answers (versions, MultiKueue).
PORTAL_CLUSTER_CHECK_SECONDS = env_int("PORTAL_CLUSTER_CHECK_SECONDS", 60, minimum=10)
CELERY_BEAT_SCHEDULE["check-clusters"] = {"task": "fleet.tasks.check_clusters",
                                          "schedule": float(PORTAL_CLUSTER_CHECK_SECONDS)}
# How tenants reach the cluster (shown on active allocations; no secrets): the API server
# URL and CA, the OIDC client kubectl signs in with, and the example workload's image.
PORTAL_CLUSTER_API_URL = env_str("PORTAL_CLUSTER_API_URL")
PORTAL_CLUSTER_CA_FILE = env_str("PORTAL_CLUSTER_CA_FILE")
PORTAL_KUBECTL_CLIENT_ID = env_str("PORTAL_KUBECTL_CLIENT_ID", "kubectl")
PORTAL_EXAMPLE_IMAGE = env_str("PORTAL_EXAMPLE_IMAGE",
                               "nvcr.io/nvidia/cuda:12.6.3-base-ubuntu24.04")
# Money is shown in this ISO 4217 currency (rate cards and charges carry no other).
# A TrueType font for statement PDFs; empty: DejaVu Sans where the system has it, else the
# PDF core font (Latin-1 only; other characters print as "?").
PORTAL_PDF_FONT = env_str("PORTAL_PDF_FONT", "")
PORTAL_CURRENCY = env_str("PORTAL_CURRENCY", "EUR").upper()
if not re.fullmatch(r"[A-Z]{3}", PORTAL_CURRENCY):
    raise ImproperlyConfigured("PORTAL_CURRENCY must be an ISO 4217 code such as EUR or USD")
# The provider named in FOCUS exports (ProviderName, PublisherName, InvoiceIssuerName).
PORTAL_PROVIDER_NAME = env_str("PORTAL_PROVIDER_NAME", "AI Factory")
# Queue truth: how often Kueue's Workloads and queues are read back (a bounded list), and
# the longest gap between two reads that is still integrated into queue-hours for billing.
# How far back a queue's admission rate is measured for the drain estimate of a start.
PORTAL_ESTIMATE_DRAIN_WINDOW_SECONDS = env_int("PORTAL_ESTIMATE_DRAIN_WINDOW_SECONDS", 3600,
                                               minimum=60)
PORTAL_QUEUE_SYNC_SECONDS = env_int("PORTAL_QUEUE_SYNC_SECONDS", 15, minimum=2)
PORTAL_QUEUE_MAX_GAP_SECONDS = env_int("PORTAL_QUEUE_MAX_GAP_SECONDS", 300, minimum=10)
# `manage.py watch_queues` lists everything again this often (the watch's safety net).
PORTAL_QUEUE_RESYNC_SECONDS = env_int("PORTAL_QUEUE_RESYNC_SECONDS", 600, minimum=10)
CELERY_BEAT_SCHEDULE["queue-sync"] = {"task": "fleet.tasks.sync_queues",
                                      "schedule": float(PORTAL_QUEUE_SYNC_SECONDS),
                                      "options": {"expires": float(PORTAL_QUEUE_SYNC_SECONDS)}}
# Provisioning
PORTAL_NAMESPACE = env_str("PORTAL_NAMESPACE", "aifactory-portal")  # the portal's own
PORTAL_K8S_GROUP_PREFIX = env_str("PORTAL_K8S_GROUP_PREFIX", "oidc:")  # API server's prefix
PORTAL_CONFIDENTIAL_RUNTIME_CLASS = env_str("PORTAL_CONFIDENTIAL_RUNTIME_CLASS",
                                            "kata-qemu-nvidia-gpu-snp")
# The platform's own namespaces (CNI, kube-proxy, device plugins, DCGM exporter): exempt
# from the dedicated-block guards, so their tolerate-everything DaemonSets keep running on
# every node. Only namespaces no tenant can write to belong here.
PORTAL_PLATFORM_NAMESPACES = env_list(
    "PORTAL_PLATFORM_NAMESPACES", ["kube-system", "kube-node-lease", "kube-public"])
PORTAL_EXPIRY_NOTICE_DAYS = env_int("PORTAL_EXPIRY_NOTICE_DAYS", 7, minimum=0)
PORTAL_PROVISION_MAX_RETRIES = env_int("PORTAL_PROVISION_MAX_RETRIES", 8, minimum=0)
PORTAL_PROVISION_RETRY_SECONDS = env_int("PORTAL_PROVISION_RETRY_SECONDS", 5, minimum=1)
# How long provisioning waits for an allocation's admission guards to be in force (the API
# server compiles new policies about once a second) before it retries.
PORTAL_GUARD_WAIT_SECONDS = env_int("PORTAL_GUARD_WAIT_SECONDS", 20, minimum=1)
# Provisioning without a sign of progress for this long is queued again (lost task).
# (A killed worker's message comes back only after the broker's visibility timeout, an
# hour on Redis: this check is what finishes its work in about a minute.)
PORTAL_PROVISION_STALL_SECONDS = env_int("PORTAL_PROVISION_STALL_SECONDS", 60, minimum=10)
if PORTAL_GUARD_WAIT_SECONDS >= PORTAL_PROVISION_STALL_SECONDS:
    # A wait shows no progress: as long as the stall check, it would queue a second task.
    raise ImproperlyConfigured("PORTAL_GUARD_WAIT_SECONDS must be shorter than "
                               "PORTAL_PROVISION_STALL_SECONDS")
PORTAL_PROVISION_STALL_CHECK_SECONDS = env_int("PORTAL_PROVISION_STALL_CHECK_SECONDS", 15,
                                               minimum=5)
CELERY_BEAT_SCHEDULE["requeue-stalled"] = {
    "task": "fleet.tasks.requeue_stalled",
    "schedule": float(PORTAL_PROVISION_STALL_CHECK_SECONDS),
    "options": {"expires": float(PORTAL_PROVISION_STALL_CHECK_SECONDS)}}
CELERY_BEAT_SCHEDULE["expire-allocations"] = {"task": "fleet.tasks.expire_allocations",
                                              "schedule": 300.0}
# GitOps mode: approval commits the allocation's objects to a Git repository (one directory
# per tenant and allocation) instead of applying them; Argo CD or Flux applies them and the
# portal reads progress back from the cluster.
PORTAL_PROVISIONING = env_str("PORTAL_PROVISIONING", "apply")
if PORTAL_PROVISIONING not in {"apply", "gitops"}:
    raise ImproperlyConfigured("PORTAL_PROVISIONING must be apply or gitops")
PORTAL_GITOPS_REPO = env_str("PORTAL_GITOPS_REPO")
if PORTAL_PROVISIONING == "gitops" and not PORTAL_GITOPS_REPO:
    raise ImproperlyConfigured("PORTAL_PROVISIONING=gitops needs PORTAL_GITOPS_REPO (a Git URL)")
PORTAL_GITOPS_BRANCH = env_str("PORTAL_GITOPS_BRANCH", "main")
PORTAL_GITOPS_PATH = env_str("PORTAL_GITOPS_PATH", "tenants").strip("/")
PORTAL_GITOPS_WORKDIR = Path(env_str("PORTAL_GITOPS_WORKDIR", str(VAR_DIR / "gitops")))
PORTAL_GITOPS_AUTHOR = env_str("PORTAL_GITOPS_AUTHOR", "AI Factory Portal <portal@localhost>")
# Credentials for the repository, as files mounted from a Secret (fleet/allocations/gitops.py).
PORTAL_GITOPS_SSH_KEY_FILE = env_str("PORTAL_GITOPS_SSH_KEY_FILE")
PORTAL_GITOPS_KNOWN_HOSTS_FILE = env_str("PORTAL_GITOPS_KNOWN_HOSTS_FILE")
PORTAL_GITOPS_TOKEN_FILE = env_str("PORTAL_GITOPS_TOKEN_FILE")
PORTAL_GITOPS_USERNAME = env_str("PORTAL_GITOPS_USERNAME", "git")
# The Argo CD Application or Flux Kustomization that applies PORTAL_GITOPS_PATH, read to say
# why a committed allocation is not live yet: argocd:<namespace>/<name> or flux:<ns>/<name>.
PORTAL_GITOPS_STATUS_OBJECT = env_str("PORTAL_GITOPS_STATUS_OBJECT")
try:
    from fleet.allocations.gitops_status import parse_ref as _parse_gitops_ref

    _parse_gitops_ref(PORTAL_GITOPS_STATUS_OBJECT)
except ValueError as _exc:
    raise ImproperlyConfigured(str(_exc)) from None
CELERY_BEAT_SCHEDULE["follow-gitops"] = {"task": "fleet.tasks.follow_gitops",
                                         "schedule": 15.0}
CELERY_BEAT_SCHEDULE["reconcile-allocations"] = {
    "task": "fleet.tasks.reconcile_allocations",
    "schedule": float(env_int("PORTAL_RECONCILE_SECONDS", 600, minimum=30))}

# --- Tracing: one OpenTelemetry trace per allocation (filed → … → first workload running),
# sent over OTLP/HTTP to this collector (e.g. http://jaeger:4318); empty: none are sent.
PORTAL_OTLP_ENDPOINT = env_str("PORTAL_OTLP_ENDPOINT")
PORTAL_OTEL_SERVICE_NAME = env_str("PORTAL_OTEL_SERVICE_NAME", "aifactory-portal")
# Where people open a trace, with {trace_id} in it (e.g. http://jaeger:16686/trace/{trace_id}).
PORTAL_TRACE_URL = env_str("PORTAL_TRACE_URL")
if PORTAL_TRACE_URL and "{trace_id}" not in PORTAL_TRACE_URL:
    raise ImproperlyConfigured("PORTAL_TRACE_URL must contain {trace_id}")
CELERY_BEAT_SCHEDULE["export-allocation-traces"] = {
    "task": "intake.tasks.export_allocation_traces",
    "schedule": float(env_int("PORTAL_TRACE_EXPORT_SECONDS", 30, minimum=5)),
    "options": {"expires": 30.0}}
# The request tally's delta rows folded into one per tenant and status this often.
CELERY_BEAT_SCHEDULE["compact-request-tally"] = {
    "task": "intake.tasks.compact_request_tally",
    "schedule": float(env_int("PORTAL_TALLY_COMPACT_SECONDS", 60, minimum=10)),
    "options": {"expires": 60.0}}

# --- Billing
PROMETHEUS_URL = env_str("PROMETHEUS_URL", "http://127.0.0.1:9090")
# The label naming the cluster a DCGM series came from, when one Prometheus holds several
# clusters' series (an external label, or federation's): use is then measured per cluster.
# Blank: the series are not told apart by cluster (one cluster, or one Prometheus each).
PORTAL_PROMETHEUS_CLUSTER_LABEL = env_str("PORTAL_PROMETHEUS_CLUSTER_LABEL", "")
# Per-profile device weights, e.g. "1g.10gb=0.125,3g.40gb=0.4"; default compute slices / 7.
PORTAL_MIG_WEIGHTS = {
    k.strip(): v.strip() for k, v in (item.split("=", 1) for item in env_list(
        "PORTAL_MIG_WEIGHTS", []) if "=" in item)}
PORTAL_METRICS_TOKEN = env_str("PORTAL_METRICS_TOKEN")
# Used device-seconds from somewhere other than Prometheus: a dotted path to a function like
# billing.prometheus.used_device_seconds. `make run` sets portal.demo_usage.used_device_seconds.
PORTAL_USAGE_SOURCE = env_str("PORTAL_USAGE_SOURCE")
# Run the beat schedule inside `runserver` (the embedded run has no worker or beat process).
PORTAL_EMBEDDED_BEAT = env_bool("PORTAL_EMBEDDED_BEAT", False)
if PRODUCTION and (PORTAL_USAGE_SOURCE or PORTAL_EMBEDDED_BEAT):
    raise ImproperlyConfigured("PORTAL_USAGE_SOURCE and PORTAL_EMBEDDED_BEAT are for the "
                               "embedded run only")
# GPU activity and memory per workload, from the same DCGM series (0: not measured; the
# embedded run has no Prometheus).
PORTAL_UTILISATION_SECONDS = env_int("PORTAL_UTILISATION_SECONDS", 300, minimum=0)
if PORTAL_UTILISATION_SECONDS:
    CELERY_BEAT_SCHEDULE["measure-workload-utilisation"] = {
        "task": "fleet.tasks.measure_workload_utilisation",
        "schedule": float(PORTAL_UTILISATION_SECONDS),
        "options": {"expires": float(PORTAL_UTILISATION_SECONDS)}}
CELERY_BEAT_SCHEDULE["rollup-usage"] = {"task": "billing.tasks.rollup_recent_usage",
                                        "schedule": 900.0}
# Stranded capacity (docs/stranded.md): how often holds are judged against their DCGM series
# (0: never), and the thresholds, with per-pool values as "pool-slug.key=value" items.
PORTAL_STRANDED_SECONDS = env_int("PORTAL_STRANDED_SECONDS", 3600, minimum=0)
PORTAL_STRANDED_WINDOW_HOURS = env_int("PORTAL_STRANDED_WINDOW_HOURS", 24, minimum=1)
PORTAL_STRANDED_IDLE_PERCENT = env_int("PORTAL_STRANDED_IDLE_PERCENT", 5, minimum=0)
PORTAL_STRANDED_STALL_MINUTES = env_int("PORTAL_STRANDED_STALL_MINUTES", 30, minimum=1)
PORTAL_STRANDED_STALL_PERCENT = env_int("PORTAL_STRANDED_STALL_PERCENT", 2, minimum=0)
PORTAL_STRANDED_HEADROOM_PERCENT = env_int("PORTAL_STRANDED_HEADROOM_PERCENT", 25, minimum=0)
PORTAL_STRANDED_STEP_SECONDS = env_int("PORTAL_STRANDED_STEP_SECONDS", 300, minimum=15)
# A declined finding ("keep") is not raised again for the same allocation and kind this long.
PORTAL_STRANDED_QUIET_DAYS = env_int("PORTAL_STRANDED_QUIET_DAYS", 7, minimum=0)
for _name in ("PORTAL_STRANDED_IDLE_PERCENT", "PORTAL_STRANDED_STALL_PERCENT"):
    if globals()[_name] > 100:
        raise ImproperlyConfigured(f"{_name}={globals()[_name]} is a percentage (0 to 100)")
try:
    PORTAL_STRANDED_POOL_THRESHOLDS = parse_pool_thresholds(env_list(
        "PORTAL_STRANDED_POOL_THRESHOLDS", []))
except ValueError as _exc:
    raise ImproperlyConfigured(f"PORTAL_STRANDED_POOL_THRESHOLDS: {_exc}") from None
if PORTAL_STRANDED_SECONDS:
    CELERY_BEAT_SCHEDULE["find-stranded"] = {
        "task": "billing.tasks.find_stranded_capacity",
        "schedule": float(PORTAL_STRANDED_SECONDS),
        "options": {"expires": float(PORTAL_STRANDED_SECONDS)}}

# --- Static files
STATIC_URL = "static/"
# build/vendor holds the pinned npm libraries scripts/assets.sh copies (Chart.js).
VENDOR_STATIC_DIR = BASE_DIR / "build" / "vendor"
STATICFILES_DIRS = [BASE_DIR / "static", VENDOR_STATIC_DIR]
STATIC_ROOT = Path(env_str("STATIC_ROOT", str(VAR_DIR / "static")))
if not PRODUCTION:
    STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # WhiteNoise warns about a missing one
    VENDOR_STATIC_DIR.mkdir(parents=True, exist_ok=True)
# The embedded run serves static files itself (WhiteNoise reads them where they are).
WHITENOISE_USE_FINDERS = not PRODUCTION
WHITENOISE_AUTOREFRESH = not PRODUCTION
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": (
        "whitenoise.storage.CompressedManifestStaticFilesStorage" if PRODUCTION
        else "django.contrib.staticfiles.storage.StaticFilesStorage")},
}

LANGUAGE_CODE = "en-gb"
TIME_ZONE = env_str("TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True

# --- Security: strict in production, relaxed only where the embedded run needs http.
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_FAILURE_VIEW = "portal.views.csrf_failure"  # the portal's own page, not Django's
CSRF_COOKIE_HTTPONLY = False  # htmx reads the token from the page, not the cookie
from portal import security as _csp  # noqa: E402 - the default policy lives with its code

X_FRAME_OPTIONS = "DENY"
# Content-Security-Policy of every response (portal/security.py); set empty for none.
PORTAL_CSP = env_str("PORTAL_CSP", _csp.DEFAULT_POLICY)
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
if PRODUCTION:
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31536000, minimum=0)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", True)
    # /healthz is probed over plain http inside the cluster.
    SECURE_REDIRECT_EXEMPT = [r"^healthz$"]

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    # fontTools narrates every font subset of a statement PDF at INFO.
    "loggers": {"fontTools": {"level": "WARNING"}},
}
