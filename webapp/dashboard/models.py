"""The dashboard's own rows: failed logins, counted by ``webapp.dashboard.throttle``."""

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
