"""Never leave a GPU changed: restore settings on exit, exceptions and signals.

:func:`restoring_on_exit` wraps any code that changes clocks or power limits. Before the
block runs it writes each NVML GPU's original state to a state file (JSON under
``$EOPT_STATE_DIR``, default ``~/.local/state/eopt/``); it restores the devices on normal
exit, on exceptions, on SIGINT / SIGTERM and at interpreter exit, and removes the state
file once the restore succeeded. A run killed with SIGKILL cannot restore anything: its
state file stays behind, the next run warns about it, and ``eopt reset`` puts the GPUs
back (under ``sudo`` it also looks in the invoking user's state directory).

Signals. The handlers the guard installs only raise (``KeyboardInterrupt``, or
``SystemExit(128 + signum)`` for SIGTERM) or hand the signal to the handler installed
before, so the block unwinds and restores on its way out. Restoring itself does not wait
for that: Python runs signal handlers only in the main thread, between bytecodes, and a
main thread blocked in C (``torch.distributed.recv``, a CUDA synchronize) may not get
there for seconds. A watchdog thread, woken through :func:`signal.set_wakeup_fd`, restores
every guarded GPU as soon as SIGINT or SIGTERM arrives — also when the program's own
handler only sets a flag and carries on (the usual Slurm / Kubernetes pattern): from then
on the block runs at the original settings, and its state file is gone.

Changes against restores. Every change to a guarded device passes a per-device gate, and a
restore seals the gate before it starts: a change in flight on another thread (the runtime
controller's switch worker, or the main thread while the watchdog restores) finishes
first, and a change asked for later is refused with :class:`ControlEndedError` until the
block ends. So nothing lands on a GPU after its restore, and the state file describes
what is on the GPU until the restore is complete.

One controller per GPU: before saving anything the guard takes an exclusive lock per GPU
(``gpu-<UUID>.lock`` in the same directory, see :mod:`eopt.model.lockfile`) and holds it until
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
import inspect
import json
import os
import re
import secrets
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
from eopt.model.fileformats import atomic_write_text, dumps_json
from eopt.model.lockfile import LockBusyError, ProcessLock
from eopt.model.operating_point import OperatingPoint

__all__ = [
    "STATE_SCHEMA",
    "ControlEndedError",
    "GpuInUseError",
    "StateFile",
    "changing",
    "controlling_gpu",
    "entry_key",
    "find_state_files",
    "reset_state_dirs",
    "restoring_on_exit",
    "state_dir",
    "sudo_user_state_dir",
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


def sudo_user_state_dir() -> Path | None:
    """The invoking user's default state directory when running as root under ``sudo``.

    A run without root that could not restore (its rights were refused half-way, or it
    was killed) leaves its state file in the user's home; ``sudo eopt reset`` runs with
    root's home, so it must look there too. None when not under sudo, when
    ``$EOPT_STATE_DIR`` names the directory explicitly, or when the user is unknown.
    """
    user = os.environ.get("SUDO_USER")
    if not user or os.environ.get("EOPT_STATE_DIR") or not hasattr(os, "geteuid"):
        return None
    if os.geteuid() != 0:
        return None
    try:
        import pwd

        home = pwd.getpwnam(user).pw_dir
    except (ImportError, KeyError):
        return None
    # The user's own XDG_STATE_HOME is not visible under sudo: the default is assumed.
    return Path(home) / ".local" / "state" / "eopt"


def reset_state_dirs(extra: Sequence[Path] = ()) -> list[Path]:
    """Directories ``eopt reset`` searches: ``extra`` when given, else :func:`state_dir`
    and, under sudo, :func:`sudo_user_state_dir`; duplicates removed, order kept."""
    dirs = list(extra) if extra else [state_dir()]
    if not extra:
        user_dir = sudo_user_state_dir()
        if user_dir is not None:
            dirs.append(user_dir)
    out: list[Path] = []
    for d in dirs:
        if not any(_same_dir(d, seen) for seen in out):
            out.append(d)
    return out


def _same_dir(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return a == b


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
        """Rewrite the file with only ``devices`` (or delete it when none are left).

        The file keeps its owner: ``sudo eopt reset`` rewriting a user's file must not
        leave it root's, or the user's next ``eopt reset`` could not read it.
        """
        if not devices:
            self.path.unlink(missing_ok=True)
            return
        try:
            owner = self.path.stat()
        except OSError:
            owner = None
        payload = _payload(self.pid, self.host, self.created, devices, self.kept)
        _write_json_atomic(self.path, payload)
        if owner is not None and hasattr(os, "chown"):
            with contextlib.suppress(OSError):  # only root may, and only root needs to
                current = self.path.stat()
                if (current.st_uid, current.st_gid) != (owner.st_uid, owner.st_gid):
                    os.chown(self.path, owner.st_uid, owner.st_gid)


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


def fresh_state_path(directory: Path, pid: int) -> Path:
    """A state file name that no file in ``directory`` has yet.

    Random, never derived from the run: a kept or a dead run's file must not be
    overwritten by a later one (an object's address, once part of the name, repeats
    within a process; a process id repeats across runs).
    """
    while True:
        path = directory / f"gpu-state-{pid}-{secrets.token_hex(8)}.json"
        if not path.exists():
            return path


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


class ControlEndedError(DeviceError):
    """A change refused because the device's restore has begun (a signal, or the run's end).

    The GPU is back at its original settings; nothing of this run changes it again until
    the guarded block ends.
    """


class _Gate:
    """Orders one device's changes against its restores (see the module docstring).

    While a guard holds a device, the device's ``set_operating_point`` is this gate's
    :meth:`set`, an instance attribute over the class's method: every caller — a sweep's
    main thread, ``eopt apply``, the runtime controller's workers — goes through the gate
    without knowing it, and a restore from the signal watchdog cannot interleave with a
    change in flight on another thread.
    """

    def __init__(self, device: Device) -> None:
        self.device = device
        # Re-entrant: a multi-call change (:func:`changing`) calls the gated setter inside.
        self.lock = threading.RLock()
        self.sealed_by: set[int] = set()  # guards whose restore has begun, block not ended
        self.users = 0
        self._raw: Any = None
        self._own: Any = None  # an instance attribute the device had before (rare)
        self._installed = False

    def install(self) -> None:
        device = self.device
        self._raw = device.set_operating_point
        self._own = vars(device).get("set_operating_point") if hasattr(device, "__dict__") else None
        try:
            device.set_operating_point = self.set  # type: ignore[method-assign]
        except (AttributeError, TypeError):
            return  # a read-only device object: only restores are ordered for it
        self._installed = True

    def uninstall(self) -> None:
        if not self._installed:
            return
        self._installed = False
        device = self.device
        if getattr(device, "set_operating_point", None) != self.set:
            return  # someone replaced it after us: theirs stays
        if self._own is None and inspect.isfunction(
            getattr(type(device), "set_operating_point", None)
        ):
            del device.set_operating_point  # type: ignore[attr-defined]  # the class's again
        else:
            # An attribute of the instance (a mock's child, a bound function): put it back.
            device.set_operating_point = self._own or self._raw  # type: ignore[method-assign]

    def check(self) -> None:
        """Raise :class:`ControlEndedError` once a restore of the device has begun."""
        if self.sealed_by:
            raise ControlEndedError(
                f"{self.device.name}: not changing its settings: they were restored (a "
                "signal arrived, or the run is ending), and eopt changes nothing more in "
                "this run"
            )

    def set(self, point: OperatingPoint) -> None:
        with self.lock:
            self.check()
            self._raw(point)


_GATES: dict[int, _Gate] = {}  # id(device) → its gate, while some guard holds it
_GATES_LOCK = threading.Lock()


def _open_gate(device: Device) -> _Gate:
    with _GATES_LOCK:
        gate = _GATES.get(id(device))
        if gate is None:
            gate = _GATES[id(device)] = _Gate(device)
            gate.install()
        gate.users += 1
        return gate


def _close_gate(gate: _Gate, guard_id: int) -> None:
    with _GATES_LOCK:
        with gate.lock:
            gate.sealed_by.discard(guard_id)
        gate.users -= 1
        if gate.users <= 0:
            gate.uninstall()
            _GATES.pop(id(gate.device), None)


@contextlib.contextmanager
def changing(device: Device) -> Iterator[None]:
    """Hold ``device``'s gate for a change made of several calls (e.g. restore, then set).

    No restore of the device starts inside the block; calls to its setter inside it are
    allowed (the gate is re-entrant). Outside any guard this does nothing.

    Raises:
        ControlEndedError: when the device's restore has already begun.
    """
    gate = _GATES.get(id(device))
    if gate is None:
        yield
        return
    with gate.lock:
        gate.check()
        yield


class _SignalWatch:
    """The process's watchdog: restores every guarded GPU as soon as SIGINT/SIGTERM arrives.

    Python's C-level signal handler writes each signal's number to the wakeup fd, from
    whichever thread the kernel interrupted, before any Python handler can run; a thread
    blocked on reading that fd therefore wakes even while the main thread is stuck in C.
    Bytes are passed on to the wakeup fd installed before (asyncio's, say), so its owner
    still hears about signals.

    Assumptions:
        Nothing replaces the wakeup fd while a guard is active (asyncio installs its own
        only when an event loop starts in the main thread). Where something does, the
        watchdog stays silent and restoring falls back to the block's own exit path.
    """

    def __init__(self) -> None:
        self.guards: list[_Guard] = []
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None
        self.read_fd = -1
        self.write_fd = -1
        self.previous_fd = -1

    def add(self, guard: _Guard) -> None:
        """Watch for ``guard`` (main thread only: ``set_wakeup_fd`` demands it)."""
        with self.lock:
            self.guards.append(guard)
            if self.thread is not None:
                return
            read_fd, write_fd = os.pipe()
            try:
                os.set_blocking(write_fd, False)  # the C handler must never block
                previous = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
            except (ValueError, OSError):  # not the main thread, or a platform without
                os.close(read_fd)  # pipe wakeups: the blocks' own exits restore
                os.close(write_fd)
                return
            self.read_fd, self.write_fd, self.previous_fd = read_fd, write_fd, previous
            self.thread = threading.Thread(
                target=self._run, args=(read_fd,), name="eopt-restore-on-signal", daemon=True
            )
            self.thread.start()

    def remove(self, guard: _Guard) -> None:
        with self.lock:
            if guard in self.guards:
                self.guards.remove(guard)
            if self.guards or self.thread is None:
                return
            try:
                current = signal.set_wakeup_fd(self.previous_fd)
            except (ValueError, OSError):
                return  # not the main thread: the idle watchdog stays until the next end
            if current != self.write_fd:
                signal.set_wakeup_fd(current)  # replaced after us: leave the newer one
            thread, self.thread = self.thread, None
            write_fd, self.write_fd = self.write_fd, -1
        with contextlib.suppress(OSError):
            os.write(write_fd, b"\0")  # 0 is no signal number: it tells the thread to stop
        thread.join()
        os.close(write_fd)

    def _run(self, read_fd: int) -> None:
        try:
            while True:
                try:
                    data = os.read(read_fd, 512)
                except InterruptedError:
                    continue
                except OSError:
                    return
                signals = [b for b in data if b]
                previous = self.previous_fd
                if signals and previous >= 0:
                    with contextlib.suppress(OSError):
                        os.write(previous, bytes(signals))
                for signum in signals:
                    if signum in _SIGNALS:
                        self._restore_all(signal.Signals(signum))
                if not data or 0 in data:
                    return
        finally:
            os.close(read_fd)

    def _restore_all(self, signum: signal.Signals) -> None:
        with self.lock:
            guards = list(reversed(self.guards))  # innermost first, as the blocks unwind
        for guard in guards:
            guard.restore_on_signal(signum)

    def after_fork_in_child(self) -> None:
        """A forked child (a DataLoader worker) owns no GPU of its parent: stop watching."""
        previous, write_fd, read_fd = self.previous_fd, self.write_fd, self.read_fd
        self.guards = []
        self.lock = threading.Lock()
        self.thread = None
        self.read_fd = self.write_fd = self.previous_fd = -1
        if write_fd < 0:
            return
        with contextlib.suppress(ValueError, OSError):
            if signal.set_wakeup_fd(previous) != write_fd:
                signal.set_wakeup_fd(write_fd)  # not ours any more: put it back
                return
        for fd in (write_fd, read_fd):
            with contextlib.suppress(OSError):
                os.close(fd)


_WATCH = _SignalWatch()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_WATCH.after_fork_in_child)


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
        self._gates: list[_Gate] = []
        self._pid = os.getpid()
        # "active" until a restore completes ("restored" / "failed") or the block keeps
        # its settings ("kept"); an interrupted restore leaves it "active".
        self.outcome = "active"
        self.signal: signal.Signals | None = None  # the signal that restored, if one did
        self._watched = False

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
        self.path = fresh_state_path(self.directory, pid)
        self._entries = entries
        _write_json_atomic(self.path, _payload(pid, socket.gethostname(), self._created, entries))

    def release_locks(self) -> None:
        """Let other processes control these GPUs again."""
        locks, self._locks = self._locks, []
        for path in locks:
            _release(path)

    # life cycle ----------------------------------------------------------------
    def start(self) -> None:
        """Gate every device, then watch for signals (handlers, watchdog, interpreter exit)."""
        self._gates = [_open_gate(d) for d in self.devices]
        if threading.current_thread() is threading.main_thread():
            self.install_handlers()
            _WATCH.add(self)
            self._watched = True
        atexit.register(self.restore_quietly)

    def finish(self) -> None:
        """The block has ended: stop watching; complete a restore a signal interrupted."""
        if self._watched:
            _WATCH.remove(self)
            self._watched = False
        atexit.unregister(self.restore_quietly)
        try:
            with self._lock:  # waits for a restore the watchdog may be running
                if self.outcome == "active":
                    self.restore_quietly()
        finally:
            self.uninstall_handlers()
            gates, self._gates = self._gates, []
            for gate in gates:
                _close_gate(gate, id(self))

    def keep(self) -> None:
        """Leave the settings in place; mark the state file as kept for ``eopt reset``.

        A GPU that an older state file already records (settings kept by an earlier
        ``eopt apply``, or a killed run) is dropped from this file: the older entry holds
        the state found before the first change, the one ``eopt reset`` must restore.
        Settings a signal already restored are not kept (there is nothing left to keep).
        """
        with self._lock:
            if self.outcome != "active":
                return
            self.outcome = "kept"
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
        """Seal each device's gate, restore it, then delete the state file.

        Idempotent: a second call after a complete restore (the watchdog's, then the
        block's exit) does nothing.

        Raises:
            DeviceError: naming every device that could not be restored (its state file
                stays for ``eopt reset``).
        """
        if os.getpid() != self._pid:
            return  # a forked child: the GPUs belong to the parent
        with self._lock:
            if self.outcome in ("restored", "kept"):
                return
            failures = []
            gates = {id(g.device): g for g in self._gates}
            for device in self.devices:
                gate = gates.get(id(device))
                try:
                    if gate is None:
                        device.restore()
                        continue
                    # Sealed first: a change in flight on another thread ends before the
                    # restore starts, and none starts after it.
                    with gate.lock:
                        gate.sealed_by.add(id(self))
                        device.restore()
                except Exception as exc:  # keep restoring the others
                    failures.append(f"{device.name}: {exc}")
            # Restored or not, this process changes nothing more: a failed restore leaves
            # its state file for `eopt reset`, which needs the lock.
            self.release_locks()
            if failures:
                self.outcome = "failed"
                where = f" (state kept in {self.path})" if self.path else ""
                raise DeviceError(
                    "could not restore GPU settings: "
                    + "; ".join(failures)
                    + f"{where}; run `eopt reset`"
                )
            if self.path is not None:
                self.path.unlink(missing_ok=True)
            self.outcome = "restored"

    def restore_quietly(self) -> None:
        try:
            self.restore()
        except DeviceError as exc:
            print(f"error: {exc}", file=sys.stderr)

    def restore_on_signal(self, signum: signal.Signals) -> None:
        """The watchdog's restore: at once, from its own thread; says what it did."""
        with self._lock:
            if self.outcome != "active":
                return
            self.signal = signum
            self.restore_quietly()
            if self.outcome == "restored" and any(
                getattr(d, "control", True) for d in self.devices
            ):
                names = ", ".join(d.name for d in self.devices)
                print(
                    f"eopt: {signum.name}: GPU settings restored ({names}); this run "
                    "changes them no more",
                    file=sys.stderr,
                )

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
        if threading.current_thread() is not threading.main_thread():
            return
        for sig, previous in self._previous.items():
            if signal.getsignal(sig) == self._on_signal:
                signal.signal(sig, previous)
        self._previous.clear()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        # Only raise (or hand over): restoring here would race the changes other threads
        # have in flight, and a handler that returns would leave those threads changing
        # a GPU whose state file is gone. The watchdog and the block's exit restore.
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
        ControlEndedError: inside the block, for a change asked for after a signal
            restored the devices.
    """
    root = directory or state_dir()
    if warn:
        warn_if_stale(directory=root)
    guard = _Guard(devices, root)
    guard.save()
    try:
        guard.start()
    except BaseException:
        guard.finish()
        raise
    try:
        yield devices
    except BaseException:
        try:
            guard.restore()
        finally:
            guard.finish()
        raise
    try:
        if keep:
            guard.keep()
        else:
            guard.restore()
    finally:
        guard.finish()
