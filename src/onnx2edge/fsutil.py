"""Filesystem helpers: nothing half-written is ever left behind, no path escapes its folder."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from .errors import Onnx2EdgeError


def write_bytes_atomic(path: str | Path, data: bytes) -> Path:
    """Write to a temporary sibling, then rename: readers see the old file or the new one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; give the file normal permissions
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path


def write_text_atomic(path: str | Path, text: str) -> Path:
    return write_bytes_atomic(path, text.encode("utf-8"))


@contextlib.contextmanager
def atomic_dir(
    path: str | Path, *, owned: Callable[[Path], set[str]] | None = None
) -> Iterator[Path]:
    """Yield a temporary directory that replaces `path` as a whole only if the block succeeds.

    The folder is swapped in by two renames under a lock, so two concurrent writers never
    leave a mix of their files and a killed one leaves the previous folder (or none), never a
    half-written one; its temporary folder is removed by the next writer. Files already in
    `path` that are not `owned` by the tool (by default: those the block did not write) are
    copied into the new folder: an output folder may hold a user's own files.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _remove_abandoned(path)
    tmp = Path(
        tempfile.mkdtemp(prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp", dir=path.parent)
    )
    try:
        # mkdtemp makes 0700, and the folder is renamed into place: give it what a plain
        # mkdir would (0755 under the usual umask)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)
        yield tmp
        with _locked(path):
            _swap_in(tmp, path, owned)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _swap_in(tmp: Path, path: Path, owned: Callable[[Path], set[str]] | None) -> None:
    if path.is_dir():
        ours = owned(path) if owned is not None else set()
        for src in sorted(path.rglob("*")):
            rel = src.relative_to(path)
            if str(rel) in ours or any(str(p) in ours for p in rel.parents):
                continue
            dst = tmp / rel
            if src.is_dir():
                dst.mkdir(exist_ok=True)
            elif not dst.exists():
                shutil.copy2(src, dst)
        old = path.with_name(f".{path.name}.{os.getpid()}.old.tmp")
        os.rename(path, old)
        os.rename(tmp, path)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(tmp, path)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock on a sibling lock file (advisory: other onnx2edge processes)."""
    import fcntl

    lock = path.with_name(f".{path.name}.lock")
    with open(lock, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _remove_abandoned(path: Path) -> None:
    """Temporary folders of writers that were killed (their process is gone)."""
    for tmp in path.parent.glob(f".{path.name}.*.tmp"):
        pid = tmp.name[len(path.name) + 2 :].split(".", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(tmp, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def resolve_inside(base: str | Path, relative: str, what: str) -> Path:
    """Resolve `relative` against `base`, refusing absolute paths and `..` escapes."""
    base = Path(base).resolve()
    if os.path.isabs(relative) or relative.startswith(("/", "\\")):
        raise Onnx2EdgeError(
            f"{what} '{relative}' is an absolute path; only paths inside '{base}' are allowed"
        )
    target = (base / relative).resolve()
    if target != base and base not in target.parents:
        raise Onnx2EdgeError(f"{what} '{relative}' points outside '{base}'; refusing to use it")
    return target
