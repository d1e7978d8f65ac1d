"""The recording protocol's calls, applied to a ActionRecorder: the one implementation behind the REST API
(provenance.recording.remote, recordings staged in Postgres), the replay callbacks a repair serves
(provenance.recording.replay) and the MCP memory tools.

Each call is the in-process ActionRecorder method of the same name, so reads resolve by seq, writes carry the
three clocks and decisions are hashed exactly as for an @agent function. What the protocol adds: a
JSON body per call, an idempotency key per effect, and the answer to "may I perform this effect now?".
"""
from __future__ import annotations

import json
from typing import Any

from core.errors import DomainError
from provenance import validation
from provenance.recording.decisions import MalformedDecision, check_decision, decision_hash
from provenance.access.effect_declarations import BUILT_IN, required_details
from provenance.recording.recorder import ActionRecord, Read, ActionRecorder

OPS = ("ingest", "get", "set", "handoff", "effect")
IDEMPOTENCY_KEY_MAX = 128
# The details an effect kind cannot be compensated without (compensation drafts a correction email from
# the original's to/subject/body and sends a replacement email with them); other kinds' details are free.
EFFECT_DETAILS = {"email": ("to", "subject", "body")}


class InvalidCall(ValueError):
    """A protocol call whose body is not what the call takes; nothing was recorded."""


class CallConflict(DomainError, RuntimeError):
    """A call that contradicts what the action already recorded (an idempotency key reused for another
    effect, a call on a finished action); nothing was recorded."""

    code, status = "conflict", 409


def _field(body: dict, name: str, *, required: bool = True, default: Any = None) -> Any:
    if name not in body:
        if required:
            raise InvalidCall(f"the call needs the field {name!r}")
        return default
    return body[name]


def _body(body: Any, allowed: set[str]) -> dict:
    if not isinstance(body, dict):
        raise InvalidCall("the request body must be a JSON object")
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise InvalidCall(f"unknown fields: {', '.join(unknown)}")
    return body


def _effect_signature(eff: dict) -> str:
    return json.dumps(eff, sort_keys=True)


def apply_op(rec: ActionRecorder, record: ActionRecord, op: str, body: Any, *, perform: bool, keys: dict,
             declared: dict[str, tuple[str, ...]] | None = None) -> dict:
    """Apply one call to the open action `record` through its ActionRecorder and return the answer.

    `perform` says whether effects may leave now (a live recording) or are held (a replay); `keys`
    maps this action's idempotency keys to the effects they recorded (kept by the caller). `declared`:
    the workspace's declared kinds' required details read beforehand (effect_declarations.
    required_details_of), else each declared kind is looked up when recorded."""
    try:
        if op == "ingest":
            body = _body(body, {"source"})
            source = validation.source_id(_field(body, "source"))
            content = rec.ingest(source)
            incident = rec.quarantine_of(source) if content is None else None
            if incident is not None:
                return {"source": source, "content": None, "quarantined": True, "incident": incident}
            return {"source": source, "content": content}
        if op == "get":
            body = _body(body, {"key", "default"})
            key = validation.fact_key(_field(body, "key"))
            default = validation.json_value(body.get("default"), field="default",
                                            max_bytes=validation.MAX_FACT_VALUE_BYTES)
            own, reads = any(w["key"] == key for w in record.writes), len(record.reads)
            value = rec.get(key, default)
            found = own or (len(record.reads) > reads and record.reads[-1].fact_id is not None)
            return {"key": key, "value": value, "found": found}
        if op == "set":
            body = _body(body, {"key", "value", "valid_from", "valid_until", "observed_at"})
            validation.set_call(body)
            rec.set(_field(body, "key"), _field(body, "value"), valid_from=body.get("valid_from"),
                    valid_until=body.get("valid_until"), observed_at=body.get("observed_at"))
            return {"key": body["key"], "written": True}
        if op == "handoff":
            body = _body(body, {"agent", "payload"})
            agent, payload = _field(body, "agent"), _field(body, "payload")
            if not isinstance(agent, str):
                raise InvalidCall("agent must be a string")
            rec.handoff(agent, payload)
            return {"agent": agent, "position": len(record.handoffs) - 1}
        if op == "effect":
            return _effect(rec, record, _body(body, {"kind", "amount", "ticket", "currency", "details",
                                                     "idempotency_key", "external"}), perform=perform, keys=keys,
                           declared=declared)
    except MalformedDecision as exc:
        raise InvalidCall(str(exc)) from None
    raise InvalidCall(f"unknown call {op!r}; the calls are {', '.join(OPS)} and finish")


def _effect(rec: ActionRecorder, record: ActionRecord, body: dict, *, perform: bool, keys: dict,
            declared: dict[str, tuple[str, ...]] | None) -> dict:
    key = validation.identifier(_field(body, "idempotency_key"), field="idempotency_key",
                                max_length=IDEMPOTENCY_KEY_MAX)
    details = body.get("details") or {}
    if not isinstance(details, dict):
        raise InvalidCall("details must be a JSON object")
    if any(name in details for name in ("kind", "amount", "ticket", "currency")):
        raise InvalidCall("details must not repeat kind, amount, ticket or currency")
    kind = body.get("kind")
    # A kind the workspace declared names the details it cannot be compensated without (a message's
    # words, its target); checked only for kinds that are not built in.
    needs = (EFFECT_DETAILS.get(kind, ()) if kind in BUILT_IN or not isinstance(kind, str)
             else declared.get(kind, ()) if declared is not None else required_details(rec.workspace, kind))
    missing = [name for name in needs if not isinstance(details.get(name), str)]
    if missing:
        # Checked now, not when a repair drafts its correction from them and finds nothing to correct.
        raise InvalidCall(f"a {body.get('kind')} effect needs details {{{', '.join(needs)}}} as strings; "
                          f"missing or not a string: {', '.join(missing)}")
    # Held: read through a flag's containment (or depends on an action of its recording that did), or
    # re-run by a repair of the source's radius; the answer names the incident that settles it.
    contained = rec.contained_by() if perform else rec.repairing()
    if perform:
        validation.effect_ticket(workspace=rec.workspace, ticket=body.get("ticket") or rec.ticket,
                                 external=body.get("external"))
    before = len(record.effects)
    rec.effect(_field(body, "kind"), amount=body.get("amount", 0), ticket=body.get("ticket"),
               currency=body.get("currency", "USD"), **details)
    added = record.effects[before]
    if key in keys:
        # A retried call (the answer was lost on the way): the same effect, recorded once.
        del record.effects[before:]
        index = keys[key]
        if _effect_signature(record.effects[index]) != _effect_signature(added):
            raise CallConflict(f"idempotency key {key!r} already recorded a different effect in this action")
    else:
        index = keys[key] = before
    effect = record.effects[index]
    answer = {"effect": index, "idempotency_key": key, "kind": effect["kind"], "ticket": effect["ticket"],
              "amount": effect["amount"], "currency": effect["currency"], "perform": perform and not contained,
              "held": not perform or bool(contained)}
    return answer | ({"incident": contained[0]} if contained else {})


def finish(record: ActionRecord, body: Any) -> None:
    """Set the action's structured decision and its hash (the in-process agent's return value)."""
    body = _body(body, {"decision"})
    try:
        decision = check_decision(record.agent, _field(body, "decision"))
        validation.json_value(decision, field="decision", max_bytes=validation.MAX_PAYLOAD_BYTES)
    except MalformedDecision as exc:
        raise InvalidCall(str(exc)) from None
    record.decision = decision
    record.dhash = decision_hash(decision)


# --- staging: an ActionRecord as JSON and back ----------------------------------------------------------------
def dump_record(record: ActionRecord) -> dict:
    return {
        "id": record.id, "agent": record.agent, "payload": record.payload, "seq": record.seq,
        "parent": record.parent, "ticket": record.ticket,
        "reads": [[r.key, r.fact_id, r.writer] + ([list(r.contained)] if r.contained else []) for r in record.reads],
        "writes": record.writes,
        "handoffs": [[a, p] for a, p in record.handoffs], "effects": record.effects, "ingested": record.ingested,
        "decision": record.decision, "dhash": record.dhash, "hidden": record.hidden,
    }


def load_record(data: dict) -> ActionRecord:
    return ActionRecord(
        id=data["id"], agent=data["agent"], payload=data["payload"], seq=data["seq"], parent=data["parent"],
        ticket=data["ticket"], reads=[Read(*r[:3], tuple(r[3]) if len(r) > 3 else ()) for r in data["reads"]],
        writes=data["writes"],
        handoffs=[(a, p) for a, p in data["handoffs"]], effects=data["effects"], ingested=data["ingested"],
        decision=data["decision"], dhash=data["dhash"],
        hidden=tuple(data["hidden"]) if data.get("hidden") else None)
