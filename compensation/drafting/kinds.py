"""The review item kinds: one spec per kind owns every decision about it (what the reviewer decides, the
words its draft starts from, its checks, the fields a reviewer may change, the order a case's items leave
in, the connector it leaves through), and every set of kinds is read from the specs (MONEY, MESSAGES,
COMPENSATING). The built-in kinds are registered in compensation.drafting.item_kinds (loaded when the app is
ready); a team registers its own (`register_item_kind`) with an effect kind naming it.

An unknown kind fails loudly (UnknownKind) wherever a decision about it is asked (`spec`): there is no
default order, connector, wording or set of fields to fall back to. This module imports nothing of the
app, so the model can read its sets from here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator, NamedTuple


class UnknownKind(KeyError):
    """A review item kind nobody registered."""

    def __str__(self) -> str:
        return f"unknown review item kind {self.args[0]!r}: register it (compensation.drafting.kinds.register_item_kind)"


class Written(NamedTuple):
    """A draft's fields (to, subject, body, amount_cents, currency, payment_reference) and who wrote them."""

    fields: dict
    by: str
    prompt_version: str = ""


@dataclass(frozen=True)
class ModelWords:
    """A kind whose words the model writes: its task (provenance.llm.ModelTask), the model input it may
    read from the item's facts, and the draft's fields from the model's answer and the facts."""

    task: object
    request: Callable[[dict], dict]
    fields: Callable[[dict, dict], dict]


@dataclass(frozen=True)
class ItemKind:
    name: str
    decides: str  # what the reviewer decides, in the reviewer's words
    validate: Callable[[dict, dict], list[str]]  # (draft, facts) -> problems
    order: int  # where it leaves within its case: money first, then the email that explains it, then the rest
    # The registered connector (compensation.delivery.connectors) that delivers it unless the deployment or the
    # workspace chose another: how an item leaves is the connector's alone.
    connector: str
    editable: tuple[str, ...] = ("body",)  # the draft's fields a reviewer may change
    moves_money: bool = False  # its amount leaves (or comes back) as money
    message: bool = False  # it is a message to the customer (to, subject, body)
    compensates: bool = False  # it compensates an effect that already left (else the repair's replacement, held)
    needs_ticket: bool = True  # drafted from the ticket's customer and payment
    reason_required: bool = False  # approving must say what was done
    # Its words, one of the two: written by kintsugi, (planned item, facts, the workspace's effect kinds) ->
    # Written; or by the model (compensation.drafting.drafts asks it, and falls back to an invalid draft on failure).
    words: Callable[[object, dict, Callable], Written] | None = None
    model_words: ModelWords | None = None

    def __post_init__(self) -> None:
        if (self.words is None) == (self.model_words is None):
            raise ValueError(f"item kind {self.name!r} needs its words: either `words` or `model_words`")

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


def spec(name: str) -> ItemKind:
    """The kind's spec; UnknownKind for a kind nobody registered."""
    try:
        return ITEM_KINDS[name]
    except KeyError:
        raise UnknownKind(name) from None


class KindSet:
    """The registered kinds whose spec satisfies `test`, read at each use (a kind registered later is in)."""

    def __init__(self, test: Callable[[ItemKind], bool]):
        self._test = test

    def __iter__(self) -> Iterator[str]:
        return iter(sorted((k.name for k in ITEM_KINDS.values() if self._test(k)), key=lambda n: ITEM_KINDS[n].order))

    def __contains__(self, name) -> bool:
        found = ITEM_KINDS.get(name)
        return found is not None and self._test(found)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __repr__(self) -> str:
        return f"KindSet({list(self)})"


# Every set of kinds a query or a connector needs, read from the specs at each use.
COMPENSATING = KindSet(lambda k: k.compensates)  # compensate an effect that already left
MONEY = KindSet(lambda k: k.moves_money)
MESSAGES = KindSet(lambda k: k.message)
