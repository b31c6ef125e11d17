"""Exceptions of shardcore. Each says what is wrong and where (file, line, field)."""


class ShardcoreError(Exception):
    """Base of every error shardcore raises on purpose."""


class FormatError(ShardcoreError):
    """A file does not have the layout its format requires (names the file and offset)."""


class ManifestError(ShardcoreError):
    """An artifact's manifest is missing, unreadable or inconsistent with its files."""


class InputError(ShardcoreError):
    """Bad user input: a source line, a parameter, a filter expression."""


class EmptySelectionError(InputError):
    """A filter selects no document; what to do about it is the caller's to say (a flag
    on the command line, a field in a form)."""


class CorruptDataError(FormatError):
    """Bytes read from an artifact do not match its manifest's checksums (names the file
    and the byte range of the first bad block)."""
