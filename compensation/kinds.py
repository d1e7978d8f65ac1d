"""The review item kinds: one spec per kind owns every decision about it, and every list of kinds is read
from the specs (CompensationItem.MONEY_KINDS, EMAIL_KINDS and COMPENSATION_KINDS, the editable fields,
the order a case's items leave in, the default connectors). The built-in kinds are registered in
compensation.effect_kinds; a team registers its own (`register_item_kind`) with an effect kind naming it.

An unknown kind fails loudly (UnknownKind) wherever a decision about it is asked: there is no default
order, connector or set of fields to fall back to. This module imports nothing of the app, so the model
can read its lists from here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator


class UnknownKind(KeyError):
    """A review item kind nobody registered."""

    def __str__(self) -> str:
        return f"unknown review item kind {self.args[0]!r}: register it (compensation.kinds.register_item_kind)"


@dataclass(frozen=True)
class ItemKind:
    name: str
    decides: str  # what the reviewer decides, in the reviewer's words
    validate: Callable[[dict, dict], list[str]]  # (draft, facts) -> problems
    order: int  # where it leaves within its case: money first, then the email that explains it, then the rest
    # The registered connector (compensation.connectors) that delivers it unless the deployment or the
    # workspace chose another: how an item leaves is the connector's alone.
    connector: str
    editable: tuple[str, ...] = ("body",)  # the draft's fields a reviewer may change
    moves_money: bool = False  # its amount leaves (or comes back) as money
    message: bool = False  # it is a message to the customer (to, subject, body)
    compensates: bool = False  # it compensates an effect that already left (else the repair's replacement, held)
    needs_ticket: bool = True  # drafted from the ticket's customer and payment
    reason_required: bool = False  # approving must say what was done
    # (planned item, facts) -> draft fields, for a kind drafted without the built-in drafting's model tasks
    draft: Callable[[object, dict], dict] | None = None

    @property
    def held(self) -> bool:
        """A replacement the repair produced, held until a person approves it."""
        return not self.compensates


ITEM_KINDS: dict[str, ItemKind] = {}


def register_item_kind(kind: ItemKind) -> ItemKind:
    ITEM_KINDS[kind.name] = kind
    return kind


def unregister_item_kind(name: str) -> None:
    ITEM_KINDS.pop(name, None)


def _loaded() -> dict[str, ItemKind]:
    from compensation import effect_kinds  # noqa: F401  (registers the built-in kinds)

    return ITEM_KINDS


def spec(name: str) -> ItemKind:
    """The kind's spec; UnknownKind for a kind nobody registered."""
    try:
        return _loaded()[name]
    except KeyError:
        raise UnknownKind(name) from None


class KindSet:
    """The registered kinds whose spec satisfies `test`, read at each use (a kind registered later is in)."""

    def __init__(self, test: Callable[[ItemKind], bool]):
        self._test = test

    def __iter__(self) -> Iterator[str]:
        return iter(sorted((k.name for k in _loaded().values() if self._test(k)), key=lambda n: ITEM_KINDS[n].order))

    def __contains__(self, name) -> bool:
        found = _loaded().get(name)
        return found is not None and self._test(found)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __repr__(self) -> str:
        return f"KindSet({list(self)})"


class KindMap:
    """`field` of each registered kind's spec by kind name; UnknownKind for any other name."""

    def __init__(self, field: str):
        self._field = field

    def __getitem__(self, name: str):
        return getattr(spec(name), self._field)

    def __iter__(self) -> Iterator[str]:
        return iter(_loaded())

    def items(self):
        return [(name, getattr(k, self._field)) for name, k in _loaded().items()]

    def __contains__(self, name) -> bool:
        return name in _loaded()
