"""Filesystem helpers: nothing half-written is ever left behind, no path escapes its folder."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
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
def atomic_dir(path: str | Path) -> Iterator[Path]:
    """Yield a temporary directory that replaces `path` only if the block succeeds.

    Files already in `path` that the block does not rewrite are kept (an output folder may
    hold a user's own files); on failure `path` is left exactly as it was.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        yield tmp
        path.mkdir(exist_ok=True)
        for src in sorted(tmp.rglob("*")):
            dst = path / src.relative_to(tmp)
            if src.is_dir():
                dst.mkdir(exist_ok=True)
            else:
                os.replace(src, dst)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


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
