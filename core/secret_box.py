"""Secrets kintsugi must use itself, sealed at rest: an agent's replay secret signs every replay POST
(an HMAC needs the key itself, so it cannot be hashed like a token), so the database keeps it encrypted
(Fernet) with a key that lives outside the database and outside every backup.

The key is a file, KINTSUGI_SECRET_BOX_KEY (default: KINTSUGI_HOME/audit/secret-box.key, beside the audit
signing key), generated on first use, 0600 in a 0700 directory. A dump of the database then holds only
ciphertext; a home restored from a backup opens its replay secrets only if it brings the same key file
(or the agents' secrets are rotated). A value this home's key cannot open reads as "" (SealedTextField):
the replay refuses to sign with it and names the cause, and nothing else that reads the row fails.
"""
from __future__ import annotations

import hashlib
import logging
import threading
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings
from django.db import models

from core import key_files

log = logging.getLogger(__name__)
SEALED_PREFIX = "gAAAAA"  # every Fernet token starts so (version byte 0x80, then the timestamp's high bytes)

_boxes: dict[str, Fernet] = {}
_keys: dict[str, bytes] = {}
_lock = threading.Lock()


def key_path() -> Path:
    return Path(settings.KINTSUGI_SECRET_BOX_KEY)


def _generate(path: Path) -> None:
    """A new key at `path` (0600) unless another process just made one."""
    key_files.create_once(path, Fernet.generate_key() + b"\n")


def _key() -> bytes:
    path = key_path()
    with _lock:
        if str(path) not in _keys:
            if not path.exists():
                _generate(path)
            _keys[str(path)] = path.read_bytes().strip()
        return _keys[str(path)]


def _box() -> Fernet:
    key = _key()
    with _lock:
        return _boxes.setdefault(key.decode(), Fernet(key))


def fingerprint(*, create: bool = True) -> str | None:
    """Which key this home seals with (a hash of it: the key itself is never written anywhere else);
    None when there is no key yet and `create` is off."""
    if not create and not key_path().exists():
        return None
    return hashlib.sha256(b"kintsugi secret box\0" + _key()).hexdigest()[:16]


def seal(secret: str) -> str:
    return _box().encrypt(secret.encode()).decode()


def is_sealed(value: str) -> bool:
    return value.startswith(SEALED_PREFIX)


def open_sealed(value: str) -> str | None:
    """The secret in `value`, or None when this home's key does not open it."""
    try:
        return _box().decrypt(value.encode()).decode()
    except (InvalidToken, ValueError):
        return None


class SealedTextField(models.TextField):
    """A text column whose values are sealed on the way in and opened on the way out: the model's
    attribute is the secret, the row holds ciphertext. Not for lookups (each seal differs)."""

    def get_db_prep_save(self, value, connection):
        if value in (None, ""):
            return value
        return seal(value)

    def from_db_value(self, value, expression, connection):
        if value in (None, ""):
            return value
        opened = open_sealed(value)
        if opened is None:
            log.error("a sealed secret in %s cannot be opened with the key at %s (KINTSUGI_SECRET_BOX_KEY): "
                      "bring the key it was sealed with, or rotate the secret", self.model._meta.label, key_path())
            return ""
        return opened
