"""Files zmr writes: whole or not at all.

Every file zmr writes (patches, series, manifests, reports, dumps, evidence,
README) goes through `atomic_write`: a temporary file in the same folder,
flushed to disk, then renamed over the target, so Ctrl-C or a crash never
leaves half a file. An existing file keeps its mode; a new one gets the
umask's.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def current_umask() -> int:
    current = os.umask(0o022)
    os.umask(current)
    return current


def atomic_write(path: Path, data: bytes) -> None:
    """Write *path* through a temporary file in the same folder and a rename: never half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = None
    try:
        mode = path.stat().st_mode & 0o7777
    except FileNotFoundError:
        pass
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".zmr-tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode if mode is not None else 0o666 & ~current_umask())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
