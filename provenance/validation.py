"""What may come in from outside (admin, API, MCP, CLI, an agent through the recorder), checked before
anything is written: names, ids and keys bounded to their columns and free of control characters,
money as bounded non-negative integer cents in an ISO 4217-shaped currency, bounded payloads.

Each check returns the clean value or raises InvalidInput, a ValueError: the API and MCP answer it with
a 400 through kintsugi_site.api.errors.map_domain_error, the CLI with one line on stderr and exit 2, the
admin with a form error. Messages never repeat the refused value itself (it may be 100 KB or hold a NUL
that Postgres refuses to store in an audit row): they say what was wrong with it.
"""
from __future__ import annotations

import json
import re
from typing import Any

from django.core.exceptions import ValidationError
from django.core.validators import validate_email

from core.money import valid_locale


class InvalidInput(ValueError):
    """A value from outside that kintsugi refuses to take in; the message says which and why."""


# Bounds follow the columns the values end up in (provenance.models, compensation.models).
WORKSPACE_MAX = 64  # Workspace.name
SOURCE_ID_MAX = 200  # Source.source_id, Incident.source_id, AuditEvent.subject_id (core.audit.event)
TICKET_ID_MAX = 32  # Ticket.ticket_id, LedgerEntry.ticket_id, CompensationItem.ticket_id
FACT_KEY_MAX = 200
EMAIL_MAX = 254  # RFC 5321's path limit; EmailField's default
REASON_MAX = 2000  # the API's ReasonSerializer
# Integer cents: LedgerEntry.amount_cents and CompensationItem.amount_cents are 32-bit columns; ten
# million in the main unit is far above any support refund and far below the column's overflow.
MAX_AMOUNT_CENTS = 1_000_000_000
MAX_PAYLOAD_BYTES = 64 * 1024  # one root action's input, as JSON
MAX_FACT_VALUE_BYTES = 256 * 1024
MAX_NESTING = 20
# A desk run records about four actions a ticket; a million tickets is past every benchmark we run.
MAX_DESK_TICKETS = 1_000_000

_WORKSPACE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")
# Graph names are `<prefix>:<workspace>`, `<prefix>:<workspace>:baseline` and `<prefix>:llm_cache`
# (provenance.graph.graph). With no `:` in a name a workspace cannot reach another's baseline; these suffixes
# keep it from taking the model cache's name or passing for a baseline in listings and stamps.
RESERVED_SUFFIXES = ("baseline", "llm_cache")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_CONTROL_BUT_LINES = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_CURRENCY = re.compile(r"^[A-Z]{3}$")


def _string(value: Any, *, field: str, max_length: int) -> str:
    if not isinstance(value, str):
        raise InvalidInput(f"{field} must be a string, not {type(value).__name__}")
    if len(value) > max_length:
        raise InvalidInput(f"{field} is {len(value)} characters long; at most {max_length} are allowed")
    return value


def holds_nul(value: Any) -> bool:
    """Whether a string anywhere in `value` (lists and objects walked, their keys included) holds a NUL,
    which neither Postgres text nor a graph parameter can carry: refused at the door, never a 500."""
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            if "\x00" in node:
                return True
        elif isinstance(node, dict):
            stack.extend(node.keys())
            stack.extend(node.values())
        elif isinstance(node, (list, tuple)):
            stack.extend(node)
    return False


def refuse_nul(value: Any, *, where: str) -> None:
    if holds_nul(value):
        raise InvalidInput(f"{where} contains a control character (NUL)")


def identifier(value: Any, *, field: str, max_length: int) -> str:
    """An id or key: non-empty, at most `max_length` characters, no control characters (NUL included)."""
    value = _string(value, field=field, max_length=max_length)
    if not value:
        raise InvalidInput(f"{field} must not be empty")
    if _CONTROL.search(value):
        raise InvalidInput(f"{field} contains a control character (such as NUL)")
    return value


def text(value: Any, *, field: str, max_length: int) -> str:
    """Free text: line breaks and tabs allowed, no other control characters."""
    value = _string(value, field=field, max_length=max_length)
    if _CONTROL_BUT_LINES.search(value):
        raise InvalidInput(f"{field} contains a control character (such as NUL)")
    return value


def reason(value: Any, *, field: str = "reason", required: bool = True) -> str:
    """Why a person did something: stripped free text, required unless `required=False`."""
    value = text(value if value is not None else "", field=field, max_length=REASON_MAX).strip()
    if required and not value:
        raise InvalidInput(f"a {field} is required")
    return value


def workspace_name(value: Any) -> str:
    """A workspace name: a slug of at most 64 characters, no `:`, not a reserved graph name."""
    value = identifier(value, field="workspace", max_length=WORKSPACE_MAX)
    if not _WORKSPACE.match(value):
        raise InvalidInput("workspace must be a slug: letters, digits, '-' and '_', starting with a letter or digit")
    if value.lower().endswith(RESERVED_SUFFIXES):
        raise InvalidInput(f"workspace names ending in {' or '.join(RESERVED_SUFFIXES)} are reserved for graphs "
                           f"kintsugi keeps beside each workspace")
    return value


def source_id(value: Any) -> str:
    return identifier(value, field="source", max_length=SOURCE_ID_MAX)


def ticket_id(value: Any, *, field: str = "ticket") -> str:
    return identifier(value, field=field, max_length=TICKET_ID_MAX)


def fact_key(value: Any) -> str:
    return identifier(value, field="fact key", max_length=FACT_KEY_MAX)


def amount_cents(value: Any, *, field: str = "amount_cents") -> int:
    """Money: a whole, non-negative number of cents up to MAX_AMOUNT_CENTS (no floats, no booleans)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(f"{field} must be a whole number of cents, not {type(value).__name__}")
    if value < 0:
        raise InvalidInput(f"{field} must not be negative")
    if value > MAX_AMOUNT_CENTS:
        raise InvalidInput(f"{field} is above the limit of {MAX_AMOUNT_CENTS} cents")
    return value


def parse_amount_cents(value: Any, *, field: str = "amount_cents") -> int:
    """amount_cents() for form and query input, where the number arrives as text."""
    if isinstance(value, str):
        stripped = value.strip()
        if not re.fullmatch(r"-?\d{1,12}", stripped):
            raise InvalidInput(f"{field} must be a whole number of cents")
        value = int(stripped)
    return amount_cents(value, field=field)


def currency(value: Any, *, field: str = "currency") -> str:
    """An ISO 4217-shaped currency code: three upper-case letters."""
    value = _string(value, field=field, max_length=3)
    if not _CURRENCY.match(value):
        raise InvalidInput(f"{field} must be a three-letter ISO 4217 code such as USD")
    return value


def locale(value: Any, *, field: str = "locale") -> str:
    """A babel locale ("de_DE", "de-DE"), as babel names it; empty stays empty (the workspace's applies)."""
    value = _string(value, field=field, max_length=16).strip()
    if not value:
        return ""
    try:
        return valid_locale(value)
    except ValueError as exc:
        raise InvalidInput(f"{field}: {exc}") from None


def email(value: Any, *, field: str = "email") -> str:
    value = identifier(value, field=field, max_length=EMAIL_MAX)
    try:
        validate_email(value)
    except ValidationError:
        raise InvalidInput(f"{field} is not an email address") from None
    return value


def ticket_count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_DESK_TICKETS:
        raise InvalidInput(f"tickets must be a whole number from 1 to {MAX_DESK_TICKETS}")
    return value


# Fields that mean the same in every agent's payload (the desk's tickets and anything shaped like them).
_KNOWN_FIELDS = {
    "ticket": ticket_id,
    "amount_cents": amount_cents,
    "refund_cents": lambda v: amount_cents(v, field="refund_cents"),
    "currency": currency,
    "email": email,
    "source": source_id,
}


def json_value(value: Any, *, field: str, max_bytes: int) -> Any:
    """Any JSON value within `max_bytes` and MAX_NESTING levels, its strings free of NUL and the like."""
    def walk(v: Any, depth: int, where: str) -> None:
        if depth > MAX_NESTING:
            raise InvalidInput(f"{field} nests deeper than {MAX_NESTING} levels")
        if isinstance(v, str):
            text(v, field=where, max_length=max_bytes)
        elif isinstance(v, dict):
            for k, item in v.items():
                identifier(k, field=f"a key in {field}", max_length=FACT_KEY_MAX)
                walk(item, depth + 1, f"{field}.{k}")
        elif isinstance(v, (list, tuple)):
            for item in v:
                walk(item, depth + 1, where)
        elif v is not None and not isinstance(v, (bool, int, float)):
            raise InvalidInput(f"{where} is not a JSON value")

    walk(value, 0, field)
    try:
        size = len(json.dumps(value, separators=(",", ":")).encode())
    except (TypeError, ValueError):
        raise InvalidInput(f"{field} is not JSON") from None
    if size > max_bytes:
        raise InvalidInput(f"{field} is {size} bytes as JSON; at most {max_bytes} are allowed")
    return value


def payload(value: Any, *, field: str = "payload") -> dict:
    """A root action's input: a JSON object within MAX_PAYLOAD_BYTES whose well-known fields (ticket,
    amount_cents, currency, email, source) are what they claim to be."""
    if not isinstance(value, dict):
        raise InvalidInput(f"{field} must be a JSON object")
    json_value(value, field=field, max_bytes=MAX_PAYLOAD_BYTES)
    for name, check in _KNOWN_FIELDS.items():
        if name not in value or (name in ("ticket", "email") and value[name] in (None, "")):
            continue  # an agent's own payload may leave them empty
        check(value[name])
    return value


# --- the recording protocol's calls (provenance.recording.protocol; single and batched calls alike) -------------
# A fact value an agent writes over the protocol: facts are read back by every later action and shown
# in the admin, so they stay small; documents belong in sources, which are ingested by id.
MAX_RECORDED_FACT_BYTES = 16 * 1024
CLOCKS = ("valid_from", "valid_until", "observed_at")


def clock(value: Any, *, field: str) -> str | None:
    """An ISO 8601 date or date-time (None: unset), returned as given."""
    from datetime import date, datetime

    if value is None:
        return None
    identifier(value, field=field, max_length=64)
    try:
        datetime.fromisoformat(value)
    except ValueError:
        try:
            date.fromisoformat(value)
        except ValueError:
            raise InvalidInput(f"{field} is not an ISO 8601 date or date-time (e.g. 2026-03-01T12:00:00Z)") from None
    return value


def set_call(body: dict) -> None:
    """A protocol `set`: its clocks are dates and its value within MAX_RECORDED_FACT_BYTES."""
    for name in CLOCKS:
        clock(body.get(name), field=name)
    json_value(body.get("value"), field="value", max_bytes=MAX_RECORDED_FACT_BYTES)


def effect_ticket(*, workspace: str, ticket: Any, external: Any) -> None:
    """A live protocol effect names one of the workspace's desk tickets, unless the call says the ticket
    is not one (`external: true`): money and mail are reconciled against the ticket later, and an effect
    on a ticket nobody knows cannot be."""
    from provenance.models import Ticket

    if external not in (None, False, True):
        raise InvalidInput("external must be true or false")
    if external or ticket in (None, ""):
        return
    ticket = ticket_id(ticket)
    if not Ticket.objects.filter(workspace__name=workspace, ticket_id=ticket).exists():
        raise InvalidInput(f"the effect's ticket {ticket!r} is not a ticket of this workspace; say external: true "
                           f"if it is not a desk ticket")
