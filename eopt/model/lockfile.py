"""Exclusive locks between eopt processes: ``flock`` on a lock file that names its holder.

Two eopt processes must not control one GPU at a time (one's restore would undo the
other's setting in the middle of a measurement), and two sweeps must not append to one
signature library. :class:`ProcessLock` takes an exclusive, non-blocking ``flock`` on a
lock file and writes the holder's PID, host, command line and start time into it, so the
process that is refused can say who holds it. The kernel drops a ``flock`` when its
process dies, however it dies, so a crashed run never leaves a stale lock behind; the
file itself is removed on release.

Example::

    with ProcessLock(Path("lib.jsonl.lock")):
        ...  # only this process writes lib.jsonl here

Assumptions:
    The lock file lives on a local file system (or one where ``flock`` works across the
    processes concerned, as NFS v4 emulates it).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shlex
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

__all__ = ["LockBusyError", "LockHolder", "ProcessLock", "command_line"]

_HOLDER_READS = 20  # a new holder writes its name right after locking: look a few times
_HOLDER_READ_PAUSE_S = 0.005


def command_line() -> str:
    """This process's command line, shell-quoted, with the program's base name."""
    argv = list(sys.argv) or ["python"]
    argv[0] = Path(argv[0]).name or "python"
    return shlex.join(argv)


@dataclass(frozen=True)
class LockHolder:
    """The process that holds a lock, as it wrote itself into the lock file.

    Attributes:
        pid: Its process id.
        host: Its host name.
        command: Its command line.
        since: When it took the lock (ISO 8601, UTC).
    """

    pid: int
    host: str
    command: str
    since: str

    def describe(self) -> str:
        """``pid 1234 (`eopt sweep …`, since 2026-01-01T10:00:00Z)``, with a foreign host."""
        where = "" if self.host == socket.gethostname() else f" on host {self.host}"
        return f"pid {self.pid}{where} (`{self.command}`, since {self.since})"


class LockBusyError(RuntimeError):
    """Another process holds the lock.

    Attributes:
        path: The lock file.
        holder: Who holds it; None when it had not written its name yet.
    """

    def __init__(self, path: Path, holder: LockHolder | None) -> None:
        self.path = path
        self.holder = holder
        who = holder.describe() if holder is not None else "an unidentified process"
        super().__init__(f"{path} is held by {who}")

    @property
    def who(self) -> str:
        """The holder in words, for messages."""
        return self.holder.describe() if self.holder is not None else "another process"


def _read_holder(fd: int) -> LockHolder | None:
    for attempt in range(_HOLDER_READS):
        try:
            raw = os.pread(fd, 65536, 0)
        except OSError:
            return None
        if raw:
            try:
                data = json.loads(raw.decode("utf-8"))
                return LockHolder(
                    int(data["pid"]), str(data["host"]), str(data["command"]), str(data["since"])
                )
            except (ValueError, KeyError, TypeError):
                pass  # half written: look again
        if attempt + 1 < _HOLDER_READS:
            time.sleep(_HOLDER_READ_PAUSE_S)
    return None


class ProcessLock:
    """An exclusive, non-blocking ``flock`` on ``path`` for this process.

    Args:
        path: The lock file (created, with its folder, when missing; removed on release).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        """Whether this object holds the lock."""
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock at once, or fail naming the holder.

        Raises:
            LockBusyError: when another process (or another ``ProcessLock`` of this one)
                holds it.
            OSError: when the lock file cannot be created or opened.
        """
        if self._fd is not None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    os.close(fd)
                    raise
                holder = _read_holder(fd)
                os.close(fd)
                raise LockBusyError(self.path, holder) from None
            # The holder before us removes the file on release; if it did so between our
            # open and our flock, we locked a file nobody else will ever open: start over.
            try:
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        record = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "command": command_line(),
            "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(record, allow_nan=False).encode("utf-8"), 0)
        self._fd = fd

    def release(self) -> None:
        """Drop the lock and remove the file (no-op when not held)."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        # Unlink while still holding the lock, so nobody locks a file that is going away
        # without noticing (acquire() checks the inode).
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def __enter__(self) -> ProcessLock:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()
