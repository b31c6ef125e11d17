"""Pages. Each view fetches, checks the role with permissions.require_role, calls one
service or selector, and renders or redirects."""
