"""One validation layer for every file eopt reads, and one safe way to write files.

Every reader of an eopt file kind (signature library, plan, schedule, placements,
frontier table, measurement, stage profile) goes through these helpers, so that every
file is held to the same rules and every refusal reads the same way: one line naming the
file, the place (line, or the field's path such as ``elements[3].start``), what is wrong
and what to write instead — never a traceback.

The rules every file obeys:

* Text is UTF-8 (a byte-order mark is accepted and dropped); anything else is refused
  with the line of the first bad byte.
* Numbers are finite: JSON's ``NaN``/``Infinity`` tokens, YAML's ``.nan``/``.inf`` and
  numbers too large for a float (``1e999``) are refused wherever they sit, even in
  free-form fields, because no eopt file may carry them (JSON has no such values, and a
  report would print them as ``nan %``).
* Ranges and types are checked field by field (:func:`number`, :func:`mapping` …), not
  only the syntax.
* A file that nests too deeply, holds a CSV field too long for the csv module, or trips a
  reader on a type it did not expect gets the file's one-line error (:func:`guard`).
* A file of another eopt kind is named for what it is (:func:`detect_kind`,
  :func:`refuse_other_kind`): ``plan.yaml is a plan (eopt.plan/1); apply takes a
  schedule from `eopt solve```.

Writers use :func:`atomic_write_text` (a new temporary file beside the target, then a
rename) and :func:`dumps_json` (strict JSON: no NaN or Infinity).
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import os
import re
import secrets
import stat
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import yaml

__all__ = [
    "KINDS",
    "CsvTable",
    "FileFormatError",
    "FileKind",
    "Where",
    "atomic_write_text",
    "check_finite",
    "csv_header_kind",
    "decode_utf8",
    "detect_kind",
    "dumps_json",
    "guard",
    "integer",
    "json_ready",
    "mapping",
    "no_unknown",
    "number",
    "optional_number",
    "parse_json",
    "parse_yaml",
    "read_bounded",
    "read_csv",
    "read_text",
    "refuse_other_kind",
    "required",
    "sequence",
    "string",
    "within_run",
]


class FileFormatError(ValueError):
    """A file eopt cannot use; the message is one line naming the file and the place.

    Every reader's own error type (``LibraryError``, ``PlanError``, ``ScheduleError`` …)
    derives from it, so ``except FileFormatError`` catches a bad file of any kind.
    """


# Relative tolerance for "inside the run": start ≥ 0 and end ≤ makespan hold up to
# floating-point rounding of sums of durations (1e-9 of the run, far below any
# measurable time), never more.
RUN_TOLERANCE = 1e-9


# Places ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Where:
    """A place in a file, for error messages: the file, a line, a path to a field.

    ``Where("s.json") / "elements" / 3 / "start"`` reads ``s.json: elements[3].start``;
    with a line, ``lib.jsonl:7: time``.

    Attributes:
        file: The file's path as the user gave it.
        path: The field's path inside the file (empty: the whole file).
        line: 1-based line, where one is known (CSV rows, JSON lines).
        error: The error type raised by :meth:`fail` (the reader's own).
    """

    file: str
    path: str = ""
    line: int | None = None
    error: type[ValueError] = FileFormatError

    # Built directly rather than by dataclasses.replace: readers make one per field.
    def __truediv__(self, key: str | int) -> Where:
        if isinstance(key, int):
            return Where(self.file, f"{self.path}[{key}]", self.line, self.error)
        path = f"{self.path}.{key}" if self.path else str(key)
        return Where(self.file, path, self.line, self.error)

    def at_line(self, line: int | None) -> Where:
        """The same place at ``line``."""
        return Where(self.file, self.path, line, self.error)

    def __str__(self) -> str:
        head = self.file if self.line is None else f"{self.file}:{self.line}"
        return f"{head}: {self.path}" if self.path else head

    def fail(self, problem: str) -> NoReturn:
        """Raise the reader's error: ``<file>[:line]: <path>: <problem>``."""
        raise self.error(f"{self}: {problem}")


def _shown(value: Any, limit: int = 60) -> str:
    """A value as an error message quotes it: repr, cut to ``limit`` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _json_type(value: Any) -> str:
    """The JSON/YAML name of a parsed value's type, as a user wrote it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return f"the text {_shown(value, 40)}"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, (list, tuple)):
        return "a list"
    return type(value).__name__


# Values ----------------------------------------------------------------------------------
def number(
    value: Any,
    where: Where,
    *,
    unit: str = "",
    min: float | None = None,
    max: float | None = None,
    positive: bool = False,
) -> float:
    """A finite number within bounds, as a float.

    Args:
        value: The parsed value.
        where: Its place (the error names it).
        unit: The unit, for the message (``"s"``, ``"J"``, ``"W"``, ``"MHz"``).
        min: Smallest allowed value (inclusive), or None.
        max: Largest allowed value (inclusive), or None.
        positive: Require a value > 0.

    Raises:
        The reader's error: for a non-number (``true`` and text included), a non-finite
        number, or one out of bounds.
    """
    units = f" ({unit})" if unit else ""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        where.fail(f"expected a number{units}, got {_json_type(value)}")
    try:
        x = float(value)
    except OverflowError:  # an integer beyond any float
        where.fail(f"expected a finite number{units}, got an integer of {len(str(value))} digits")
    if not math.isfinite(x):
        where.fail(f"expected a finite number{units}, got {value!r}")
    if positive and x <= 0:
        where.fail(f"expected a finite number > 0{units}, got {value!r}")
    if min is not None and x < min:
        where.fail(f"expected a finite number ≥ {min:g}{units}, got {value!r}")
    if max is not None and x > max:
        where.fail(f"expected a finite number ≤ {max:g}{units}, got {value!r}")
    return x


def optional_number(value: Any, where: Where, **bounds: Any) -> float | None:
    """:func:`number`, or None for a null (unknown) value."""
    return None if value is None else number(value, where, **bounds)


def integer(value: Any, where: Where, *, min: int | None = None) -> int:
    """An integer (not a bool, not 2.5) ≥ ``min``.

    Raises:
        The reader's error.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        bound = f" ≥ {min}" if min is not None else ""
        where.fail(f"expected an integer{bound}, got {_json_type(value)}")
    if min is not None and value < min:
        where.fail(f"expected an integer ≥ {min}, got {value}")
    return value


def string(value: Any, where: Where, *, what: str = "a name") -> str:
    """A non-empty string (numbers are accepted as names: YAML reads ``name: 1`` so).

    Raises:
        The reader's error.
    """
    if isinstance(value, bool) or not isinstance(value, (str, int)) or str(value) == "":
        where.fail(f"expected {what} (non-empty text), got {_json_type(value)}")
    return str(value)


def mapping(value: Any, where: Where, *, what: str = "an object") -> Mapping[str, Any]:
    """An object (mapping); a list or a scalar is refused.

    Raises:
        The reader's error, naming what was found instead.
    """
    if not isinstance(value, Mapping):
        where.fail(f"expected {what}, got {_json_type(value)}")
    return value


def sequence(
    value: Any, where: Where, *, what: str = "a list", nonempty: bool = False
) -> list[Any]:
    """A list; an object or a scalar is refused.

    Raises:
        The reader's error.
    """
    if not isinstance(value, list):
        where.fail(f"expected {what}, got {_json_type(value)}")
    if nonempty and not value:
        where.fail(f"expected {what} with at least one entry, got an empty list")
    return value


def required(data: Mapping[str, Any], key: str, where: Where, *, hint: str = "") -> Any:
    """``data[key]``, or the reader's error ``field 'key' is missing`` at ``where``."""
    if key not in data:
        where.fail(f"field {key!r} is missing" + (f" ({hint})" if hint else ""))
    return data[key]


def no_unknown(data: Mapping[str, Any], known: Iterable[str], where: Where) -> None:
    """Refuse keys outside ``known`` (a misspelt key is never silently ignored)."""
    allowed = set(known)
    unknown = sorted(str(k) for k in data if k not in allowed)
    if unknown:
        where.fail(f"unknown field(s) {unknown}; expected some of {sorted(allowed)}")


def within_run(start: float, end: float, run: float, where: Where, *, run_name: str) -> float:
    """Check that [start, end] lies inside [0, run] up to :data:`RUN_TOLERANCE`.

    ``run`` may be ``math.inf`` where a file gives no run length: then only the start is
    checked.

    Returns:
        ``start``, with a rounding-size negative start set to 0.

    Raises:
        The reader's error, naming the interval and the run.
    """
    # Scaled by the finite times involved: a run of unknown length (inf) must not make
    # every negative start look like rounding.
    span = abs(run) if math.isfinite(run) else 0.0
    slack = RUN_TOLERANCE * max(span, abs(start), abs(end), 1e-12)
    if start < -slack:
        where.fail(f"starts at {start:g} s, before the run's start at 0 s")
    if end > run + slack:
        where.fail(f"ends at {end:g} s, after the {run_name} of {run:g} s")
    return max(0.0, start)


#: Deepest nesting of lists and mappings an eopt file may have.
MAX_NESTING = 64


def check_finite(data: Any, where: Where) -> None:
    """Refuse a non-finite float anywhere in parsed data, naming its path.

    Iterative (a deep file cannot exhaust the stack) and visits each container once (a
    YAML alias bomb cannot make it walk forever).
    """
    # Each entry: (value, the path to it as (parent entry, key), depth). The `Where` of
    # a value is built only for the one reported: a plan of 8 192 elements has about
    # 100 000 values, and a `Where` per value cost more than parsing the file.
    stack: list[tuple[Any, tuple[Any, ...] | None, int]] = [(data, None, 0)]
    seen: set[int] = set()

    def place(path: tuple[Any, ...] | None) -> Where:
        keys: list[str | int] = []
        while path is not None:
            path, key = path
            keys.append(key if isinstance(key, int) else str(key))
        at = where
        for key in reversed(keys):
            at = at / key
        return at

    while stack:
        value, path, depth = stack.pop()
        if isinstance(value, float):
            if not math.isfinite(value):
                place(path).fail(
                    f"numbers must be finite, got {value} (no NaN or infinity in eopt files)"
                )
        elif isinstance(value, (Mapping, list, tuple)):
            if depth > MAX_NESTING:
                # Deeper than any eopt file: later (recursive) code must never meet it.
                where.fail(f"lists or mappings nested too deeply (over {MAX_NESTING} levels)")
            if id(value) in seen:
                continue
            seen.add(id(value))
            items = list(value.items()) if isinstance(value, Mapping) else list(enumerate(value))
            # Reversed, so the first offender in file order is the one reported.
            stack.extend(((v, (path, k), depth + 1) for k, v in reversed(items)))


def json_ready(data: Any) -> Any:
    """A copy of ``data`` with every non-finite float replaced by None (JSON ``null``).

    For free-form fields (``meta``, ``solver``) and command outputs, where NaN means
    "unknown": JSON has no NaN, and ``null`` is how an eopt file says unknown.
    """
    if isinstance(data, float) and not math.isfinite(data):
        return None
    if isinstance(data, Mapping):
        return {k: json_ready(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [json_ready(v) for v in data]
    return data


def dumps_json(data: Any, where: str = "<json>", **options: Any) -> str:
    """Strict JSON text (``allow_nan=False``): NaN and Infinity are refused, naming the
    field, instead of being written as tokens no JSON reader (nor Perfetto) accepts.

    Args:
        data: JSON-ready data.
        where: The file being written, for the error.
        **options: Passed to :func:`json.dumps` (``indent``, ``sort_keys`` …).

    Raises:
        ValueError: naming ``where`` and the field that is not finite.
    """
    try:
        return json.dumps(data, allow_nan=False, **options)
    except ValueError:
        # json only says "Out of range float values": find the field to name it (only
        # now, so that large traces are not walked twice).
        check_finite(data, Where(f"cannot write {where}", error=ValueError))
        raise


# Reading ---------------------------------------------------------------------------------
def decode_utf8(raw: bytes, where: Where, *, what: str) -> str:
    """UTF-8 text of ``raw`` without a leading byte-order mark.

    Raises:
        The reader's error, naming the line and byte of the first invalid byte.
    """
    try:
        decoded = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        where.at_line(where.line or line).fail(
            f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start}); "
            f"{what} is a UTF-8 text file"
        )
    return decoded.removeprefix("\ufeff")


#: The largest file eopt reads, in bytes: far above any plan, library or trace it writes
#: (a 65 536-task plan is tens of MB), and a bound on what an endless input can cost.
MAX_FILE_BYTES = 4 * 1024**3
#: The longest line of a line-oriented file (a library's signature), in bytes.
MAX_LINE_BYTES = 64 * 1024**2


def read_bounded(path: str | os.PathLike[str], where: Where, *, what: str) -> bytes:
    """The bytes of a file, refusing a device (``/dev/zero``) or one over the size bound.

    A regular file or a pipe (``<(…)``) is read; a character or block device, a socket
    or a folder is refused before anything is read, and no read takes more than
    :data:`MAX_FILE_BYTES`.

    Raises:
        The reader's error: missing, a folder, a device, unreadable, or too large.
    """
    p = Path(path)
    try:
        mode = p.stat().st_mode
    except FileNotFoundError:
        kind = _no_article(what)
        where.fail(f"no such {kind}" if kind.endswith(" file") else f"no such {kind} file")
    except OSError as exc:
        where.fail(f"cannot read ({exc.strerror or exc})")
    if stat.S_ISDIR(mode):
        where.fail(f"cannot read (a folder, not {what} file)")
    if not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode)):
        where.fail(f"is a device or socket, not {what} file; name a regular file")
    try:
        with p.open("rb") as handle:
            raw = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        where.fail(f"cannot read ({exc.strerror or exc})")
    if len(raw) > MAX_FILE_BYTES:
        where.fail(
            f"larger than {MAX_FILE_BYTES // 1024**3} GiB, more than any {_no_article(what)} "
            "eopt reads; is it the right file?"
        )
    return raw


def read_text(path: str | os.PathLike[str], where: Where, *, what: str) -> str:
    """The UTF-8 text of a file (a byte-order mark dropped).

    Args:
        path: The file.
        where: The file's place (carries the reader's error type).
        what: What the file should be, with its article (``"a schedule"``).

    Raises:
        The reader's error: missing file (``no such <kind> file``), a folder, an
        unreadable file, or text that is not UTF-8 (with its line).
    """
    return decode_utf8(read_bounded(path, where, what=what), where, what=what)


def _no_article(what: str) -> str:
    return re.sub(r"^(a|an|the) ", "", what)


class _NonFiniteError(Exception):
    """Raised inside :func:`json.loads` for ``NaN``, ``Infinity`` or ``1e999``."""

    def __init__(self, token: str) -> None:
        super().__init__(token)
        self.token = token


def _reject_constant(token: str) -> Any:
    raise _NonFiniteError(token)


def _finite_float(token: str) -> float:
    value = float(token)
    if not math.isfinite(value):  # 1e999 parses to inf
        raise _NonFiniteError(token)
    return value


def _line_of(text: str, token: str) -> int | None:
    """The line of the first ``token`` outside a string, best effort."""
    pattern = re.compile(r'"(?:[^"\\]|\\.)*"|' + re.escape(token))
    for match in pattern.finditer(text):
        if match.group(0) == token:
            return text.count("\n", 0, match.start()) + 1
    return None


# Every digit reads as 0 and E as e, and signs are dropped: then one substring test per
# shape finds every number that could parse to a non-finite float (see _may_be_non_finite).
_NUMBER_SHAPES = bytes.maketrans(b"123456789E", b"000000000e")
# An exponent of three digits or more (1e309, 1E+0400 …); two-digit exponents never
# overflow a float on their own.
_LONG_EXPONENT = b"e000"
# An integer part this long: with an exponent of at most 99 a number overflows only from
# 210 integer digits on (10**209 * 10**99 > 1.8e308); fraction digits never add magnitude.
_LONG_DIGITS = b"0" * 200


def _may_be_non_finite(text: str) -> bool:
    """Whether ``text`` might hold a number JSON parses to NaN or ±infinity.

    A conservative test at C speed (one translation, four substring searches): it is
    never False for text holding a ``NaN``/``Infinity`` token or a float literal that
    overflows (``1e999``, 400 digits), and rarely True otherwise (such shapes inside a
    string also count). Dropping signs only joins digit runs, so it finds more, never
    fewer.
    """
    shapes = text.encode("utf-8", "surrogatepass").translate(_NUMBER_SHAPES, b"+-")
    return (
        b"NaN" in shapes
        or b"Infinity" in shapes
        or _LONG_EXPONENT in shapes
        or _LONG_DIGITS in shapes
    )


def parse_json(text: str, where: Where) -> Any:
    """Parse JSON text, refusing non-finite numbers and too-deep nesting.

    Args:
        text: The text.
        where: The file (with its line for a JSON-lines file).

    Raises:
        The reader's error, naming the line of a syntax error or a ``NaN``.
    """
    try:
        if not _may_be_non_finite(text):
            # No number here can be non-finite, so json's own C float parsing returns
            # exactly what the checking hooks would (and raises the same syntax errors),
            # without a Python call per number: most of a library's read time before.
            return json.loads(text)
        return json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
    except _NonFiniteError as exc:
        line = where.line or _line_of(text, exc.token)
        where.at_line(line).fail(
            f"numbers must be finite, got {exc.token} (JSON has no NaN or Infinity); write a "
            "finite number, or null where a value is unknown"
        )
    except json.JSONDecodeError as exc:
        line = where.line or exc.lineno
        where.at_line(line).fail(f"not valid JSON ({exc.msg} at column {exc.colno})")
    except RecursionError:
        where.fail("not valid JSON for eopt (arrays or objects nested too deeply)")
    except ValueError as exc:  # e.g. an integer literal of more than 4300 digits
        where.fail(f"not valid JSON ({exc})")


_SAFE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

#: PyYAML's safe dumper, in C where libyaml is present (the same text, about 6x faster:
#: the 8 192 elements of an 8 x 512 pipeline plan in 0.35 s instead of 2.1 s).
SAFE_DUMPER: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def _flow_depth(text: str) -> int:
    """The deepest nesting of ``[`` and ``{`` in text (quotes not parsed: an upper bound)."""
    depth = deepest = 0
    for char in text:
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def parse_yaml(text: str, where: Where, *, language: str = "YAML") -> Any:
    """Parse YAML (or JSON) text safely, refusing non-finite numbers anywhere.

    ``language`` names the syntax in messages (``"YAML/JSON"`` where both are read).

    Raises:
        The reader's error, naming the line of a syntax error or the path of a ``.nan``.
    """
    try:
        # libyaml's safe loader where PyYAML was built with it: the same documents, parsed
        # several times faster (an 8000-element plan: seconds).
        data = yaml.load(text, Loader=_SAFE_LOADER)
    except yaml.YAMLError as exc:
        if _flow_depth(text) > MAX_NESTING:
            # libyaml refuses deep flow nesting itself, in words that vary by version.
            where.fail(f"not valid {language} for eopt (lists or mappings nested too deeply)")
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        line = mark.line + 1 if mark is not None else None
        where.at_line(line).fail(f"not valid {language} ({problem})")
    except RecursionError:
        where.fail(f"not valid {language} for eopt (lists or mappings nested too deeply)")
    check_finite(data, where)
    return data


@dataclass(frozen=True)
class CsvTable:
    """A CSV file split into its header and rows.

    Attributes:
        header: The header's cells, stripped.
        rows: (line number, cells) of every non-blank row after the header.
    """

    header: list[str]
    rows: list[tuple[int, list[str]]]


#: The longest field of an eopt table (frontier, profile), in characters: the csv
#: module's own default, far above any number or name.
MAX_CSV_FIELD = 131_072


def read_csv(path: str | os.PathLike[str], where: Where, *, what: str) -> CsvTable:
    """Read a CSV table with a header row.

    A final line without a newline that is shorter than the header, or whose last field
    ends in ``.``, is refused as cut off: that is what an interrupted write leaves
    (``…,33.`` of ``…,33.75``), and it would otherwise be read as a plausible number.

    Args:
        path: The file.
        where: The file's place (carries the reader's error type).
        what: What the file should be, with its article (``"a frontier table"``).

    Raises:
        The reader's error: unreadable or non-UTF-8 file, a field beyond the csv
        module's size limit, malformed quoting, or a cut-off last line.
    """
    content = read_text(path, where, what=what)
    # The csv module's limit is process-wide and trace readers raise it: set the tables'
    # own, so a file reads the same whatever was read before it.
    csv.field_size_limit(MAX_CSV_FIELD)
    # strict: an unclosed quote is an error, not a field that swallows the rest of the file
    reader = csv.reader(io.StringIO(content, newline=""), strict=True)
    header: list[str] | None = None
    rows: list[tuple[int, list[str]]] = []
    try:
        for row in reader:
            if header is None:
                header = [cell.strip() for cell in row]
            elif row and any(cell.strip() for cell in row):
                rows.append((reader.line_num, row))
    except csv.Error as exc:
        at = where.at_line(max(1, reader.line_num))  # the line being read
        if "field larger than field limit" in str(exc):
            at.fail(
                f"a field is longer than {MAX_CSV_FIELD} characters; is this {what} (a CSV table)?"
            )
        at.fail(f"not a valid CSV row ({exc})")
    if header is None:
        where.fail(f"empty file; expected {what} with a header row")
    if rows and not content.endswith(("\n", "\r")):
        line, last = rows[-1]
        if len(last) < len(header) or last[-1].strip().endswith("."):
            where.at_line(line).fail(
                f"the last line is cut off (no newline at the end, and it ends in "
                f"{_shown(last[-1].strip(), 20)} with {len(last)} of {len(header)} fields); "
                "the file was not completely written: write it again"
            )
    return CsvTable(header, rows)


@contextlib.contextmanager
def guard(where: Where, *, what: str) -> Iterator[None]:
    """Turn what a reader did not foresee into the file's one-line error.

    Deep nesting (RecursionError), a value of an unexpected type reaching code that
    assumed another (TypeError, AttributeError), a number too large (OverflowError) and
    CSV errors become ``<file>: cannot read it as <what> (…)``; the reader's own errors
    pass through unchanged.

    Args:
        where: The file.
        what: What it should be, with its article (``"a schedule"``).
    """
    try:
        yield
    except RecursionError:
        where.fail(f"cannot read it as {what}: nested too deeply")
    except csv.Error as exc:
        where.fail(f"cannot read it as {what} (CSV: {exc})")
    except (TypeError, AttributeError, OverflowError) as exc:
        where.fail(f"cannot read it as {what}: a value has the wrong type ({exc})")


# File kinds -----------------------------------------------------------------------------
@dataclass(frozen=True)
class FileKind:
    """A kind of file eopt reads or writes.

    Attributes:
        key: Short identifier (``schedule``).
        name: What a user calls it, with its article (``a schedule``).
        schema: Its schema tag, or the shape that identifies it.
        source: What writes it (``eopt solve``), as a phrase.
    """

    key: str
    name: str
    schema: str
    source: str

    def described(self) -> str:
        """``a schedule (eopt.schedule/1)``."""
        return f"{self.name} ({self.schema})"


KINDS: dict[str, FileKind] = {
    k.key: k
    for k in (
        FileKind("library", "a signature library", "eopt.signature/1", "from `eopt sweep`"),
        FileKind("plan", "a plan", "eopt.plan/1", "from `eopt plan` or written by hand"),
        FileKind("schedule", "a schedule", "eopt.schedule/1", "from `eopt solve`"),
        FileKind(
            "placements",
            "a placements file",
            "a list of {element, device, start}",
            "written by hand",
        ),
        FileKind(
            "frontier",
            "a frontier table",
            "CSV with makespan_s,energy_j",
            "from `eopt solve --frontier` or `eopt frontier --csv`",
        ),
        FileKind(
            "measurement",
            "a measurement",
            "total_energy_j, total_time_s, regions",
            "from `eopt measure --json`",
        ),
        FileKind(
            "profile",
            "a stage profile",
            "CSV stage,instruction,frequency,time,energy",
            "from Perseus/Zeus",
        ),
        FileKind(
            "trace",
            "a recorded trace",
            "events.csv + power_samples.csv",
            "from `eopt measure --trace-dir`",
        ),
        FileKind("attribution", "an attribution", "eopt.attribution/1", "from `eopt attribute`"),
        FileKind("comparison", "a comparison", "eopt.comparison/1", "from `eopt compare`"),
        FileKind("runset", "a run set", "eopt.runset/1", "from `eopt measure --repeat`"),
        FileKind("composition", "a composition", "eopt.composition/1", "from `eopt compose`"),
        FileKind(
            "interactions",
            "an interaction graph",
            "eopt.interactions/1",
            "from `eopt check --write-graph` or written by hand",
        ),
        FileKind("check", "a check result", "eopt.check/1", "from `eopt check -o`"),
        FileKind("regions", "a region log", "eopt.region/1", "from eopt.measure.regions"),
        FileKind("gpu-state", "a GPU state file", "eopt.gpu-state/1", "from eopt while it runs"),
    )
}

_BY_SCHEMA = {k.schema: k.key for k in KINDS.values() if k.schema.startswith("eopt.")}
_SIGNATURE_KEYS = {"name", "static_power", "time", "dynamic_energy"}
_PROFILE_COLUMNS = {"stage", "instruction", "frequency", "time", "energy"}
# How much of a file detect_kind looks at: enough for any plan or schedule, and a bound
# on the time spent guessing at a multi-gigabyte file.
_DETECT_BYTES = 8 << 20


def _kind_of_data(data: Any) -> str | None:
    """The kind of a parsed JSON/YAML document, by its schema tag or its shape."""
    if isinstance(data, list):
        if data and all(isinstance(x, Mapping) and "element" in x for x in data):
            return "placements"
        return None
    if not isinstance(data, Mapping):
        return None
    schema = data.get("schema")
    if isinstance(schema, str) and schema in _BY_SCHEMA:
        return _BY_SCHEMA[schema]
    keys = set(data)
    if keys >= _SIGNATURE_KEYS:
        return "library"
    if "placements" in keys:
        return "placements"
    if {"devices", "elements"} <= keys:
        elements = data.get("elements")
        if isinstance(elements, list) and any(
            isinstance(e, Mapping) and "start" in e for e in elements
        ):
            return "schedule"
        return "plan"
    total = data.get("total")
    if {"total_energy_j", "total_time_s"} <= keys or (
        isinstance(total, Mapping) and "energy_j" in total
    ):
        return "measurement"
    return None


def csv_header_kind(header: Sequence[str]) -> FileKind | None:
    """The kind of a CSV file by its header's cells (None: not one eopt knows)."""
    key = _kind_of_cells({c.strip().strip('"').lower() for c in header})
    return KINDS[key] if key else None


def _kind_of_header(line: str) -> str | None:
    """The kind of a CSV file by its header line."""
    return _kind_of_cells({c.strip().strip('"').lower() for c in line.split(",")})


def _kind_of_cells(cells: set[str]) -> str | None:
    if cells >= _PROFILE_COLUMNS:
        return "profile"
    if {"timestamp_ns", "power_watts"} <= cells or {"start_ns", "end_ns"} <= cells:
        return "trace"
    # Only the layouts eopt writes: a plan frontier (makespan_s, energy_j …) or element
    # frontiers (element, time_s, energy_j …); a bare time,energy table could be anything.
    plan_frontier = cells & {"makespan", "makespan_s"} and cells & {"energy", "energy_j"}
    if plan_frontier or {"element", "time_s", "energy_j"} <= cells:
        return "frontier"
    return None


def detect_kind(path: str | os.PathLike[str]) -> FileKind | None:
    """Recognise an eopt file kind by its schema tag or its shape.

    Looks at folders (a trace folder, a run set), JSON and JSON lines (schema tags, or
    the keys of a signature, plan, schedule or measurement), CSV headers (frontier
    table, stage profile, trace CSVs) and YAML (plan, placements). Never raises.

    Returns:
        The kind, or None when the file is not recognisably one of eopt's.
    """
    try:
        return _detect(Path(path))
    except (Exception, RecursionError):  # a guess must never fail the caller
        return None


def _detect(p: Path) -> FileKind | None:
    if p.is_dir():
        index = p / "index.json"
        if index.is_file():
            found = _detect(index)
            if found is not None:
                return found
        names = {c.name for c in p.iterdir()}
        if names & {"events.csv", "power_samples.csv"} or any(n.startswith("rank_") for n in names):
            return KINDS["trace"]
        return None
    with p.open("rb") as handle:
        raw = handle.read(_DETECT_BYTES)
    content = raw.decode("utf-8", errors="replace").removeprefix("\ufeff")
    stripped = content.lstrip()
    if not stripped:
        return None
    key: str | None = None
    if stripped[0] in "{[":
        try:
            key = _kind_of_data(json.loads(stripped))
        except ValueError:
            first = stripped.splitlines()[0]
            with contextlib.suppress(ValueError):
                key = _kind_of_data(json.loads(first))
    if key is None:
        key = _kind_of_header(stripped.splitlines()[0])
    if key is None and stripped[0] not in "{[":
        with contextlib.suppress(yaml.YAMLError, ValueError):
            key = _kind_of_data(yaml.safe_load(content))
    return KINDS[key] if key else None


def _command_name() -> str | None:
    """The running eopt subcommand (``apply``, ``plan pipeline``), when a click command
    is running."""
    click = sys.modules.get("click")  # only when the CLI is running: never import it here
    if click is None:
        return None
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return None
    # "eopt plan pipeline" → "plan pipeline": the words a user typed after the program.
    return " ".join(ctx.command_path.split()[1:]) or ctx.info_name


def refuse_other_kind(
    path: str | os.PathLike[str],
    expected: Sequence[str],
    where: Where,
    found: FileKind | None = None,
) -> None:
    """Raise the reader's error when ``path`` is another eopt kind than ``expected``.

    Called when a file fails to read as the expected kind, so that the user hears what
    the file is (``plan.yaml is a plan (eopt.plan/1); apply takes a schedule from
    `eopt solve```) rather than a parser's complaint. Returns quietly when the file is
    of an expected kind (its own error is the one to show) or of no known kind.

    Args:
        path: The file.
        expected: Keys of :data:`KINDS` the reader accepts.
        where: The file's place (carries the reader's error type).
        found: The kind, when the reader already knows it (else :func:`detect_kind`).
    """
    found = found or detect_kind(path)
    if found is None or found.key in expected:
        return
    wanted = " or ".join(f"{KINDS[k].name} {KINDS[k].source}" for k in expected)
    command = _command_name()
    takes = f"{command} takes {wanted}" if command else f"expected {wanted}"
    raise where.error(f"{path} is {found.described()}; {takes}")


# Writing ---------------------------------------------------------------------------------
def atomic_write_text(path: str | os.PathLike[str], content: str, *, durable: bool = False) -> Path:
    """Write ``content`` to ``path`` through a new temporary file in its folder, then rename.

    The temporary file is created with ``O_CREAT | O_EXCL`` under an unpredictable name,
    so it never opens an existing file or a symlink planted at a guessable
    ``<target>.tmp``; readers see the old file or the whole new one, never half of it.
    The new file keeps the old one's permission bits (a new file gets the umask's).

    Args:
        path: The target (its folder is created when missing).
        content: UTF-8 text.
        durable: fsync the file before the rename (state that must survive a crash).

    Returns:
        The target path.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    for _ in range(100):
        tmp = target.with_name(f".{target.name}.{secrets.token_hex(6)}.tmp")
        try:
            fd = os.open(tmp, flags, 0o666)  # the umask applies, as for any new file
            break
        except FileExistsError:
            continue
    else:  # pragma: no cover - 100 collisions of 48 random bits
        raise FileExistsError(f"{target.parent}: cannot create a temporary file")
    try:
        if hasattr(os, "fchmod"):
            with contextlib.suppress(OSError):  # no old file: keep the umask's bits
                os.fchmod(fd, os.stat(target).st_mode & 0o7777)
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(content)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return target
