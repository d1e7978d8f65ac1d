"""Key files that must be created once and read by everyone after: the audit signing key, the key that
seals replay secrets."""
from __future__ import annotations

import os
import threading
from pathlib import Path


def private_dir(path: Path) -> None:
    """`path` as a directory only its owner may enter (0700), made if missing."""
    if not path.exists():
        path.mkdir(parents=True, mode=0o700, exist_ok=True)
        os.chmod(path, 0o700)


def create_once(path: Path, data: bytes) -> None:
    """Write `data` to `path` (0600, whatever the umask) unless another process just did: written aside,
    then linked into place, which fails instead of overwriting when the name exists."""
    private_dir(path.parent)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, data)
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)
    except FileExistsError:
        pass
    finally:
        tmp.unlink()
