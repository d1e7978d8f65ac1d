"""Effect kinds: for each kind of external effect an agent records (`rec.effect(kind, ...)`), how it
leaves the system, how it is compensated once a repair invalidates it, and how that compensation's draft
is validated; which connector delivers it (compensation.delivery.connectors owns how it leaves).

Two registries, one per side of a repair:
- `EffectKind` (by the effect's kind, "refund", "email", ...): `dispatch` sends a live effect when the
  recorder flushes it (None: kintsugi records the effect and the agent performs it itself); `compensated_by`
  and `replaced_by` name the review item drafted for an invalidated effect and for a held replacement;
  `nets` says which per-ticket netting of compensation.drafting.netting a kind goes through: "money" (refunds,
  and money kinds reversed like them: each such kind netted on its own), "message" (emails, and message
  kinds corrected like them); the others get one item each. `money` kinds carry their amount onto
  their item, whatever it is: never $0.00 with the amount only in the text.
- `ItemKind` (by the review item's kind, compensation.drafting.kinds): every decision about the item kind; the
  built-in ones are registered in compensation.drafting.item_kinds.
Three ways a kind gets its registration, first match wins: the built-ins and kinds registered in Python
(`register`), a kind the workspace's agents declared over the API (provenance.access.effect_declarations,
read here through `kinds_of(workspace_id)`), and for any other kind `MANUAL`: never dropped, its item
carries the original effect with its amount, labelled as a kind nobody declared, and asks a person to
compensate it by hand (its approval records what they did).

A team's own effect kind names one of the built-in item kinds (usually the manual one), or an item kind
of its own registered with compensation.drafting.kinds.register_item_kind (its spec then drafts, orders and validates
it, and names the connector that delivers it: tests/compensation/test_registered_item_kind.py). Limits: the admin's kind filter and
labels list the CompensationItem.Kind choices; a registered kind shows under its name.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from compensation.drafting import item_kinds  # noqa: F401  (the built-in item kinds this module's effect kinds name)
from compensation.drafting.kinds import ITEM_KINDS
from compensation.models import CompensationItem
from provenance.recording import effects as dispatchers
from provenance.access.effect_declarations import declarations

K = CompensationItem.Kind


@dataclass(frozen=True)
class EffectKind:
    name: str
    dispatch: Callable[..., None] | None  # (workspace, run_number, [(row, details, key)]); None: not ours to send
    compensated_by: str
    replaced_by: str
    nets: str = ""  # "money" / "message": the per-ticket netting it goes through; "": one item each
    decides: str = ""  # overrides the item kind's wording for this effect kind (e.g. a registered custom kind)
    money: bool = False  # its amount is money that left: its item carries it
    declared: bool = False  # declared by the workspace's agents over the API
    target: str = ""  # the details key naming what it acts on

    @property
    def undeclared(self) -> bool:
        """MANUAL: a kind nobody registered or declared."""
        return not self.name


EFFECT_KINDS: dict[str, EffectKind] = {}


def register(kind: EffectKind) -> EffectKind:
    """Register (or replace) how an effect kind is dispatched and compensated. Its item kinds must be
    registered item kinds."""
    for name in (kind.compensated_by, kind.replaced_by):
        if name not in ITEM_KINDS:
            raise ValueError(f"effect kind {kind.name!r}: {name!r} is not a review item kind")
    EFFECT_KINDS[kind.name] = kind
    dispatchers.set_dispatcher(kind.name, kind.dispatch)  # the recorder's flush sends by provenance's table
    return kind


def unregister(name: str) -> None:
    if name in ("refund", "email"):
        raise ValueError(f"{name!r} is built in")
    EFFECT_KINDS.pop(name, None)
    dispatchers.set_dispatcher(name, None)


register(EffectKind("refund", dispatchers.pay_refunds, K.REFUND_REVERSAL, K.REPLACEMENT_REFUND, nets="money",
                    money=True))
register(EffectKind("email", dispatchers.send_emails, K.CORRECTION_EMAIL, K.REPLACEMENT_EMAIL, nets="message"))
# What every kind nobody registered gets: recorded, never dispatched by kintsugi, compensated by hand.
MANUAL = EffectKind("", None, K.MANUAL_COMPENSATION, K.MANUAL_COMPENSATION)


def effect_kind(name: str) -> EffectKind:
    """The registration of an effect kind in Python; MANUAL for any other (see kinds_of for a workspace's)."""
    return EFFECT_KINDS.get(name, MANUAL)


_DECLARED_ITEMS = {"reversed": (K.REFUND_REVERSAL, K.REPLACEMENT_REFUND, "money"),
                   "manual": (K.MANUAL_COMPENSATION, K.MANUAL_COMPENSATION, ""),
                   "message": (K.CORRECTION_EMAIL, K.REPLACEMENT_EMAIL, "message")}


def declared_kind(row) -> EffectKind:
    """The registration a workspace's declaration (provenance.models.EffectKindDeclaration) stands for."""
    compensated_by, replaced_by, nets = _DECLARED_ITEMS[row.compensation]
    return EffectKind(row.name, None, compensated_by, replaced_by, nets=nets, decides=row.decides, money=row.money,
                      declared=True, target=row.target)


def kinds_of(workspace_id: int | None) -> Callable[[str], EffectKind]:
    """How each effect kind of a workspace is compensated: registered in Python, else declared by its
    agents, else MANUAL. Read once per call (a drafting pass), so a declaration applies from the next."""
    declared = ({name: declared_kind(row) for name, row in declarations(workspace_id).items()}
                if workspace_id else {})
    return lambda name: EFFECT_KINDS.get(name) or declared.get(name) or MANUAL


def registered(name: str) -> bool:
    return name in EFFECT_KINDS


def decides(item: CompensationItem) -> str:
    """What the reviewer decides on `item`, in words."""
    kinds = kinds_of(item.incident.workspace_id)
    for e in item.original:
        override = kinds(e.get("kind", ""))
        if override is not MANUAL and override.decides and override.compensated_by == item.kind:
            return override.decides
    found = ITEM_KINDS.get(item.kind)
    return found.decides if found else ""


def item_for(effect: dict, kinds: Callable[[str], EffectKind] = effect_kind) -> str:
    """The review item kind for one effect (a RepairEffect-shaped dict) outside the netting."""
    registration = kinds(effect["kind"])
    return registration.compensated_by if effect["role"] == "invalidated" else registration.replaced_by
