"""Signature libraries: ``.jsonl`` files, one ``eopt.signature/1`` object a line."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from eopt.model.fileformats import (
    MAX_LINE_BYTES,
    FileFormatError,
    Where,
    atomic_write_text,
    decode_utf8,
    dumps_json,
    guard,
    parse_json,
    refuse_other_kind,
)
from eopt.model.signature import Signature, SignatureError

__all__ = [
    "Library",
    "LibraryError",
    "append_signature",
    "read_library",
    "read_library_lines",
    "write_library",
]


class LibraryError(FileFormatError):
    """A library file that cannot be read; the message names file, line and field."""


_WHAT = "a signature library"


def _iter_lines(path: Path) -> Iterator[tuple[int, Signature]]:
    file = Where(str(path), error=LibraryError)
    if path.exists() and not (path.is_file() or path.is_fifo() or path.is_dir()):
        file.fail(f"is a device or socket, not {_WHAT}; name a .jsonl file")
    try:
        handle = path.open("rb")
    except FileNotFoundError:
        file.fail("no such signature library")
    except IsADirectoryError:
        file.fail(f"cannot read (a folder, not {_WHAT})")
    except OSError as exc:
        file.fail(f"cannot read ({exc.strerror})")
    with handle:
        lines = iter(lambda: handle.readline(MAX_LINE_BYTES + 1), b"")
        for lineno, raw in enumerate(lines, start=1):
            at = file.at_line(lineno)
            if len(raw) > MAX_LINE_BYTES:
                at.fail(f"a line longer than {MAX_LINE_BYTES // 1024**2} MiB; not {_WHAT}")
            # Decoded per line, so a binary or mis-encoded file is reported at its line.
            text = decode_utf8(raw, at, what="a library (one JSON object a line)").strip()
            if not text or text.startswith("#"):
                continue
            with guard(at, what="a signature"):
                try:
                    sig = Signature.from_dict(parse_json(text, at), at)
                except SignatureError as exc:  # a value check of the signature itself
                    at.fail(str(exc))
            if sig.time == 0:  # composites may; a measured element never takes no time
                (at / "time").fail("expected a finite number > 0 (s), got 0")
            yield lineno, sig


def read_library(path: str | os.PathLike[str]) -> list[Signature]:
    """Read every signature of a ``.jsonl`` library.

    Every line is validated as :meth:`Signature.from_dict` and
    :mod:`eopt.model.fileformats` say (finite numbers, no unknown fields), and every
    signature takes time (T > 0); a file of another eopt kind (a plan, a schedule …) is
    named for what it is.

    Raises:
        LibraryError: on the first bad line, naming ``file:line``, the field and the
            reason.
    """
    return [sig for _, sig in read_library_lines(path)]


def read_library_lines(path: str | os.PathLike[str]) -> list[tuple[int, Signature]]:
    """:func:`read_library`, each signature with the line it stands on (1-based).

    Raises:
        LibraryError: as :func:`read_library`.
    """
    p = Path(path)
    try:
        return list(_iter_lines(p))
    except LibraryError:
        refuse_other_kind(p, ("library",), Where(str(p), error=LibraryError))
        raise


def write_library(path: str | os.PathLike[str], signatures: Iterable[Signature]) -> None:
    """Write signatures to ``path`` (replacing it atomically), one JSON object a line."""
    where = str(path)
    lines = [dumps_json(sig.to_dict(), where, sort_keys=True) + "\n" for sig in signatures]
    atomic_write_text(path, "".join(lines))


def append_signature(path: str | os.PathLike[str], signature: Signature) -> None:
    """Append one signature and flush it to disk at once (safe against interruption)."""
    line = dumps_json(signature.to_dict(), str(path), sort_keys=True) + "\n"
    with Path(path).open("a", encoding="utf-8") as handle:
        handle.write(line)
        handle.flush()
        os.fsync(handle.fileno())


class Library:
    """Signatures from one or more libraries, looked up by element name.

    Args:
        signatures: The signatures.
    """

    def __init__(self, signatures: Iterable[Signature]) -> None:
        self.signatures: list[Signature] = list(signatures)

    @classmethod
    def load(cls, *paths: str | os.PathLike[str]) -> Library:
        """Read and concatenate libraries."""
        sigs: list[Signature] = []
        for p in paths:
            sigs.extend(read_library(p))
        return cls(sigs)

    def names(self) -> list[str]:
        """Distinct element names, in first-seen order."""
        return list(dict.fromkeys(s.name for s in self.signatures))

    def by_name(self, name: str) -> list[Signature]:
        """All signatures (every κ, ω) of an element.

        Raises:
            KeyError: with the known names when ``name`` has none.
        """
        found = [s for s in self.signatures if s.name == name]
        if not found:
            known = ", ".join(self.names()[:20])
            raise KeyError(f"no signature named {name!r} in the library (known: {known})")
        return found

    def __len__(self) -> int:
        return len(self.signatures)

    def __iter__(self) -> Iterator[Signature]:
        return iter(self.signatures)
