"""Temporary directories tilejit works in (a kernel's source and compiler output, private
caches), kept where a killed process's leftovers can be found and removed.

Every one lives under ``$TMPDIR/tilejit-<uid>/`` (mode 0700, this user's), named
``<kind>-<pid>-<start>-<ns>-<random>``: the pid, start time and pid namespace of the
process that made it.
A directory is removed by the code that made it on every path out (an exception, a
compile error); one whose process was killed (SIGKILL, a crash) is removed by the next
tilejit process that makes one, once that pid is not running or is running another
process (a different start time). A live process's directories are never touched; one
made in another pid namespace (a container sharing /tmp), whose pids mean other
processes, is removed only once it is a day old.

This module imports nothing from `tilejit`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["make", "remove", "root", "sweep", "workdir"]

_swept: set[str] = set()  # roots swept by this process (once each)


def _start_time(pid: int) -> str | None:
    """The start time of process `pid` (clock ticks since boot, /proc/<pid>/stat), or None
    when it cannot be read (no /proc, or no such process)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            text = handle.read().decode("ascii", "replace")
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces; fields follow it.
    fields = text[text.rfind(")") + 2:].split()
    return fields[19] if len(fields) > 19 else None


def _namespace() -> str:
    """This process's pid namespace as digits (``/proc/self/ns/pid``), or "0"."""
    try:
        link = os.readlink("/proc/self/ns/pid")
    except OSError:
        return "0"
    digits = "".join(c for c in link if c.isdigit())
    return digits or "0"


_FOREIGN_AGE_S = 24 * 3600.0


def _alive(pid: int, start: str) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process: alive
    except OSError:
        return True
    now = _start_time(pid)
    return now is None or start == "0" or now == start  # a reused pid has another start


def root() -> Path:
    """``$TMPDIR/tilejit-<uid>``, made if missing; RuntimeError when it is not a private
    directory of this user (another user made it first, or it is a link)."""
    path = Path(tempfile.gettempdir()) / f"tilejit-{os.getuid()}"
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise RuntimeError(f"tilejit: {path} (its temporary directory) is not a private "
                           f"directory of this user (mode {stat.filemode(info.st_mode)}, "
                           f"uid {info.st_uid}); remove it or set TMPDIR elsewhere")
    return path


def sweep(where: Path) -> list[str]:
    """Removes the directories under `where` whose process is gone; returns their names."""
    removed = []
    try:
        names = os.listdir(where)
    except OSError:
        return removed
    namespace = _namespace()
    for name in names:
        parts = name.split("-")
        if len(parts) < 5 or not all(p.isdigit() for p in parts[1:4]):
            continue
        pid, start, ns = int(parts[1]), parts[2], parts[3]
        if ns != namespace:
            with contextlib.suppress(OSError):
                import time

                if time.time() - os.lstat(where / name).st_mtime > _FOREIGN_AGE_S:
                    shutil.rmtree(where / name, ignore_errors=True)
                    removed.append(name)
            continue
        if pid == os.getpid() or _alive(pid, start):
            continue
        shutil.rmtree(where / name, ignore_errors=True)
        removed.append(name)
    return removed


def make(kind: str) -> str:
    """A new private directory for `kind` (``cc``, ``nvcc``, ``cache``, ...); the caller
    removes it (`remove`). The first call of a process sweeps killed processes' ones."""
    where = root()
    if str(where) not in _swept:
        _swept.add(str(where))
        sweep(where)
    pid = os.getpid()
    return tempfile.mkdtemp(prefix=f"{kind}-{pid}-{_start_time(pid) or 0}-{_namespace()}-",
                            dir=where)


def remove(path) -> None:
    shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def workdir(kind: str) -> Iterator[str]:
    """``with workdir("cc") as path:`` a directory from `make`, removed on every way out."""
    path = make(kind)
    try:
        yield path
    finally:
        remove(path)
