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


class WrongKindError(ManifestError, InputError):
    """An artifact is not of the kind asked for (names the artifact, the kind its manifest
    says and the kinds expected). An InputError too: the wrong path was given, and every
    caller that turns bad input into a message keeps doing so."""

    def __init__(self, where: str, found: object, expected: tuple[str, ...]):
        self.where, self.found, self.expected = where, found, expected
        nouns = (
            expected[0] if len(expected) == 1 else ", ".join(expected[:-1]) + f" or {expected[-1]}"
        )
        kinds = " or ".join(repr(k) for k in expected)
        said = f"its manifest's kind is {found!r}" if found else "its manifest has no kind"
        super().__init__(f"{where}: is not a {nouns}: {said}, expected {kinds}")
