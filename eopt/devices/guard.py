"""Never leave a GPU changed: restore settings on exit, exceptions and signals.

:func:`restoring_on_exit` wraps any code that changes clocks or power limits. Before the
block runs it writes each NVML GPU's original state to a state file (JSON under
``$EOPT_STATE_DIR``, default ``~/.local/state/eopt/``); it restores the devices on normal
exit, on exceptions, on SIGINT / SIGTERM (its handlers restore, then hand the signal to
the handler that was installed before) and at interpreter exit, and removes the state file
once the restore succeeded. A run killed with SIGKILL cannot restore anything: its state
file stays behind, the next run warns about it, and ``eopt reset`` puts the GPUs back.

One controller per GPU: before saving anything the guard takes an exclusive lock per GPU
(``gpu-<UUID>.lock`` in the same directory, see :mod:`eopt.lockfile`) and holds it until
the GPU is restored or, with ``keep``, until the block ends. A second process that wants to
change the same GPU is refused with :class:`GpuInUseError`, naming the holder's PID and
command. Measure-only and simulated devices take no lock. The kernel drops the lock of a
process that dies, so a killed run leaves its state file but never a stale lock.

The first saved original state of a GPU wins: settings kept by ``eopt apply`` and then
changed again by another run still go back to the state found before the first change
(``eopt reset`` restores each GPU's oldest saved state).

Example::

    with restoring_on_exit(gpus):
        gpus[0].set_operating_point(OperatingPoint(sm_clock_mhz=1200))
        run_work()
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import re
import signal
import socket
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

from eopt.devices.base import Device, DeviceError
from eopt.fileformats import atomic_write_text, dumps_json
from eopt.lockfile import LockBusyError, ProcessLock

__all__ = [
    "STATE_SCHEMA",
    "GpuInUseError",
    "StateFile",
    "controlling_gpu",
    "entry_key",
    "find_state_files",
    "restoring_on_exit",
    "state_dir",
    "warn_if_stale",
]

STATE_SCHEMA = "eopt.gpu-state/1"
_ANNOUNCED: set[Path] = set()  # stale files already warned about in this process
_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def state_dir() -> Path:
    """Where state files live: ``$EOPT_STATE_DIR``, else ``~/.local/state/eopt``."""
    env = os.environ.get("EOPT_STATE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "eopt"


class GpuInUseError(DeviceError):
    """Another eopt process is changing this GPU's settings (it holds the GPU's lock)."""


def _gpu_key(uuid: object, host: str, backend: object, index: object) -> str:
    """A GPU's identity: its UUID; without one, host, backend and index."""
    if uuid:
        return str(uuid)
    return f"{host}-{backend}-{index}"


def entry_key(entry: Mapping[str, Any], host: str) -> str:
    """The identity of the GPU a saved-state entry describes (written on ``host``)."""
    return _gpu_key(entry.get("uuid"), host, entry.get("backend"), entry.get("index"))


def _device_key(device: Device) -> str:
    backend = getattr(device, "backend", type(device).__name__)
    return _gpu_key(getattr(device, "uuid", None), socket.gethostname(), backend, device.index)


# Locks this process holds, by lock file: (lock, holders). Nested guards of one process
# (a controller inside a script's own guard) share the lock instead of refusing themselves.
_HELD: dict[Path, tuple[ProcessLock, int]] = {}
_HELD_GUARD = threading.Lock()


def _lock_path(key: str, directory: Path) -> Path:
    return directory / f"gpu-{re.sub(r'[^A-Za-z0-9._-]', '_', key)}.lock"


def _acquire(key: str, label: str, directory: Path) -> Path:
    path = _lock_path(key, directory)
    with _HELD_GUARD:
        lock, count = _HELD.get(path, (ProcessLock(path), 0))
        if count == 0:
            try:
                lock.acquire()
            except LockBusyError as exc:
                raise GpuInUseError(
                    f"{label} is being controlled by another eopt process: {exc.who}. Wait "
                    "for it to finish (it restores the GPU when it ends), or measure "
                    "without changing settings (--no-control)"
                ) from None
        _HELD[path] = (lock, count + 1)
    return path


def _release(path: Path) -> None:
    with _HELD_GUARD:
        held = _HELD.get(path)
        if held is None:
            return
        lock, count = held
        if count <= 1:
            del _HELD[path]
            lock.release()
        else:
            _HELD[path] = (lock, count - 1)


@contextlib.contextmanager
def controlling_gpu(
    entry: Mapping[str, Any], host: str, directory: Path | None = None
) -> Iterator[None]:
    """Hold the lock of the GPU a saved-state entry describes (for ``eopt reset``).

    Raises:
        GpuInUseError: naming the process that controls the GPU now.
    """
    label = f"gpu{entry.get('index', '?')} ({entry.get('model', '?')}, {entry.get('uuid', '?')})"
    path = _acquire(entry_key(entry, host), label, directory or state_dir())
    try:
        yield
    finally:
        _release(path)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True


@dataclass(frozen=True)
class StateFile:
    """A saved-state file: GPUs a (possibly dead) eopt process may have left changed.

    Attributes:
        path: The file.
        pid: The process that wrote it.
        host: Its host name.
        created: When it was written (ISO 8601, UTC).
        devices: One JSON mapping per GPU (``backend``, ``index``, ``uuid``, ``model``,
            ``power_limit_w``).
        kept: The run ended normally and kept its settings on purpose (``eopt apply``);
            the file records the state to go back to.
    """

    path: Path
    pid: int
    host: str
    created: str
    devices: tuple[dict[str, Any], ...]
    kept: bool = False

    @property
    def local(self) -> bool:
        """Written on this host (a shared home directory may hold other hosts' files)."""
        return self.host == socket.gethostname()

    @property
    def stale(self) -> bool:
        """Written on this host by a process that is gone."""
        return self.local and not _pid_alive(self.pid)

    @classmethod
    def read(cls, path: Path) -> StateFile:
        """Read one state file.

        Raises:
            ValueError: naming the file and what is wrong with it.
        """
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"{path}: unreadable eopt state file ({exc}); delete it") from exc
        if not isinstance(data, dict) or data.get("schema") != STATE_SCHEMA:
            raise ValueError(f"{path}: not an eopt state file (schema {STATE_SCHEMA!r} expected)")
        devices = data.get("devices")
        if not isinstance(devices, list) or not all(isinstance(d, dict) for d in devices):
            raise ValueError(f"{path}: 'devices' must be a list of objects")
        return cls(
            path=path,
            pid=int(data.get("pid", -1)),
            host=str(data.get("host", "")),
            created=str(data.get("created", "")),
            devices=tuple(devices),
            kept=bool(data.get("kept", False)),
        )

    def write_devices(self, devices: Sequence[dict[str, Any]]) -> None:
        """Rewrite the file with only ``devices`` (or delete it when none are left)."""
        if not devices:
            self.path.unlink(missing_ok=True)
            return
        payload = _payload(self.pid, self.host, self.created, devices, self.kept)
        _write_json_atomic(self.path, payload)


def _payload(
    pid: int, host: str, created: str, devices: Sequence[dict[str, Any]], kept: bool = False
) -> dict:
    return {
        "schema": STATE_SCHEMA,
        "pid": pid,
        "host": host,
        "created": created,
        "kept": kept,
        "devices": list(devices),
    }


def _write_json_atomic(path: Path, payload: dict[str, Any]) -> None:
    # A fresh O_EXCL temporary file (never a guessable <path>.tmp that a planted symlink
    # could redirect), fsynced: this file is what restores the GPUs after a crash.
    atomic_write_text(path, dumps_json(payload, str(path), indent=2), durable=True)


def find_state_files(directory: Path | None = None) -> list[StateFile]:
    """All readable state files, oldest first; unreadable ones raise.

    Raises:
        ValueError: for a malformed file (naming it).
    """
    root = directory or state_dir()
    if not root.is_dir():
        return []
    files = [StateFile.read(p) for p in sorted(root.glob("gpu-state-*.json"))]
    return sorted(files, key=lambda f: f.created)


def _describe(entry: dict[str, Any]) -> str:
    limit = entry.get("power_limit_w")
    limit_text = f"power limit {limit:g} W" if isinstance(limit, (int, float)) else "power limit"
    return f"gpu{entry.get('index', '?')} ({entry.get('model', '?')}): clock locks, {limit_text}"


def warn_if_stale(stream: TextIO | None = None, directory: Path | None = None) -> list[StateFile]:
    """Warn loudly about state files left by killed runs; returns them.

    Each file is announced once per process. A malformed state file is reported the same
    way (it needs the user's attention too).
    """
    out = stream or sys.stderr
    try:
        stale = [f for f in find_state_files(directory) if f.stale]
    except ValueError as exc:
        print(f"WARNING: {exc}", file=out)
        return []
    for f in stale:
        if f.path in _ANNOUNCED:
            continue
        _ANNOUNCED.add(f.path)
        gpus = "; ".join(_describe(d) for d in f.devices)
        if f.kept:
            print(
                f"note: GPU settings applied by eopt (pid {f.pid}, {f.created}) are still in "
                f"effect; `eopt reset` restores the original ones ({gpus}).",
                file=out,
            )
            continue
        print(
            f"WARNING: an earlier eopt run (pid {f.pid}, {f.created}) ended without restoring "
            f"GPU settings it changed ({gpus}). Run `eopt reset` to restore them "
            f"(state file: {f.path}).",
            file=out,
        )
    return stale


class _Guard:
    """Restores a set of devices exactly once per change, from any exit path."""

    def __init__(self, devices: Sequence[Device], directory: Path) -> None:
        self.devices = list(devices)
        self.directory = directory
        self.path: Path | None = None
        self._entries: list[dict[str, Any]] = []
        self._created = ""
        self._lock = threading.RLock()
        self._previous: dict[int, Any] = {}
        self._locks: list[Path] = []

    def save(self) -> None:
        """Lock every GPU that may change, then write their original state to disk.

        Raises:
            GpuInUseError: another process controls one of them (nothing is locked or
                written then).
        """
        controlled = [
            d
            for d in self.devices
            if getattr(d, "snapshot_state", None) is not None and getattr(d, "control", True)
        ]  # simulated or measure-only GPUs: nothing to restore later, nothing to lock
        if not controlled:
            return
        try:
            for device in controlled:
                uuid = getattr(device, "uuid", None)
                label = f"{device.name} ({device.model}{f', {uuid}' if uuid else ''})"
                self._locks.append(_acquire(_device_key(device), label, self.directory))
            # Snapshot only once locked: before, another controller could be mid-change.
            entries = [d.snapshot_state() for d in controlled]  # type: ignore[attr-defined]
        except BaseException:
            self.release_locks()
            raise
        # Microseconds: `eopt reset` orders saved states by this stamp (the oldest wins),
        # and two runs can start within one second.
        self._created = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        pid = os.getpid()
        self.path = self.directory / f"gpu-state-{pid}-{id(self):x}.json"
        self._entries = entries
        _write_json_atomic(self.path, _payload(pid, socket.gethostname(), self._created, entries))

    def release_locks(self) -> None:
        """Let other processes control these GPUs again."""
        locks, self._locks = self._locks, []
        for path in locks:
            _release(path)

    def keep(self) -> None:
        """Leave the settings in place; mark the state file as kept for ``eopt reset``.

        A GPU that an older state file already records (settings kept by an earlier
        ``eopt apply``, or a killed run) is dropped from this file: the older entry holds
        the state found before the first change, the one ``eopt reset`` must restore.
        """
        try:
            if self.path is None:
                return
            host = socket.gethostname()
            try:
                older = {
                    entry_key(e, f.host)
                    for f in find_state_files(self.directory)
                    if f.local and f.path != self.path
                    for e in f.devices
                }
            except ValueError:
                older = set()  # a malformed file is reported elsewhere; keep everything
            entries = [e for e in self._entries if entry_key(e, host) not in older]
            if not entries:
                self.path.unlink(missing_ok=True)
                self.path = None
                return
            self._entries = entries
            payload = _payload(os.getpid(), host, self._created, entries, kept=True)
            _write_json_atomic(self.path, payload)
        finally:
            self.release_locks()

    def restore(self) -> None:
        with self._lock:
            failures = []
            for device in self.devices:
                try:
                    device.restore()
                except Exception as exc:  # keep restoring the others
                    failures.append(f"{device.name}: {exc}")
            # Restored or not, this process changes nothing more: a failed restore leaves
            # its state file for `eopt reset`, which needs the lock.
            self.release_locks()
            if failures:
                where = f" (state kept in {self.path})" if self.path else ""
                raise DeviceError(
                    "could not restore GPU settings: "
                    + "; ".join(failures)
                    + f"{where}; run `eopt reset`"
                )
            if self.path is not None:
                self.path.unlink(missing_ok=True)

    def restore_quietly(self) -> None:
        try:
            self.restore()
        except DeviceError as exc:
            print(f"error: {exc}", file=sys.stderr)

    # signals -----------------------------------------------------------------
    def install_handlers(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers can only be set from the main thread
        for sig in _SIGNALS:
            previous = signal.getsignal(sig)
            if previous is signal.SIG_IGN:
                continue  # the program ignores it: so do we
            self._previous[sig] = previous
            signal.signal(sig, self._on_signal)

    def uninstall_handlers(self) -> None:
        for sig, previous in self._previous.items():
            if signal.getsignal(sig) == self._on_signal:
                signal.signal(sig, previous)
        self._previous.clear()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.restore_quietly()
        previous = self._previous.get(signum)
        if callable(previous):
            previous(signum, frame)
            return
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        # Default action of SIGTERM is to terminate: exit with the conventional status.
        raise SystemExit(128 + signum)


@contextlib.contextmanager
def restoring_on_exit(
    devices: Sequence[Device],
    directory: Path | None = None,
    warn: bool = True,
    keep: bool = False,
) -> Iterator[Sequence[Device]]:
    """Run a block that changes device settings; put them back however it ends.

    Args:
        devices: The devices the block may change.
        directory: State-file directory (default :func:`state_dir`).
        warn: Warn about stale state files left by killed runs first.
        keep: On a NORMAL exit leave the new settings in place (``eopt apply`` without
            ``--until-exit``) and keep the state file, marked as kept, so ``eopt reset``
            restores the originals later. Exceptions and signals still restore.

    Yields:
        ``devices``.

    Raises:
        DeviceError: when restoring failed (the state file is kept; ``eopt reset``).
    """
    root = directory or state_dir()
    if warn:
        warn_if_stale(directory=root)
    guard = _Guard(devices, root)
    guard.save()
    guard.install_handlers()
    atexit.register(guard.restore_quietly)
    try:
        yield devices
    except BaseException:
        guard.uninstall_handlers()
        atexit.unregister(guard.restore_quietly)
        guard.restore()
        raise
    guard.uninstall_handlers()
    atexit.unregister(guard.restore_quietly)
    if keep:
        guard.keep()
    else:
        guard.restore()
