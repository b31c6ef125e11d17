"""The role map of single sign-on, parsed while settings load (so: no Django models here)."""

from __future__ import annotations

ROLE_NAMES = ("viewer", "trainer", "editor", "admin")  # webapp.roles.ROLES


def parse_role_map(text: str) -> dict[str, str]:
    """``"a=editor,b=trainer"`` -> {"a": "editor", "b": "trainer"}; a bad entry or an
    unknown role raises ValueError naming it."""
    out = {}
    for entry in filter(None, (e.strip() for e in (text or "").split(","))):
        group, sep, role = entry.partition("=")
        if not sep or not group.strip() or role.strip() not in ROLE_NAMES:
            raise ValueError(
                f"SHARDYARD_OIDC_ROLE_MAP: {entry!r}: write group=role with a role among "
                f"{', '.join(ROLE_NAMES)}"
            )
        out[group.strip()] = role.strip()
    return out
