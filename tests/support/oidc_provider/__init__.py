"""A real OpenID Connect provider for the single sign-on tests: a tiny Django project of its
own around django-oidc-provider (not Shardyard's settings, not a mock of the protocol),
started as its own server process on a free loopback port by ``OidcProvider``."""
