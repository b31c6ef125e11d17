"""What the catalog refuses, as exceptions whose message is fit for a page. Services raise
them; views turn them into a 400 (or a 403 for RunPermissionError)."""


class CatalogError(Exception):
    """A request the catalog refuses, with a message that says why."""


class RunPermissionError(CatalogError):
    """The user may not write this run: it belongs to someone else (a 403)."""


class SourcePathError(CatalogError):
    """A source location outside the allowed roots, or one Shardyard cannot read."""
