"""Set up the provider's database: an RSA signing key, a confidential client with one
redirect URI, and users with groups (a user with ``"email_verified": false`` gets the
marker group ``unverified-email``, which the claims read). Run with the provider's settings:
``python -m tests.support.oidc_provider.bootstrap <json>``."""

import json
import sys

import django

django.setup()

from django.contrib.auth.models import Group, User  # noqa: E402
from django.core.management import call_command  # noqa: E402
from oidc_provider.models import Client, ResponseType  # noqa: E402

spec = json.loads(sys.argv[1])
call_command("migrate", verbosity=0)
call_command("creatersakey")
client = Client.objects.create(
    name="shardyard", client_type="confidential", client_id=spec["client_id"],
    client_secret=spec["client_secret"], jwt_alg="RS256", require_consent=False,
    _redirect_uris=spec["redirect_uri"], _scope="openid email profile groups",
)  # fmt: skip
client.response_types.add(ResponseType.objects.get(value="code"))
for user in spec["users"]:
    u = User.objects.create_user(user["username"], user.get("email", ""), user["password"])
    for name in user.get("groups", []):
        u.groups.add(Group.objects.get_or_create(name=name)[0])
    if user.get("email_verified", True) is False:
        u.groups.add(Group.objects.get_or_create(name="unverified-email")[0])
