"""Signature libraries: ``.jsonl`` files, one ``eopt.signature/1`` object a line."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from eopt.calculus.signature import Signature, SignatureError

__all__ = ["Library", "LibraryError", "append_signature", "read_library", "write_library"]


class LibraryError(ValueError):
    """A library file that cannot be read; the message names file, line and field."""


def _iter_lines(path: Path) -> Iterator[tuple[int, Signature]]:
    try:
        handle = path.open("rb")
    except FileNotFoundError:
        raise LibraryError(f"{path}: no such signature library") from None
    except OSError as exc:
        raise LibraryError(f"{path}: cannot read ({exc.strerror})") from None
    with handle:
        for lineno, raw in enumerate(handle, start=1):
            # Decoded per line, so a binary or mis-encoded file is reported at its line.
            try:
                text = raw.decode("utf-8").strip()
            except UnicodeDecodeError:
                raise LibraryError(
                    f"{path}:{lineno}: not UTF-8 text; a library is a .jsonl file with one "
                    "JSON object a line"
                ) from None
            if not text or text.startswith("#"):
                continue
            try:
                data = json.loads(text)
            except json.JSONDecodeError as exc:
                raise LibraryError(
                    f"{path}:{lineno}: not valid JSON ({exc.msg} at column {exc.colno}); "
                    "each line must be one JSON object"
                ) from None
            try:
                yield lineno, Signature.from_dict(data)
            except SignatureError as exc:
                raise LibraryError(f"{path}:{lineno}: {exc}") from None


def read_library(path: str | os.PathLike[str]) -> list[Signature]:
    """Read every signature of a ``.jsonl`` library.

    Raises:
        LibraryError: on the first bad line, naming ``file:line`` and the reason.
    """
    return [sig for _, sig in _iter_lines(Path(path))]


def write_library(path: str | os.PathLike[str], signatures: Iterable[Signature]) -> None:
    """Write signatures to ``path`` (replacing it), one JSON object a line."""
    target = Path(path)
    tmp = target.with_name(target.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        for sig in signatures:
            handle.write(json.dumps(sig.to_dict(), sort_keys=True) + "\n")
    os.replace(tmp, target)


def append_signature(path: str | os.PathLike[str], signature: Signature) -> None:
    """Append one signature and flush it to disk at once (safe against interruption)."""
    with Path(path).open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(signature.to_dict(), sort_keys=True) + "\n")
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
