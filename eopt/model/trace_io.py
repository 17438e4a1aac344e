"""Read and write traces: the dashboard layout (v1), the connector's raw CSVs, eopt's JSON.

Layouts read by :func:`read_traces` (detected from what the path holds):

``dashboard`` — energy-dashboard-for-kokkos trace, version 1. A folder with
    ``events.csv`` (``id,parent_id,name,category,start_ns,end_ns``; parent 0 = top level;
    ns since the UNIX epoch), ``power_samples.csv`` (``timestamp_ns,domain,device_id,
    power_watts``; one series per (domain, device_id); an ``energy_joules`` column of older
    files is ignored), and optionally ``metadata.json``. An MPI run is a folder of
    ``rank_<N>/`` folders, one trace each. eopt's Kokkos connector leaves its binary
    ``events.records`` beside ``events.csv`` only when the program died before it could
    convert them (SIGKILL): the events are then read from the records.
``kokkos-raw`` — one run of the Kokkos Tools NVML connector: ``<run>-nvml-power.csv``
    (``time_epoch_ns,power_w``), ``<run>-nvml-regions.csv`` and ``<run>-nvml-kernels.csv``
    (``name,type,start_time_epoch_ns,end_time_epoch_ns,duration_ns``). Nesting is
    inferred from time containment. Name a run by its prefix (``folder/<run>``), or give
    a folder holding exactly one run.
``eopt-json`` — the JSON of ``eopt measure --json`` (``eopt.regions-report/1``).
``power-csv`` — any power CSV (``nvidia-smi --query-gpu=timestamp,power.draw
    --format=csv -lms 20``, a DCGM export …), with :class:`PowerCsvOptions` naming the
    columns and the time unit; events may come from a separate ``events.csv``.

:func:`write_dashboard` writes the dashboard layout, so eopt's recordings open in the
dashboard and in eopt alike. :func:`read_runs` reads a folder of many runs (a run set of
``eopt measure --repeat``, a folder of dashboard traces or of raw connector runs) in run
order.
"""

from __future__ import annotations

import csv
import dataclasses
import datetime as dt
import decimal
import io
import math
import os
import re
import struct
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from eopt.model.fileformats import (
    MAX_FILE_BYTES,
    Where,
    atomic_write_text,
    dumps_json,
    json_ready,
    parse_json,
)
from eopt.model.trace import (
    CATEGORIES,
    DOMAINS,
    NO_DEVICE,
    Event,
    EventTable,
    PowerSeries,
    Trace,
    TraceError,
    TraceWarning,
    check_plausible,
    nest_by_time,
)

__all__ = [
    "DASHBOARD_VERSION",
    "EVENT_BLOCK_BYTES",
    "PowerCsvOptions",
    "atomic_write_text",
    "dashboard_metadata",
    "detect_layout",
    "event_blocks",
    "read_event_table",
    "read_events",
    "read_power_samples",
    "read_runs",
    "read_trace",
    "read_traces",
    "write_dashboard",
]

DASHBOARD_VERSION = 1
EVENTS_HEADER = ("id", "parent_id", "name", "category", "start_ns", "end_ns")
POWER_HEADER = ("timestamp_ns", "domain", "device_id", "power_watts")
RAW_SUFFIXES = ("-nvml-power.csv", "-nvml-regions.csv", "-nvml-kernels.csv")
#: An MPI rank's folder inside a trace folder.
RANK_DIR = re.compile(r"^rank_(\d+)$")
#: The Kokkos connector's binary records (eopt/measure/kokkos_connector.c says the layout).
RECORDS_FILE = "events.records"
#: An events file may hold a few bytes that are not UTF-8 in its names (one in Latin-1):
#: read as U+FFFD, with a warning. At most this many, or one byte in this many; more, a
#: NUL byte, or a bad byte in the header means it is no text file.
_BAD_BYTES_MIN, _BAD_BYTES_PER = 16, 1000
_ESCAPED = re.compile("[\udc80-\udcff]+")
# Fields past this size are not a trace's (a binary or a wrong file): refuse, do not hang.
_MAX_FIELD = 1 << 20

_TIME_UNITS = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}


@dataclass(frozen=True)
class PowerCsvOptions:
    """How to read a power CSV of another tool.

    Attributes:
        time_column: Name of the time column; found automatically when None (``timestamp``,
            ``time``, ``time_s``, ``time_ns`` …).
        power_column: Name of the power column; found automatically when None (a column
            whose name contains ``power``).
        time_unit: ``s``, ``ms``, ``us``, ``ns``, or ``datetime`` (``2024/05/01
            12:00:00.123`` as nvidia-smi prints, or ISO 8601); ``auto`` guesses from the
            column's name and values.
        domain: The domain of the series (``GPU`` …).
        device_id: Its device index; a ``index``/``gpu`` column, when present, splits the
            file into one series per device instead.
        events: An optional ``events.csv`` (dashboard layout) with the run's events, on
            the same clock.
        power_unit: ``W``, ``mW`` or ``kW`` for bare numbers under a header that names no
            unit; None reads the unit from the header (``power_mW``, ``power (mW)``,
            ``power.draw [W]``, ``power_watts`` …) or from the values (``250.3 W``), and
            refuses a column whose unit cannot be known.
        tz: The IANA time zone (``America/New_York``, ``UTC``) of date-times written
            without an offset; None takes the local zone (``$TZ``), as nvidia-smi prints.
    """

    time_column: str | None = None
    power_column: str | None = None
    time_unit: str = "auto"
    domain: str = "GPU"
    device_id: int = 0
    events: str | None = None
    power_unit: str | None = None
    tz: str | None = None


# CSV helpers ------------------------------------------------------------------------------
def _read_raw(path: Path) -> bytes:
    """The bytes of a trace file, bounded in size."""
    try:
        if not (path.is_file() or path.is_fifo() or not path.exists() or path.is_dir()):
            raise TraceError(f"{path}: is a device or socket, not a trace file; name a file")
        with path.open("rb") as handle:
            raw = handle.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise TraceError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise TraceError(f"{path}: is a folder; expected a CSV file") from None
    except OSError as exc:
        raise TraceError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if len(raw) > MAX_FILE_BYTES:
        raise TraceError(f"{path}: larger than {MAX_FILE_BYTES // 1024**3} GiB; is it a trace?")
    return raw


def _open_text(path: Path, *, lenient: bool = False, raw: bytes | None = None) -> str:
    """The text of a trace file (``raw``: its bytes, already read), bounded in size;
    ``lenient`` reads a few bytes that are not UTF-8 as U+FFFD, warning where they are."""
    if raw is None:
        raw = _read_raw(path)
    try:
        return raw.decode("utf-8-sig")  # a BOM on the header is fine
    except UnicodeDecodeError as exc:
        text = _with_few_bad_bytes(raw, exc, path) if lenient else None
        if text is not None:
            return text
        kind = "JSON" if path.suffix.lower() == ".json" else "CSV"
        line = raw.count(b"\n", 0, exc.start) + 1
        raise TraceError(
            f"{path}:{line}: not UTF-8 text (byte {exc.start}); save it as UTF-8 {kind}"
        ) from None


def _with_few_bad_bytes(raw: bytes, first: UnicodeDecodeError, path: Path) -> str | None:
    """``raw`` decoded with its bytes that are not UTF-8 as U+FFFD, warning where they are;
    None when there are too many for a text file."""
    line = raw.count(b"\n", 0, first.start) + 1
    if line == 1 or b"\0" in raw:
        return None
    escaped = raw.decode("utf-8-sig", "surrogateescape")
    bad = sum(len(m.group()) for m in _ESCAPED.finditer(escaped))
    if bad > max(_BAD_BYTES_MIN, len(raw) // _BAD_BYTES_PER):
        return None
    warnings.warn(
        f"{path}:{line}: {bad} byte(s) that are not UTF-8 (the first at byte {first.start}); "
        "read as U+FFFD (\ufffd) in the names they are in",
        TraceWarning,
        stacklevel=4,
    )
    return raw.decode("utf-8-sig", "replace")


def _rows(
    path: Path, required: Sequence[str], *, lenient: bool = False
) -> Iterator[tuple[int, dict[str, str]]]:
    """(line number, row) of a CSV with a header holding every ``required`` column."""
    text = _open_text(path, lenient=lenient)
    csv.field_size_limit(_MAX_FIELD)
    reader = csv.reader(io.StringIO(text))
    try:
        header = next(reader)
    except StopIteration:
        raise TraceError(f"{path}: empty file; expected a header {','.join(required)}") from None
    except csv.Error as exc:
        raise TraceError(f"{path}:1: not a CSV header ({exc})") from None
    header = [h.strip() for h in header]
    missing = [c for c in required if c not in header]
    if missing:
        raise TraceError(
            f"{path}:1: missing column(s) {', '.join(missing)}; the header must hold "
            f"{','.join(required)} (found {','.join(header)[:200]})"
        )
    try:
        for row in reader:
            lineno = reader.line_num
            if not row or all(not c.strip() for c in row):
                continue
            if len(row) < len(header):
                raise TraceError(
                    f"{path}:{lineno}: {len(row)} fields where the header has {len(header)} "
                    "(a line cut short?)"
                )
            yield lineno, dict(zip(header, (c.strip() for c in row), strict=False))
    except csv.Error as exc:
        raise TraceError(f"{path}:{reader.line_num}: bad CSV ({exc})") from None


#: Integers of a trace (ids, nanosecond times) are 64-bit.
_INT64 = 2**63


def _int(value: str, where: str, column: str) -> int:
    try:
        number = int(value)
    except ValueError:
        pass
    else:
        if not -_INT64 <= number < _INT64:
            raise TraceError(
                f"{where}: {column} is {value}, beyond a 64-bit integer; a nanosecond time "
                "is at most 9.2e18 (the year 2262)"
            )
        return number
    try:
        number = float(value)
    except ValueError:
        raise TraceError(f"{where}: {column} is {value!r}; expected an integer") from None
    if not math.isfinite(number) or number != int(number):
        raise TraceError(f"{where}: {column} is {value!r}; expected an integer")
    return _int(str(int(number)), where, column)


def _float(value: str, where: str, column: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise TraceError(f"{where}: {column} is {value!r}; expected a number") from None
    if not math.isfinite(number):
        raise TraceError(f"{where}: {column} is {value!r}; expected a finite number")
    return number


def _scaled(text: str, value: float, scale: int) -> int:
    """``value`` (parsed from ``text``) times ``scale``, rounded to an integer exactly.

    Epoch times in seconds (``1700000000.25``) times 1e9 pass 2**53, where a float's
    product is off by hundreds of nanoseconds: those are scaled in decimal.
    """
    product = value * scale
    if abs(product) < 2**53:
        return round(product)
    return int((decimal.Decimal(text.strip()) * scale).to_integral_value())


def _append_sample(
    series: tuple[list[int], list[float], list[int]],
    t: int,
    p: float,
    lineno: int,
    where: str,
    what: str,
) -> None:
    """Add one sample to (times, powers, lines); refuse one that is not after the last."""
    times, powers, lines = series
    if not -_INT64 <= t < _INT64:
        raise TraceError(
            f"{where}: {what} is beyond a 64-bit nanosecond time (after the year 2262); "
            "check the time unit (--time-unit)"
        )
    if times and t <= times[-1]:
        order = "duplicates" if t == times[-1] else "is earlier than"
        raise TraceError(
            f"{where}: {what} {order} the one on line {lines[-1]}; samples of a series must be "
            "sorted by time without duplicates"
        )
    times.append(t)
    powers.append(p)
    lines.append(lineno)


def _series(
    domain: str, device_id: int, samples: tuple[list[int], list[float], list[int]], path: Path
) -> PowerSeries:
    """One power series from (times, powers, lines), its readings checked for plausibility."""
    times, powers, lines = samples
    series = PowerSeries(
        domain,
        device_id,
        np.array(times, dtype=np.int64),
        np.array(powers, dtype=np.float64),
        str(path),
    )
    check_plausible(series, lines)
    return series


# Plain CSV, column by column --------------------------------------------------------------
_INT64_MAX = np.uint64(2**63 - 1)
#: Rows of a column parsed at once.
_ROWS = 1 << 18
_ZEROS = np.uint64(0x3030303030303030)
_SIXES = np.uint64(0x0606060606060606)
_NIBBLES = np.uint64(0xF0F0F0F0F0F0F0F0)
#: Digits a decimal may have and still be read exactly as a double (below 2**53).
_EXACT_DIGITS = 15


#: Bytes scanned at once: bounds the temporaries of a file of gigabytes.
_SCAN = 1 << 24


def _positions(buf: np.ndarray, byte: int, start: int, dtype: Any) -> np.ndarray:
    """Offsets of every ``byte`` in ``buf`` from ``start`` on, in order."""
    parts = [
        (np.flatnonzero(buf[a : a + _SCAN] == byte) + a).astype(dtype)
        for a in range(start, buf.size, _SCAN)
    ]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)


class _PlainCsv:
    """The fields of a *plain* CSV, located with whole-array operations.

    Plain: UTF-8, no quote characters, every line (the header's included) with the
    header's number of fields, no blank line. Its fields are then exactly what
    :mod:`csv` would split, so a column can be read without a Python object per field.
    Readers use it as a fast path and fall back to the line-by-line reader on anything
    else, so every message stays the one that reader gives.

    Attributes:
        header: The column names, stripped.
        rows: Number of data lines.
    """

    def __init__(
        self,
        buf: np.ndarray,
        header: list[str],
        line_starts: np.ndarray,
        commas: np.ndarray,
        line_ends: np.ndarray,
        padded: bool,
    ) -> None:
        self._buf = buf
        self.header = header
        self.rows = int(line_ends.size)
        self._line_starts = line_starts
        self._commas = commas
        self._line_ends = line_ends
        # Whether any field may start with a space (most files have none: no search).
        self._padded = padded

    @classmethod
    def parse(cls, raw: bytes) -> _PlainCsv | None:
        """The fields of ``raw``; None when it is not plain."""
        if raw.startswith(b"\xef\xbb\xbf"):
            raw = raw[3:]
        head_end = raw.find(b"\n")
        if head_end < 0 or b'"' in raw:
            return None
        buf = np.frombuffer(raw, dtype=np.uint8)
        if any(np.any(buf[a : a + _SCAN] >= 0x80) for a in range(0, buf.size, _SCAN)):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError:
                return None
        header = [h.strip() for h in raw[:head_end].decode("utf-8").split(",")]
        if len(set(header)) != len(header) or not all(header):
            return None
        body = head_end + 1
        offset = np.int32 if buf.size < 2**31 else np.int64
        line_ends = _positions(buf, 0x0A, body, offset)
        if raw[-1:] != b"\n" and len(raw) > body:
            line_ends = np.append(line_ends, np.array(len(raw), dtype=offset))
        n, width = line_ends.size, len(header) - 1
        commas = _positions(buf, 0x2C, body, offset)
        if commas.size != n * width:
            return None
        line_starts = np.empty(n, dtype=offset)
        if n:
            line_starts[0] = body
            line_starts[1:] = line_ends[:-1] + 1
        commas = commas.reshape(n, width)
        # Sorted commas, as many as the lines need: each line holds its own share exactly
        # when its first comma is past its start and its last before its end.
        if (
            width
            and n
            and (np.any(commas[:, 0] < line_starts) or np.any(commas[:, -1] >= line_ends))
        ):
            return None
        padded = raw.find(b", ") >= 0 or raw.find(b"\n ") >= 0
        return cls(buf, header, line_starts, commas, line_ends, padded)

    def has(self, columns: Sequence[str]) -> bool:
        """Whether every one of ``columns`` is in the header."""
        return all(c in self.header for c in columns)

    def _field(self, column: str) -> tuple[np.ndarray, np.ndarray]:
        """(start, end) byte offsets of one column's fields."""
        j, width = self.header.index(column), len(self.header) - 1
        start = self._line_starts if j == 0 else self._commas[:, j - 1] + 1
        end = self._line_ends if j == width else self._commas[:, j]
        return start, end

    def span(self, column: str) -> tuple[np.ndarray, np.ndarray]:
        """(start, end) byte offsets of one column's fields, leading spaces skipped (as
        ``csv``'s ``skipinitialspace`` and ``str.strip`` do)."""
        start, end = self._field(column)
        if not self._padded:
            return start, end
        start = start.copy()
        while True:
            space = (start < end) & (self._buf[np.minimum(start, self._buf.size - 1)] == 0x20)
            if not space.any():
                return start, end
            start += space

    def text(self, row: int, field: tuple[np.ndarray, np.ndarray]) -> str:
        """One field's text."""
        return self._buf[int(field[0][row]) : int(field[1][row])].tobytes().decode("utf-8")

    def ends_with(self, field: tuple[np.ndarray, np.ndarray], suffix: bytes) -> bool:
        """Whether every field ends with ``suffix``."""
        start, end = field
        if np.any(end - start < len(suffix)):
            return False
        return all(np.all(self._buf[end - len(suffix) + i] == b) for i, b in enumerate(suffix))

    def _groups(
        self, column: str | tuple[np.ndarray, np.ndarray]
    ) -> Iterator[tuple[np.ndarray, np.ndarray, int]]:
        """(rows, field starts, length) for each length the column's fields have, a
        bounded number of rows at a time (so are the temporaries of a large file)."""
        start, end = self.span(column) if isinstance(column, str) else column
        length = end - start
        sizes = np.flatnonzero(np.bincount(length)) if length.size else length
        for size in sizes.tolist():
            every = np.arange(length.size) if sizes.size == 1 else np.flatnonzero(length == size)
            for a in range(0, every.size, _ROWS):
                rows = every[a : a + _ROWS]
                yield rows, start[rows], size

    def _aligned(self, q: np.ndarray) -> np.ndarray:
        """The aligned 8-byte words at indices ``q`` (zeros past the end)."""
        buf = self._buf
        words = np.frombuffer(buf.data, dtype="<u8", count=buf.size // 8)
        inside = q < words.size
        if words.size and inside.all():
            return words[q]
        rest = buf[words.size * 8 :].tobytes()
        partial = np.frombuffer(rest + bytes(8 - len(rest)), dtype="<u8")[0]
        near = words[np.minimum(q, words.size - 1)] if words.size else np.zeros(q.size, "<u8")
        return np.where(inside, near, np.where(q == words.size, partial, np.uint64(0)))

    def _loads(self, at: np.ndarray, count: int) -> list[np.ndarray]:
        """The 8 bytes from each offset, from offset + 8, … (``count`` of them), each as
        one little-endian uint64 per offset (zeros past the end)."""
        q, r = at >> 3, (at & 7).astype(np.uint64)
        aligned = [self._aligned(q + i) for i in range(count + 1)]
        # Two aligned words per load, shifted together; a shift of 64 is made of two of
        # 32, so an aligned offset takes nothing from the next word.
        low, half = np.uint64(8) * r, np.uint64(32) - np.uint64(4) * r
        return [(aligned[i] >> low) | ((aligned[i + 1] << half) << half) for i in range(count)]

    @staticmethod
    def _masked(word: np.ndarray, size: int) -> np.ndarray:
        """The first ``size`` (1 to 8) bytes of each word, the rest zero."""
        return word if size == 8 else word & np.uint64((1 << (8 * size)) - 1)

    @staticmethod
    def _eight_digits(word: np.ndarray, size: int) -> np.ndarray | None:
        """The first ``size`` (1 to 8) bytes of each word, decimal digits, as integers;
        None when a byte is not a digit."""
        if size < 8:  # the bytes past the field read as leading zeros
            mask = np.uint64((1 << (8 * size)) - 1)
            word = (word & mask) | (_ZEROS & ~mask)
        # A digit byte is 0x30-0x39: high nibble 3, and adding 6 keeps it there.
        if np.any(word & _NIBBLES != _ZEROS) or np.any((word + _SIXES) & _NIBBLES != _ZEROS):
            return None
        x = word - _ZEROS
        if size < 8:
            x = x << np.uint64(8 * (8 - size))
        # Pairs, quads and octets of digits combine in place (first digit lowest byte).
        x = (x * np.uint64(10) + (x >> np.uint64(8))) & np.uint64(0x00FF00FF00FF00FF)
        x = (x * np.uint64(100) + (x >> np.uint64(16))) & np.uint64(0x0000FFFF0000FFFF)
        return (x * np.uint64(10000) + (x >> np.uint64(32))) & np.uint64(0xFFFFFFFF)

    def integers(self, column: str | tuple[np.ndarray, np.ndarray]) -> np.ndarray | None:
        """A column of unsigned decimal integers below 2**63 (int64); None when any
        field is not one (a sign, a space, a decimal point, empty, too large)."""
        out = np.zeros(self.rows, dtype=np.uint64)
        for rows, start, size in self._groups(column):
            if size == 0 or size > 19:
                return None
            value = np.zeros(rows.size, dtype=np.uint64)
            for k, word in enumerate(self._loads(start, -(-size // 8))):
                chunk = min(8, size - 8 * k)
                part = self._eight_digits(word, chunk)
                if part is None:
                    return None
                value = value * np.uint64(10**chunk) + part
            out[rows] = value
        if np.any(out > _INT64_MAX):
            return None
        return out.astype(np.int64)

    def decimals(self, column: str | tuple[np.ndarray, np.ndarray]) -> np.ndarray | None:
        """A column of unsigned decimals of at most 15 digits (``230.5``, ``12``, ``.5``)
        as float64, each the double ``float()`` gives; None when any field is not one."""
        out = np.zeros(self.rows, dtype=np.float64)
        for rows, start, size in self._groups(column):
            block = self._buf[start[:, None] + np.arange(size)]
            dots = block == 0x2E
            n_dots = dots.sum(axis=1)
            digits = block - np.uint8(0x30)
            if size == 0 or np.any(n_dots > 1) or np.any((digits > 9) & ~dots):
                return None
            if size - int(n_dots.min()) > _EXACT_DIGITS or np.any(size - n_dots < 1):
                return None
            mantissa = np.zeros(rows.size, dtype=np.uint64)
            for p in range(size):
                step = mantissa * np.uint64(10) + digits[:, p]
                mantissa = np.where(dots[:, p], mantissa, step)
            after = np.where(n_dots > 0, size - 1 - np.argmax(dots, axis=1), 0)
            # An integer below 2**53 over an exact power of ten: one correctly rounded
            # division, the double nearest the decimal, as float() reads it.
            out[rows] = mantissa.astype(np.float64) / 10.0**after
        return out

    def datetimes(self, column: str) -> np.ndarray | None:
        """A column of date-times ``2024/05/01 12:00:00.123`` (or ``-`` and ``T``; no
        fraction, or 3 or 6 digits) as µs since 1970 of the same wall clock read as UTC;
        None when any field is not one, or not a valid date and time."""
        out = np.zeros(self.rows, dtype=np.int64)
        for rows, start, size in self._groups(column):
            if size not in (19, 23, 26):
                return None

            def at(k: int, start: np.ndarray = start) -> np.ndarray:
                return self._buf[start + k]

            def number(k: int, digits: int, start: np.ndarray = start) -> np.ndarray | None:
                part = self._eight_digits(self._loads(start + k, 1)[0], digits)
                return None if part is None else part.astype(np.int64)

            date_sep = at(4)
            if not (np.all(np.isin(date_sep, (0x2D, 0x2F))) and np.all(at(7) == date_sep)):
                return None
            if not (np.all(np.isin(at(10), (0x20, 0x54))) and np.all(at(13) == 0x3A)):
                return None
            if not np.all(at(16) == 0x3A) or (size > 19 and not np.all(at(19) == 0x2E)):
                return None
            parts = [number(k, n) for k, n in ((0, 4), (5, 2), (8, 2), (11, 2), (14, 2), (17, 2))]
            fraction = number(20, size - 20) if size > 19 else np.zeros(rows.size, np.int64)
            if any(p is None for p in parts) or fraction is None:
                return None
            year, month, day, hour, minute, second = parts  # type: ignore[misc]
            leap = (year % 4 == 0) & ((year % 100 != 0) | (year % 400 == 0))
            month_days = np.array([31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31])
            valid = (month >= 1) & (month <= 12) & (day >= 1) & (year >= 1)
            valid &= day <= month_days[np.clip(month - 1, 0, 11)] + ((month == 2) & leap)
            valid &= (hour < 24) & (minute < 60) & (second < 60)
            if not valid.all():
                return None
            # Days since 1970-01-01 of the proleptic Gregorian date (H. Hinnant's rule).
            y = year - (month <= 2)
            era = y // 400
            yoe = y - era * 400
            doy = (153 * (month + np.where(month > 2, -3, 9)) + 2) // 5 + day - 1
            days = era * 146097 + yoe * 365 + yoe // 4 - yoe // 100 + doy - 719468
            seconds = days * 86400 + hour * 3600 + minute * 60 + second
            out[rows] = seconds * 1_000_000 + fraction * 10 ** (6 - max(size - 20, 0))
        return out

    def strings(self, column: str) -> tuple[np.ndarray, list[str]] | None:
        """A text column as (code per row, distinct values); None when a value has
        surrounding white space (which the line-by-line reader strips)."""
        codes = np.zeros(self.rows, dtype=np.int64)
        known: dict[str, int] = {}
        for rows, start, size in self._groups(column):
            if size == 0:
                codes[rows] = known.setdefault("", len(known))
                continue
            loads = self._loads(start, -(-size // 8))
            words = [self._masked(w, min(8, size - 8 * k)) for k, w in enumerate(loads)]
            key = words[0].copy()
            for word in words[1:]:
                key = (key * np.uint64(0x100000001B3)) ^ word
            _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
            inverse = inverse.reshape(-1)
            # A key is a hash: every field must equal its key's first field byte for byte.
            if any(np.any(word != word[first][inverse]) for word in words):
                return None
            raw = self._buf
            found = [
                known.setdefault(raw[a : a + size].tobytes().decode("utf-8"), len(known))
                for a in start[first].tolist()
            ]
            codes[rows] = np.array(found, dtype=np.int64)[inverse]
        values = list(known)
        if any(v != v.strip() for v in values):
            return None
        return codes, values


# Dashboard layout -------------------------------------------------------------------------
def read_events(path: Path) -> list[Event]:
    """The events of an ``events.csv`` (dashboard layout); extra columns are ignored.

    A few bytes that are not UTF-8 are read as U+FFFD, with a warning naming the line.
    When the Kokkos connector's ``events.records`` lies beside the file and holds more
    events (the program was killed before the connector wrote ``events.csv``), the events
    come from the records, with a warning saying so.
    """
    return list(read_event_table(path))


def read_event_table(path: Path) -> EventTable:
    """:func:`read_events` column by column, for files of millions of events.

    A plain file (no quotes, no padding, no blank lines, decimal integers) is read with
    whole-array operations; any other, and any file with a fault, goes through the
    line-by-line reader, which accepts the same files and names the line at fault.
    """
    records = path.with_name(RECORDS_FILE)
    if records.is_file():
        recovered = _recover_records(records, path)
        if recovered is not None:
            return EventTable.from_events(recovered)
    table = _event_columns(_read_raw(path), path)
    if table is not None:
        return table
    return EventTable.from_events(_read_events_csv(path))


#: Bytes of an ``events.csv`` that :func:`event_blocks` reads at once (about 34 000
#: events of a kernel trace): larger blocks are no faster, and take more memory.
EVENT_BLOCK_BYTES = 1 << 21


def event_blocks(path: Path, block_bytes: int = EVENT_BLOCK_BYTES) -> Iterator[EventTable | None]:
    """The events of an ``events.csv`` a block of whole lines at a time, in file order.

    For files too large to hold at once: only one block (about ``block_bytes`` of the
    file) is in memory. Each block is an :class:`EventTable` with its own names and
    categories (``first_line`` its first line). A block that is not plain (see
    :func:`read_event_table`) comes as None: the caller then reads the whole file with
    :func:`read_event_table`, which accepts it or names the line at fault.

    Args:
        path: The ``events.csv``.
        block_bytes: About how many bytes a block holds.
    """
    try:
        handle = path.open("rb")
    except OSError:
        yield None
        return
    with handle:
        header = handle.readline()
        if not header.endswith(b"\n"):
            yield None
            return
        rest, line = b"", 2
        while True:
            data = handle.read(block_bytes)
            if data:
                data = rest + data
                cut = data.rfind(b"\n") + 1
                if cut == 0:
                    rest = data
                    continue
                block, rest = data[:cut], data[cut:]
            elif rest:
                block, rest = rest, b""
            else:
                return
            del data
            table = _event_columns(header + block, path)
            if table is not None:
                table.first_line = line
                line += len(table)
            yield table


def _event_columns(raw: bytes, path: Path) -> EventTable | None:
    """The events of a plain ``events.csv``; None when it is not plain or not valid."""
    csv_cols = _PlainCsv.parse(raw)
    if csv_cols is None or not csv_cols.has(EVENTS_HEADER):
        return None
    ints = [csv_cols.integers(c) for c in ("id", "parent_id", "start_ns", "end_ns")]
    names = csv_cols.strings("name")
    categories = csv_cols.strings("category")
    if any(v is None for v in ints) or names is None or categories is None:
        return None
    ids, parents, starts, ends = ints
    cat_codes, cat_values = _recoded(*categories, str.upper)
    if not all(cat_values):
        return None  # the line-by-line reader names the line
    devices = None
    if "device_id" in csv_cols.header:
        device_field = csv_cols.strings("device_id")
        if device_field is None:
            return None
        codes, values = device_field
        try:
            known = [_int(v, str(path), "device_id") if v else NO_DEVICE for v in values]
        except TraceError:
            return None
        devices = np.array(known, dtype=np.int64)[codes] if values else codes
    return EventTable(
        ids,
        parents,
        names[0],
        names[1],
        cat_codes,
        cat_values,
        starts,
        ends,
        device_ids=devices,
        first_line=2,
        path=str(path),
    )


def _recoded(codes: np.ndarray, values: list[str], how: Any) -> tuple[np.ndarray, list[str]]:
    """Codes and values after mapping each value by ``how`` (two may become one)."""
    merged: dict[str, int] = {}
    remap = np.array([merged.setdefault(how(v), len(merged)) for v in values], dtype=np.int64)
    return (remap[codes] if values else codes), list(merged)


def _read_events_csv(path: Path) -> list[Event]:
    events = []
    for lineno, row in _rows(path, EVENTS_HEADER, lenient=True):
        where = f"{path}:{lineno}"
        category = row["category"].upper()
        if not category:
            raise TraceError(f"{where}: empty category; use one of {', '.join(CATEGORIES)}")
        events.append(
            Event(
                id=_int(row["id"], where, "id"),
                parent_id=_int(row["parent_id"], where, "parent_id"),
                name=row["name"],
                category=category,
                start_ns=_int(row["start_ns"], where, "start_ns"),
                end_ns=_int(row["end_ns"], where, "end_ns"),
                where=where,
                device_id=(
                    _int(row["device_id"], where, "device_id") if row.get("device_id") else None
                ),
            )
        )
    return events


# The Kokkos connector's records -----------------------------------------------------------
#: record_t of the connector: tag (id in bits 0-55, category in 56-59, kind in 60-63),
#: parent id, start and end (ns), name number, Kokkos device id.
_RECORD = np.dtype(
    [
        ("tag", "<u8"),
        ("parent", "<u8"),
        ("start", "<u8"),
        ("end", "<u8"),
        ("name", "<u4"),
        ("device", "<u4"),
    ]
)
_CONNECTOR_CATEGORIES = (*CATEGORIES, "FENCE")
_BLOCK = struct.Struct("<IIIIQII")
_BLOCK_MAGIC, _BLOCK_RECORDS, _BLOCK_NAME, _BLOCK_STACK = 0x424B4F45, 1, 2, 3
_KIND_CLOSED, _KIND_OPEN = 1, 3


@dataclass(frozen=True)
class _Records:
    """What a records file holds: closed events in the order they closed, then the ones
    still open at the last stack written (innermost first), ending at ``last_ns``."""

    closed: np.ndarray
    open: np.ndarray
    names: dict[int, str]
    last_ns: int


def _parse_records(path: Path) -> _Records:
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise TraceError(f"{path}: larger than {MAX_FILE_BYTES // 1024**3} GiB")
        raw = path.read_bytes()
    except OSError as exc:
        raise TraceError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if len(raw) < 64 or raw[:8] != b"EOPTKKR1":
        raise TraceError(f"{path}: not a records file of eopt's Kokkos connector")
    version, record_bytes, header_bytes, first = struct.unpack_from("<4I", raw, 8)
    if version != 1 or record_bytes != _RECORD.itemsize or header_bytes != _BLOCK.size:
        raise TraceError(
            f"{path}: records of another connector version ({version}); read them with the "
            "eopt that recorded them, or upgrade eopt"
        )
    names: dict[int, str] = {}
    closed: list[np.ndarray] = []
    stacks: dict[int, tuple[int, np.ndarray]] = {}
    off = first
    while off + _BLOCK.size <= len(raw):
        magic, kind, size, thread, value, count, _ = _BLOCK.unpack_from(raw, off)
        if magic != _BLOCK_MAGIC or size < _BLOCK.size or off + size > len(raw):
            break  # the end, or a block the kill cut short
        body, room = off + _BLOCK.size, size - _BLOCK.size
        if kind == _BLOCK_NAME and value <= room:
            names[count] = raw[body : body + value].decode("utf-8", "replace")
        elif kind in (_BLOCK_RECORDS, _BLOCK_STACK) and count * _RECORD.itemsize <= room:
            block = np.frombuffer(raw, dtype=_RECORD, count=count, offset=body)
            if kind == _BLOCK_RECORDS:
                closed.append(block)
            else:
                stacks[thread] = (value, block)
        off += size
    done = np.concatenate(closed) if closed else np.empty(0, _RECORD)
    done = done[(done["tag"] >> np.uint64(60)) == _KIND_CLOSED]
    still = [b[::-1] for _, b in stacks.values()]
    opened = np.concatenate(still) if still else np.empty(0, _RECORD)
    opened = opened[(opened["tag"] >> np.uint64(60)) == _KIND_OPEN]
    # an open event of a stale stack that closed since is the closed one
    ids = done["tag"] & np.uint64((1 << 56) - 1)
    opened = opened[~np.isin(opened["tag"] & np.uint64((1 << 56) - 1), ids)]
    times = [int(done["end"].max()) if done.size else 0]
    times += [t for t, _ in stacks.values()] + [int(opened["start"].max()) if opened.size else 0]
    return _Records(done, opened, names, max(times))


def _recover_records(records: Path, csv_path: Path) -> list[Event] | None:
    """The events of the connector's records, when they hold more than ``csv_path``."""
    found = _parse_records(records)
    events: list[Event] = []
    seen: set[int] = set()
    for kind, block in (("record", found.closed), ("open event", found.open)):
        for i, (tag, parent, start, end, name, device) in enumerate(block.tolist()):
            event_id, category = tag & ((1 << 56) - 1), (tag >> 56) & 15
            if category >= len(_CONNECTOR_CATEGORIES) or event_id in seen:
                continue
            seen.add(event_id)
            events.append(
                Event(
                    id=event_id,
                    parent_id=parent,
                    name=found.names.get(name, ""),
                    category=_CONNECTOR_CATEGORIES[category],
                    start_ns=start,
                    end_ns=end if kind == "record" else max(found.last_ns, start),
                    where=f"{records}: {kind} {i + 1}",
                    device_id=device,
                )
            )
    try:
        written = len(_read_events_csv(csv_path)) if csv_path.exists() else 0
    except TraceError:
        written = 0
    if len(events) <= written:
        return None
    # an event whose parent closed in the last moments, unrecorded, becomes top-level
    orphans = 0
    for i, e in enumerate(events):
        if e.parent_id and e.parent_id not in seen:
            events[i] = dataclasses.replace(e, parent_id=0)
            orphans += 1
    warnings.warn(
        f"{records}: the program ended before the Kokkos connector wrote {csv_path.name} "
        f"(killed by SIGKILL?); {len(events)} events read from its records, "
        f"{len(found.open)} of them still open and ended at the last time recorded"
        + (f", {orphans} whose parent was lost made top-level" if orphans else ""),
        TraceWarning,
        stacklevel=3,
    )
    return events


def read_power_samples(path: Path) -> list[PowerSeries]:
    """The power series of a ``power_samples.csv`` (dashboard layout), GPUs first.

    Raises:
        TraceError: naming the line at fault.
    """
    return _read_power_samples(path)


def _read_power_samples(path: Path) -> list[PowerSeries]:
    fast = _power_columns(_read_raw(path), path)
    if fast is not None:
        return fast
    data: dict[tuple[str, int], tuple[list[int], list[float], list[int]]] = {}
    for lineno, row in _rows(path, POWER_HEADER):
        where = f"{path}:{lineno}"
        domain = row["domain"].upper()
        if not domain:
            raise TraceError(f"{where}: empty domain; use one of {', '.join(DOMAINS)}")
        key = (domain, _int(row["device_id"], where, "device_id"))
        t = _int(row["timestamp_ns"], where, "timestamp_ns")
        try:
            p = float(row["power_watts"])
        except ValueError:
            raise TraceError(
                f"{where}: power_watts is {row['power_watts']!r}; expected a number of watts"
            ) from None
        if not math.isfinite(p):
            raise TraceError(
                f"{where}: power_watts is {row['power_watts']!r}; power must be a finite "
                "number of watts"
            )
        _append_sample(
            data.setdefault(key, ([], [], [])),
            t,
            p,
            lineno,
            where,
            f"timestamp {t} of {key[0]} {key[1]}",
        )
    # GPUs first, then the node's domains, each by device: the same order on every read.
    order = sorted(data, key=lambda k: (DOMAINS.index(k[0]) if k[0] in DOMAINS else 9, k))
    return [_series(d, i, data[d, i], path) for d, i in order]


def _power_columns(raw: bytes, path: Path) -> list[PowerSeries] | None:
    """The series of a plain ``power_samples.csv``; None when it is not plain, or holds a
    fault the line-by-line reader must name."""
    csv_cols = _PlainCsv.parse(raw)
    if csv_cols is None or not csv_cols.has(POWER_HEADER) or csv_cols.rows == 0:
        return None
    times = csv_cols.integers("timestamp_ns")
    devices = csv_cols.integers("device_id")
    power = csv_cols.decimals("power_watts")
    domains = csv_cols.strings("domain")
    if times is None or devices is None or power is None or domains is None:
        return None
    codes, names = _recoded(*domains, str.upper)
    if not all(names) or int(devices.max()) >= 2**31:
        return None
    key = codes * 2**31 + devices
    found: dict[tuple[str, int], PowerSeries] = {}
    for k in np.unique(key).tolist():
        rows = np.flatnonzero(key == k)
        if np.any(np.diff(times[rows]) <= 0):
            return None  # out of order: the line-by-line reader names the line
        domain, device = names[k // 2**31], k % 2**31
        found[domain, device] = _series(domain, device, (times[rows], power[rows], rows + 2), path)
    # GPUs first, then the node's domains, each by device: the same order on every read.
    order = sorted(found, key=lambda k: (DOMAINS.index(k[0]) if k[0] in DOMAINS else 9, k))
    return [found[k] for k in order]


def _load_json(path: Path) -> Any:
    """A JSON file of a trace, parsed safely: bounded, depth-checked, finite numbers."""
    return parse_json(_open_text(path), Where(str(path), error=TraceError))


def _read_metadata(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    data = _load_json(path)
    if not isinstance(data, dict):
        raise TraceError(f"{path}: expected a JSON object")
    return data


def _not_newer(path: Path, found: Any, family: str, supported: int) -> None:
    """Refuse a file written in a newer version of its format than this eopt reads.

    ``found`` is the file's version: a number, or a tag ``eopt.<family>/<n>``.
    """
    version: Any = found
    if isinstance(found, str) and found.startswith(family + "/"):
        version = found.rpartition("/")[2]
    try:
        number = int(version)
    except (TypeError, ValueError):
        return  # not a version: the format's own checks say what is wrong
    if number > supported:
        raise TraceError(
            f"{path}: written in version {number} of its format ({found}); this eopt reads "
            f"version {supported}: upgrade eopt (pip install -U eopt)"
        )


def dashboard_metadata(folder: Path) -> dict[str, Any]:
    """The ``metadata.json`` of a dashboard trace folder ({} without one).

    Raises:
        TraceError: when it is no JSON object, or of a newer version than eopt reads.
    """
    meta = _read_metadata(folder / "metadata.json")
    if meta.get("format") == "energy-dashboard-for-kokkos" or "version" in meta:
        _not_newer(folder / "metadata.json", meta.get("version"), "", DASHBOARD_VERSION)
    return meta


def _read_dashboard(folder: Path, rank: int | None = None) -> Trace:
    meta = dashboard_metadata(folder)
    events = read_event_table(folder / "events.csv")
    series = _read_power_samples(folder / "power_samples.csv")
    return Trace(events, tuple(series), meta, str(folder), rank)


def _read_merged_ranks(folder: Path, ranks: Sequence[tuple[int, Path]]) -> Trace:
    """Ranks that share the node's power (``power_samples.csv`` beside the rank folders):
    one trace with every rank's events, so overlapping ranks share the power."""
    series = _read_power_samples(folder / "power_samples.csv")
    events: list[Event] = []
    offset = 0
    for _, rank_dir in ranks:
        own = read_events(rank_dir / "events.csv") if (rank_dir / "events.csv").exists() else []
        for e in own:
            parent = e.parent_id + offset if e.parent_id else 0
            events.append(
                Event(e.id + offset, parent, e.name, e.category, e.start_ns, e.end_ns, e.where)
            )
        offset += max((e.id for e in own), default=0)
    meta = _read_metadata(folder / "metadata.json")
    meta["ranks"] = [r for r, _ in ranks]
    return Trace(tuple(events), tuple(series), meta, str(folder))


# The connector's raw CSVs -----------------------------------------------------------------
def _raw_runs(folder: Path) -> list[str]:
    """Run prefixes (``illyad-2495425``) of the raw files in a folder, sorted."""
    return sorted(
        p.name[: -len(RAW_SUFFIXES[0])] for p in folder.glob(f"*{RAW_SUFFIXES[0]}") if p.is_file()
    )


def _read_raw_run(folder: Path, run: str) -> Trace:
    power = folder / f"{run}{RAW_SUFFIXES[0]}"
    samples: tuple[list[int], list[float], list[int]] = ([], [], [])
    for lineno, row in _rows(power, ("time_epoch_ns", "power_w")):
        where = f"{power}:{lineno}"
        t = _int(row["time_epoch_ns"], where, "time_epoch_ns")
        p = _float(row["power_w"], where, "power_w")
        _append_sample(samples, t, p, lineno, where, f"timestamp {t}")
    items: list[tuple[str, str, int, int, str]] = []
    for suffix in RAW_SUFFIXES[1:]:
        path = folder / f"{run}{suffix}"
        if not path.exists():
            continue  # a run without kernels (or regions) recorded
        cols = ("name", "type", "start_time_epoch_ns", "end_time_epoch_ns")
        for lineno, row in _rows(path, cols):
            where = f"{path}:{lineno}"
            start = _int(row["start_time_epoch_ns"], where, "start_time_epoch_ns")
            end = _int(row["end_time_epoch_ns"], where, "end_time_epoch_ns")
            if end < start:
                raise TraceError(
                    f"{where}: {row['name']!r} ends ({end} ns) before it starts ({start} ns)"
                )
            items.append((row["name"], row["type"].upper(), start, end, where))
    series = _series("GPU", 0, samples, power)
    meta = {"layout": "kokkos-raw", "run": run}
    return Trace(tuple(nest_by_time(items)), (series,), meta, str(folder / run))


# eopt's measurement JSON ------------------------------------------------------------------
#: The schema families of eopt's measurement JSON (``eopt measure --json``), version 1.
_MEASUREMENT_FAMILIES = ("eopt.regions-report",)


def _read_eopt_json(path: Path) -> Trace:
    data = _load_json(path)
    if isinstance(data, dict) and isinstance(data.get("schema"), str):
        family, _, _ = data["schema"].partition("/")
        if family in _MEASUREMENT_FAMILIES:
            _not_newer(path, data["schema"], family, 1)
    if not isinstance(data, dict) or "samples" not in data:
        tag = data.get("schema") if isinstance(data, dict) else None
        raise TraceError(
            f"{path}: not an eopt measurement (schema {tag!r}); expected the JSON of "
            "`eopt measure --json` with its power samples"
        )
    samples = data["samples"]
    if not isinstance(samples, dict):
        raise TraceError(f"{path}: 'samples' must be an object with time_s and power_w lists")
    t, p = samples.get("time_s"), samples.get("power_w")
    if not isinstance(t, list) or not isinstance(p, list) or len(t) != len(p):
        raise TraceError(f"{path}: samples need equal-length 'time_s' and 'power_w' lists")
    origin = int(data.get("start_unix_ns", 0) or 0)
    try:
        points = [(float(a), float(b)) for a, b in zip(t, p, strict=True)]
    except (TypeError, ValueError):
        raise TraceError(f"{path}: samples must be numbers (s and W)") from None
    for i in range(1, len(points)):
        if points[i][0] < points[i - 1][0]:
            raise TraceError(
                f"{path}: samples.time_s[{i}] = {points[i][0]:g} s is before the sample before "
                f"it ({points[i - 1][0]:g} s); samples must be in time order"
            )
    gpu = int(data.get("gpu", 0) or 0)
    series = PowerSeries.from_seconds("GPU", gpu, points, origin, str(path))
    raw_events = data.get("events", [])
    if not isinstance(raw_events, list):
        raise TraceError(f"{path}: 'events' must be a list")
    items = []
    for i, e in enumerate(raw_events):
        where = f"{path}: events[{i}]"
        if not isinstance(e, dict):
            raise TraceError(f"{where}: expected an object")
        try:
            a = origin + round(float(e["start_s"]) * 1e9)
            b = origin + round(float(e["end_s"]) * 1e9)
        except (KeyError, TypeError, ValueError):
            raise TraceError(f"{where}: start_s and end_s must be numbers (s)") from None
        items.append((str(e.get("name", "region")), "USER_REGION", a, b, where))
    meta = {k: v for k, v in data.items() if k not in ("samples", "events", "regions")}
    return Trace(tuple(nest_by_time(items)), (series,), meta, str(path))


# Another tool's power CSV -----------------------------------------------------------------
_NUMBER = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([a-zA-Z]*)\s*$")


#: Power units by every spelling a header or a value uses, as W per unit.
_POWER_UNITS = {
    "w": 1.0,
    "watt": 1.0,
    "watts": 1.0,
    "mw": 1e-3,
    "milliwatt": 1e-3,
    "milliwatts": 1e-3,
    "kw": 1e3,
    "kilowatt": 1e3,
    "kilowatts": 1e3,
}
#: A unit at the end of a column name: ``[mW]``, ``(mW)``, ``_mW``, ``-mw``, `` mW``.
_HEADER_UNIT = re.compile(r"(?:[\[(]\s*([a-z]+)\s*[\])]|[\s_.\-]([a-z]+))\s*$")


def header_power_unit(column: str) -> str | None:
    """The power unit a column's name states (``mw``, ``w``, ``kw`` …), lower case; None if none.

    Example:
        >>> header_power_unit("power_draw_mw"), header_power_unit("power (mW)")
        ('mw', 'mw')
        >>> header_power_unit("power") is None
        True
    """
    m = _HEADER_UNIT.search(column.strip().lower())
    if m is None:
        return None
    unit = m.group(1) or m.group(2)
    return unit if unit in _POWER_UNITS else None


def _power_value(value: str, unit_in_header: str | None, where: str, column: str) -> float:
    m = _NUMBER.match(value)
    if m is None:
        raise TraceError(f"{where}: power {value!r} is not a number (W)")
    number = float(m.group(1))
    unit = (m.group(2) or unit_in_header or "").lower()
    if not unit:
        raise TraceError(
            f"{where}: power {value!r} in column {column!r} has no unit, and the header names "
            "none; pass --power-unit W (or mW, kW), or name it in the header (power_W, "
            "power [mW])"
        )
    scale = _POWER_UNITS.get(unit)
    if scale is None:
        raise TraceError(f"{where}: power unit {unit!r} is not W, mW or kW")
    if not math.isfinite(number):
        raise TraceError(f"{where}: power {value!r} is not finite")
    return number * scale


def _time_zone(name: str | None) -> tuple[dt.tzinfo | None, str]:
    """The zone of naive date-times (None: the local zone) and its name for messages."""
    if name is None:
        local = dt.datetime.now().astimezone().tzname() or "local"
        env = os.environ.get("TZ")
        return None, f"{env} ({local})" if env else f"local time ({local})"
    try:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError
    except ImportError:  # pragma: no cover - Python < 3.9
        raise TraceError("--tz needs Python's zoneinfo") from None
    try:
        return ZoneInfo(name), name
    except (ZoneInfoNotFoundError, ValueError):
        raise TraceError(
            f"time zone {name!r} is not known; name an IANA zone (UTC, Europe/Berlin, "
            "America/New_York)"
        ) from None


def _parse_datetime(value: str, where: str, zone: dt.tzinfo | None) -> int:
    text = value.strip().replace("/", "-")
    try:
        stamp = dt.datetime.fromisoformat(text)
    except ValueError:
        if _NUMBER.match(value) is not None:
            raise TraceError(
                f"{where}: time {value!r} is a number, not a date and time; give its unit "
                "with --time-unit s (or ms, us, ns)"
            ) from None
        raise TraceError(
            f"{where}: time {value!r} is not a date and time (2024/05/01 12:00:00.123)"
        ) from None
    if stamp.tzinfo is None and zone is not None:
        stamp = stamp.replace(tzinfo=zone)
    # A naive stamp is local time: nvidia-smi prints the host's wall clock ($TZ).
    return round(stamp.timestamp() * 1e6) * 1000


def _guess_column(header: Sequence[str], names: Sequence[str], contains: str) -> str | None:
    lowered = {h.lower(): h for h in header}
    for n in names:
        if n in lowered:
            return lowered[n]
    for h in header:
        if contains in h.lower():
            return h
    return None


def _read_power_csv(path: Path, opts: PowerCsvOptions) -> Trace:
    text = _open_text(path)
    reader = csv.reader(io.StringIO(text), skipinitialspace=True)
    try:
        header = [h.strip() for h in next(reader)]
    except StopIteration:
        raise TraceError(f"{path}: empty file") from None
    time_col = opts.time_column or _guess_column(
        header, ("timestamp_ns", "time_ns", "timestamp", "time_s", "time", "t"), "time"
    )
    power_col = opts.power_column or _guess_column(
        header, ("power_watts", "power_w", "power.draw [w]", "power.draw"), "power"
    )
    for col, what, flag in (
        (time_col, "time", "--time-column"),
        (power_col, "power", "--power-column"),
    ):
        if col is None or col not in header:
            raise TraceError(
                f"{path}:1: no {what} column {'' if col is None else repr(col) + ' '}in "
                f"{', '.join(header)[:200]}; name it with {flag}"
            )
    assert time_col is not None and power_col is not None
    power_unit = header_power_unit(power_col)
    if opts.power_unit is not None:
        given = opts.power_unit.strip().lower()
        if given not in _POWER_UNITS:
            raise TraceError(f"--power-unit {opts.power_unit!r}: use W, mW or kW")
        if power_unit is not None and _POWER_UNITS[power_unit] != _POWER_UNITS[given]:
            raise TraceError(
                f"{path}:1: column {power_col!r} says {power_unit}, but --power-unit says "
                f"{opts.power_unit}; drop one"
            )
        power_unit = given
    time_unit = opts.time_unit
    if time_unit == "auto":
        name = time_col.lower()
        time_unit = next((u for u in ("ns", "us", "ms") if name.endswith(u)), "")
        if not time_unit:
            time_unit = "s" if name.endswith("_s") or name in ("t", "time") else "datetime"
    if time_unit != "datetime" and time_unit not in _TIME_UNITS:
        raise TraceError(f"time unit {time_unit!r}: use s, ms, us, ns or datetime")
    device_col = _guess_column(header, ("device_id", "index", "gpu", "gpu_index"), "\0")
    zone, zone_name = _time_zone(opts.tz) if time_unit == "datetime" else (None, "")
    meta: dict[str, Any] = {"layout": "power-csv", "time_unit": time_unit}
    if zone_name:
        meta["time_zone"] = zone_name
    fast = None
    if time_unit == "datetime":
        fast = _smi_columns(path, time_col, power_col, power_unit, device_col, zone, opts)
    if fast is not None:
        events = read_event_table(Path(opts.events)) if opts.events else ()
        return Trace(events, fast, meta, str(path))
    ti, pi = header.index(time_col), header.index(power_col)
    di = header.index(device_col) if device_col else None
    data: dict[int, tuple[list[int], list[float], list[int]]] = {}
    for row in reader:
        lineno = reader.line_num
        if not row or all(not c.strip() for c in row):
            continue
        where = f"{path}:{lineno}"
        if len(row) <= max(ti, pi, di or 0):
            raise TraceError(f"{where}: too few fields ({len(row)})")
        if time_unit == "datetime":
            t = _parse_datetime(row[ti], where, zone)
        else:
            t = _scaled(row[ti], _float(row[ti], where, time_col), _TIME_UNITS[time_unit])
        p = _power_value(row[pi], power_unit, where, power_col)
        dev = _int(row[di].strip(), where, device_col or "") if di is not None else opts.device_id
        _append_sample(data.setdefault(dev, ([], [], [])), t, p, lineno, where, f"time {row[ti]!r}")
    series = tuple(
        _series(opts.domain.upper(), dev, samples, path) for dev, samples in sorted(data.items())
    )
    events = read_event_table(Path(opts.events)) if opts.events else ()
    return Trace(events, series, meta, str(path))


def _smi_columns(
    path: Path,
    time_col: str,
    power_col: str,
    header_unit: str | None,
    device_col: str | None,
    zone: dt.tzinfo | None,
    opts: PowerCsvOptions,
) -> tuple[PowerSeries, ...] | None:
    """The series of a plain power CSV with date-times (as nvidia-smi writes), read
    column-wise; None when it is not plain, or holds anything the line-by-line reader
    must read or name."""
    cols = _PlainCsv.parse(_read_raw(path))
    if cols is None or cols.rows == 0:
        return None
    wall_us = cols.datetimes(time_col)
    power_field = cols.span(power_col)
    if wall_us is None:
        return None
    # The unit the values carry (``250.30 W``), the same on every line, or the header's.
    first = cols.text(0, power_field)
    m = _NUMBER.match(first)
    if m is None:
        return None
    suffix = first[m.end(1) :].encode()
    if suffix != suffix.rstrip() or not cols.ends_with(power_field, suffix):
        return None
    unit = (m.group(2) or header_unit or "").lower()
    if unit not in _POWER_UNITS:
        return None
    number = cols.decimals((power_field[0], power_field[1] - len(suffix)))
    devices = cols.integers(device_col) if device_col else np.full(cols.rows, opts.device_id)
    if number is None or devices is None:
        return None
    # Wall-clock time to UTC: one offset, where both ends of a trace shorter than a day
    # have the same (no change of daylight saving time in between).
    ends = []
    for row in (0, cols.rows - 1):
        text = cols.text(row, cols.span(time_col))
        ends.append(_parse_datetime(text, f"{path}:{row + 2}", zone) - int(wall_us[row]) * 1000)
    if ends[0] != ends[1] or wall_us[-1] - wall_us[0] > 86_400 * 10**6:
        return None
    times = wall_us * 1000 + ends[0]
    power = number * _POWER_UNITS[unit]
    series = []
    for dev in np.unique(devices).tolist():
        rows = np.flatnonzero(devices == dev)
        if np.any(np.diff(times[rows]) <= 0):
            return None  # out of order: the line-by-line reader names the line
        samples = (times[rows], power[rows], rows + 2)
        series.append(_series(opts.domain.upper(), int(dev), samples, path))
    return tuple(series)


# Detection and entry points ---------------------------------------------------------------
def detect_layout(path: str | os.PathLike[str]) -> str:
    """``dashboard``, ``mpi``, ``kokkos-raw``, ``eopt-json`` or ``power-csv``.

    Raises:
        TraceError: naming the path and the layouts eopt reads.
    """
    p = Path(path)
    if p.is_dir():
        if any(RANK_DIR.match(c.name) and c.is_dir() for c in p.iterdir()):
            return "mpi"
        if any((p / f).exists() for f in ("events.csv", "power_samples.csv", RECORDS_FILE)):
            return "dashboard"
        runs = _raw_runs(p)
        if len(runs) == 1:
            return "kokkos-raw"
        if len(runs) > 1:
            raise TraceError(
                f"{p}: holds {len(runs)} runs ({runs[0]} …); name one run as "
                f"{p / runs[0]}, or compare the folder with `eopt compare`"
            )
        raise TraceError(
            f"{p}: no trace here; expected events.csv + power_samples.csv (dashboard layout), "
            "rank_<N>/ folders, or <run>-nvml-power.csv files"
        )
    if not p.exists():
        parent = p.parent
        if parent.is_dir() and (parent / f"{p.name}{RAW_SUFFIXES[0]}").exists():
            return "kokkos-raw"
        raise TraceError(f"{p}: no such file or folder")
    if p.suffix.lower() == ".json":
        return "eopt-json"
    if p.suffix.lower() in (".csv", ".txt", ".tsv"):
        return "power-csv"
    raise TraceError(
        f"{p}: not a trace eopt reads; give a trace folder, an eopt measurement .json or a "
        "power .csv"
    )


def read_traces(
    path: str | os.PathLike[str], csv_options: PowerCsvOptions | None = None
) -> list[Trace]:
    """The trace at ``path``: one, or one per MPI rank (ordered by rank).

    Raises:
        TraceError: naming the file, the line and the fix.
    """
    p = Path(path)
    layout = detect_layout(p)
    if layout == "dashboard":
        return [_read_dashboard(p)]
    if layout == "mpi":
        ranks = sorted(
            (int(m.group(1)), c)
            for c in p.iterdir()
            if c.is_dir() and (m := RANK_DIR.match(c.name))
        )
        if (p / "power_samples.csv").exists():
            return [_read_merged_ranks(p, ranks)]
        return [_read_dashboard(folder, rank) for rank, folder in ranks]
    if layout == "kokkos-raw":
        if p.is_dir():
            return [_read_raw_run(p, _raw_runs(p)[0])]
        return [_read_raw_run(p.parent, p.name)]
    if layout == "eopt-json":
        return [_read_eopt_json(p)]
    return [_read_power_csv(p, csv_options or PowerCsvOptions())]


def read_trace(path: str | os.PathLike[str], csv_options: PowerCsvOptions | None = None) -> Trace:
    """The single trace at ``path``.

    Raises:
        TraceError: also when the path holds one trace per MPI rank.
    """
    traces = read_traces(path, csv_options)
    if len(traces) != 1:
        raise TraceError(f"{path}: holds {len(traces)} ranks; read them with read_traces")
    return traces[0]


def read_runs(path: str | os.PathLike[str]) -> list[Trace]:
    """Every run in a folder of runs, in run order (by start time).

    A run set of ``eopt measure --repeat`` (``index.json`` + one trace folder per run),
    a folder of dashboard trace folders, a folder of the connector's raw runs, or a
    folder of eopt measurement JSON files.

    Raises:
        TraceError: when the folder holds no runs, naming what it looked for.
    """
    p = Path(path)
    if not p.is_dir():
        raise TraceError(f"{p}: not a folder of runs")
    index = p / "index.json"
    traces: list[Trace]
    if index.exists():
        data = _read_metadata(index)
        _not_newer(index, data.get("schema"), "eopt.runset", 1)
        runs = data.get("runs")
        if not isinstance(runs, list):
            raise TraceError(f"{index}: 'runs' must be a list of runs")
        if not runs:
            state = data.get("state", "recording")
            raise TraceError(
                f"{p}: the run set has no finished run yet ({state}); continue it with "
                f"`eopt measure --repeat N -o {p} --resume -- CMD`"
            )
        traces = []
        for i, r in enumerate(runs):
            if not isinstance(r, dict) or not isinstance(r.get("trace"), str):
                raise TraceError(f"{index}: runs[{i}] needs a 'trace' folder name")
            traces.extend(read_traces(p / r["trace"]))
    elif _raw_runs(p):
        traces = [_read_raw_run(p, run) for run in _raw_runs(p)]
    else:
        subdirs = sorted(c for c in p.iterdir() if c.is_dir() and (c / "events.csv").exists())
        jsons = sorted(c for c in p.glob("*.json") if c.is_file())
        if subdirs:
            traces = [_read_dashboard(c) for c in subdirs]
        elif jsons:
            traces = [_read_eopt_json(c) for c in jsons]
        else:
            raise TraceError(
                f"{p}: no runs found; expected index.json (a run set), trace folders with "
                "events.csv, <run>-nvml-power.csv files, or eopt measurement .json files"
            )
    return sorted(traces, key=lambda t: t.start_ns)


# Writing ----------------------------------------------------------------------------------
def write_dashboard(
    trace: Trace,
    folder: str | os.PathLike[str],
    metadata: Mapping[str, Any] | None = None,
    *,
    events: bool = True,
) -> Path:
    """Write ``trace`` in the dashboard layout (version 1) into ``folder``.

    Args:
        trace: The trace.
        folder: Where (created).
        metadata: Extra keys for ``metadata.json``.
        events: Also write ``events.csv`` (False: the power of an MPI run, beside the
            ranks' folders that hold their own events).

    Returns:
        The folder.
    """
    out = Path(folder)
    ev = io.StringIO()
    w = csv.writer(ev, lineterminator="\n")
    # device_id is an extra column, written only when a source recorded it (the Kokkos
    # connector); readers of version 1 key columns by name and ignore it.
    devices = any(e.device_id is not None for e in trace.events)
    w.writerow(EVENTS_HEADER + (("device_id",) if devices else ()))
    for e in sorted(trace.events, key=lambda e: e.id):
        row: list[Any] = [e.id, e.parent_id, e.name, e.category, e.start_ns, e.end_ns]
        if devices:
            row.append("" if e.device_id is None else e.device_id)
        w.writerow(row)
    pw = io.StringIO()
    w = csv.writer(pw, lineterminator="\n")
    w.writerow(POWER_HEADER)
    rows = [
        (int(t), s.domain, s.device_id, float(p))
        for s in trace.series
        for t, p in zip(s.times_ns, s.power_w, strict=True)
    ]
    rows.sort(key=lambda r: (r[0], r[1], r[2]))
    for t, d, i, p in rows:
        w.writerow([t, d, i, f"{p:.6f}"])
    meta = {"format": "energy-dashboard-for-kokkos", "version": DASHBOARD_VERSION}
    meta.update(trace.metadata)
    meta.update(metadata or {})
    if events:
        atomic_write_text(out / "events.csv", ev.getvalue())
    atomic_write_text(out / "power_samples.csv", pw.getvalue())
    text = dumps_json(json_ready(meta), str(out / "metadata.json"), indent=2, default=str)
    atomic_write_text(out / "metadata.json", text + "\n")
    return out
