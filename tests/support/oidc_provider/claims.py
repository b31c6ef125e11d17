"""The ``groups`` scope: the user's group names as the ``groups`` claim (what identity
providers such as Keycloak, Okta or Dex send)."""

from oidc_provider.lib.claims import ScopeClaims


class GroupsClaims(ScopeClaims):
    info_groups = ("Groups", "The groups you belong to.")

    def scope_groups(self):
        names = self.user.groups.exclude(name="unverified-email").values_list("name", flat=True)
        return {"groups": sorted(names)}


def userinfo(claims, user):
    """The standard claims of a user (OIDC_USERINFO)."""
    claims["preferred_username"] = user.username
    claims["email"] = user.email
    claims["email_verified"] = not user.groups.filter(name="unverified-email").exists()
    claims["name"] = user.get_full_name() or user.username
    return claims
