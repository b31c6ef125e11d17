"""The dashboard's own rows: failed logins, counted by ``webapp.dashboard.throttle``, and
the single sign-on identities linked to local users (``webapp.ops.oidc``)."""

from django.conf import settings
from django.db import models


class LoginFailure(models.Model):
    username = models.CharField(max_length=150, blank=True)
    address = models.CharField(max_length=64, blank=True)
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        # The throttle counts recent failures per address (and user name from it).
        indexes = [models.Index(fields=["username", "at"]), models.Index(fields=["address", "at"])]

    def __str__(self) -> str:
        return f"failed login {self.username!r} from {self.address} at {self.at:%Y-%m-%d %H:%M}"


class ExternalIdentity(models.Model):
    """A provider's user (its issuer and subject, which the provider never reassigns) linked
    to one local user. Single sign-on finds users through these rows only, never by name or
    e-mail: a row is made when the provider's user first signs in (a new local user), by an
    admin on the users page, or by a verified e-mail claim when SHARDYARD_OIDC_LINK_VERIFIED_EMAIL
    is on. Superusers are never linked."""

    issuer = models.CharField(max_length=255)
    subject = models.CharField(max_length=255)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="identities"
    )
    linked_by = models.CharField(max_length=32)  # "sign-in", "admin", "verified-email"
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["issuer", "subject"], name="identity_issuer_subject")
        ]

    def __str__(self) -> str:
        return f"{self.issuer} {self.subject} -> {self.user_id}"
