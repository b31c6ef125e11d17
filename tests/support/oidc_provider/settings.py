"""Settings of the test OpenID Connect provider (its own SQLite file from OIDC_TEST_DB)."""

import os

SECRET_KEY = "oidc-provider-test-key-not-for-production"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "oidc_provider",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "tests.support.oidc_provider.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [os.path.join(os.path.dirname(__file__), "templates")],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
            ]
        },
    }
]
DATABASES = {
    "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": os.environ["OIDC_TEST_DB"]}
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
LOGIN_URL = "/accounts/login/"
# The provider's session cookie must not collide with Shardyard's on the same host.
SESSION_COOKIE_NAME = "idp_session"
CSRF_COOKIE_NAME = "idp_csrftoken"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
OIDC_EXTRA_SCOPE_CLAIMS = "tests.support.oidc_provider.claims.GroupsClaims"
OIDC_IDTOKEN_INCLUDE_CLAIMS = True
OIDC_USERINFO = "tests.support.oidc_provider.claims.userinfo"
