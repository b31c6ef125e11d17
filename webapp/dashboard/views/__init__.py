"""Pages. Each view fetches, checks the role with webapp.roles.require_role, calls one
service or page context (webapp.dashboard.contexts), and renders or redirects."""
