"""What the catalog refuses, as exceptions whose message is fit for a page. Services raise
them; views turn them into a 400 (or a 403 for RunPermissionError)."""


class CatalogError(Exception):
    """A request the catalog refuses, with a message that says why."""


class RunPermissionError(CatalogError):
    """The user may not write this run: it belongs to someone else (a 403)."""


class RunSwitchedError(CatalogError):
    """A progress report read a version the run no longer reads at those samples: it
    switched version earlier (HTTP 409); the trainer resumes from its checkpoint at the
    switch and reads the run's segments."""


class SourcePathError(CatalogError):
    """A source location outside the allowed roots, or one Shardyard cannot read."""
