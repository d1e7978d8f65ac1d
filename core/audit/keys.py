"""The audit record's signing key: an Ed25519 key kept outside the database, which signs the chains'
checkpoints (core.audit.checkpoints) and the anchor of their log (core.audit.anchor); its public half is
exported beside it, for whoever verifies the record elsewhere."""
from __future__ import annotations

import base64
import hashlib
import os
import threading
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from core import key_files


def private_dir(path: Path) -> None:
    """Make `path` a directory only this user may read or write."""
    key_files.private_dir(path)


def public_key_path(key_path: str | os.PathLike | None = None) -> Path:
    """Where the public half is exported: signing-key.pem -> signing-key.pub.pem."""
    path = Path(key_path or settings.KINTSUGI_AUDIT_SIGNING_KEY)
    return path.with_name(path.name[:-4] + ".pub.pem") if path.name.endswith(".pem") else path.with_name(path.name + ".pub")


def _export_public(key: Ed25519PrivateKey, path: Path) -> None:
    pub = public_key_path(path)
    pem = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    if not pub.exists() or pub.read_bytes() != pem:
        tmp = pub.with_name(f".{pub.name}.{os.getpid()}")
        tmp.write_bytes(pem)
        os.chmod(tmp, 0o644)
        os.replace(tmp, pub)


def _generate(path: Path) -> None:
    """Create a key at `path` (0600) unless another process just did."""
    key = Ed25519PrivateKey.generate()
    key_files.create_once(path, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                  serialization.NoEncryption()))


_keys: dict[str, Ed25519PrivateKey] = {}
_key_lock = threading.Lock()


def signing_key() -> Ed25519PrivateKey:
    """The signing key at KINTSUGI_AUDIT_SIGNING_KEY, generated on first use unless
    KINTSUGI_AUDIT_SIGNING_KEY_REQUIRED (production) says it must already exist."""
    path = Path(settings.KINTSUGI_AUDIT_SIGNING_KEY)
    with _key_lock:
        if str(path) in _keys:
            return _keys[str(path)]
        if not path.exists():
            if settings.KINTSUGI_AUDIT_SIGNING_KEY_REQUIRED:
                raise ImproperlyConfigured(f"the audit signing key {path} does not exist (KINTSUGI_AUDIT_SIGNING_KEY); "
                                           f"it is never generated when KINTSUGI_AUDIT_SIGNING_KEY_REQUIRED is set")
            _generate(path)
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
        if not isinstance(key, Ed25519PrivateKey):
            raise ImproperlyConfigured(f"{path} is not an Ed25519 private key")
        _export_public(key, path)
        _keys[str(path)] = key
        return key


def require_signer() -> None:
    """Raise ImproperlyConfigured unless the signing key is usable, where one is required
    (KINTSUGI_AUDIT_SIGNING_KEY_REQUIRED); elsewhere a missing key is generated on first use."""
    if settings.KINTSUGI_AUDIT_SIGNING_KEY_REQUIRED:
        signing_key()


def signer_problem() -> str | None:
    """Why the audit record cannot be signed, or None when it can (readiness, `check --deploy`)."""
    try:
        sign(b"probe")
    except (ImproperlyConfigured, OSError, ValueError, TypeError) as exc:
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return None


def load_public_key(path: str | os.PathLike | None = None) -> Ed25519PublicKey:
    """A public key from a PEM file (default: the one exported beside the signing key)."""
    key = serialization.load_pem_public_key(Path(path or public_key_path()).read_bytes())
    if not isinstance(key, Ed25519PublicKey):
        raise ValueError(f"{path} is not an Ed25519 public key")
    return key


def verifying_key() -> Ed25519PublicKey:
    """This installation's public key: the exported file, else the signing key's own half."""
    pub = public_key_path()
    return load_public_key(pub) if pub.exists() else signing_key().public_key()


def fingerprint(public_key: Ed25519PublicKey) -> str:
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


def signing_fingerprint() -> str:
    return fingerprint(signing_key().public_key())


def sign(data: bytes) -> str:
    """The base64 Ed25519 signature of `data` with the signing key."""
    return base64.b64encode(signing_key().sign(data)).decode()


def signature_holds(public_key: Ed25519PublicKey, data: bytes, signature: str) -> bool:
    try:
        public_key.verify(base64.b64decode(signature, validate=True), data)
        return True
    except (InvalidSignature, ValueError):
        return False
