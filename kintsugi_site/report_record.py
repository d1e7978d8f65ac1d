"""What makes a downloaded incident report checkable offline, away from the database.

A report carries its workspace chain's head (seq, hash) and the latest signed checkpoint of that chain
(core.audit.checkpoints), and says whether it is `interim` (some item of the incident is undecided, or
the incident is not repaired yet) or `final`. The JSON report is also signed as a whole: an Ed25519
signature, with the same key, over the canonical JSON of the report without its `signature` field, so
`manage.py verify_report` with the public key tells an untouched download from an edited one. The CSV
and PDF carry the head, the checkpoint and its signature as text.
"""
from __future__ import annotations

import hashlib
import json

from core.audit import chains, checkpoints, keys
from core.audit.checkpoints import Checkpoint
from compensation.models import CompensationItem
from repairs.models import Incident

ALGORITHM = "ed25519"
COVERS = "sha256 and Ed25519 signature of the canonical JSON (sorted keys, no spaces) of the report without `signature`"
UNFINISHED = (Incident.Status.OPEN, Incident.Status.REPAIRING, Incident.Status.BLOCKED)


class ReportRefused(ValueError):
    """The report does not hold: the one-line reason."""


def record_section(incident: Incident) -> dict:
    """The chain head, its latest checkpoint (signed now when the head moved and this runs outside a
    transaction) and the report's state."""
    ws = incident.workspace_id
    checkpoints.flush()
    checkpoints.sign_heads([ws])
    cp = checkpoints.latest().get(chains.chain_label(ws))
    head = chains.head(workspace=ws)
    undecided = CompensationItem.objects.filter(incident=incident, status=CompensationItem.Status.PENDING).count()
    return {
        "chain": chains.chain_label(ws), "workspace": incident.workspace.name,
        "head": head._asdict() if head else None,
        "checkpoint": cp.as_dict() if cp else None,
        "state": "interim" if undecided or incident.status in UNFINISHED else "final",
        "undecided_items": undecided,
    }


def _canonical(report: dict) -> bytes:
    body = {k: v for k, v in report.items() if k != "signature"}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def sign_report(report: dict) -> dict:
    """The report with its `signature` (the report must already be plain JSON data)."""
    data = _canonical(report)
    return {**report, "signature": {"alg": ALGORITHM, "key": keys.signing_fingerprint(), "covers": COVERS,
                                    "digest": hashlib.sha256(data).hexdigest(), "value": keys.sign(data)}}


def verify_report(report: dict, *, public_key) -> str:
    """One line saying what holds; raises ReportRefused with the first reason it does not."""
    signature = report.get("signature") if isinstance(report, dict) else None
    if not isinstance(signature, dict) or signature.get("alg") != ALGORITHM:
        raise ReportRefused("the report carries no Ed25519 signature")
    key = keys.fingerprint(public_key)
    if signature.get("key") != key:
        raise ReportRefused(f"the report was signed by key {signature.get('key')}, not by this public key ({key})")
    data = _canonical(report)
    if hashlib.sha256(data).hexdigest() != signature.get("digest") or \
            not keys.signature_holds(public_key, data, str(signature.get("value", ""))):
        raise ReportRefused("the report's content does not match its signature (it was changed after it was signed)")
    record = report.get("record") or {}
    try:
        cp = Checkpoint(**record["checkpoint"])
    except (KeyError, TypeError):
        raise ReportRefused("the report carries no signed checkpoint of its audit chain") from None
    if cp.chain != record.get("chain") or not keys.signature_holds(public_key, cp.signed_bytes(), cp.signature):
        raise ReportRefused(f"the checkpoint of chain {cp.chain} does not verify with this public key")
    head = record.get("head") or {}
    if head.get("seq") == cp.seq and head.get("hash") != cp.hash:
        raise ReportRefused(f"the report's chain head at seq {cp.seq} differs from the signed checkpoint")
    return (f"report holds: incident #{report.get('incident', {}).get('id')} ({record.get('state')}), "
            f"chain {record.get('workspace')} head seq {head.get('seq')}, checkpoint seq {cp.seq} at {cp.at}, "
            f"signed by key {key}")
