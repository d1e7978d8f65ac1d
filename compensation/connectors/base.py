"""What every connector is: the item kinds it delivers, whether it is configured, and one `send` whose
failures say whether a retry can help."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Outcome:
    state: str  # a compensation.delivery_models.DeliveryState value
    reference: str = ""
    status_code: int | None = None
    detail: str = ""


class DeliveryFailure(Exception):
    """A fixed-vocabulary reason (never the remote party's free text, except a mail server's or Stripe's
    own failure reason, which the item shows escaped)."""

    def __init__(self, detail: str, *, status_code: int | None = None):
        super().__init__(detail)
        self.detail = detail[:300]
        self.status_code = status_code


class TemporaryFailure(DeliveryFailure):
    """The provider is away or asked to come back later: retried with backoff."""


class PermanentFailure(DeliveryFailure):
    """The provider refused for good: the item is failed with the reason, and a person decides."""


class Connector:
    name: str = ""
    label: str = ""
    kinds: frozenset[str] = frozenset()
    # True when repeating a send after a crash sends nothing twice (an idempotency key the provider
    # honours). False (SMTP): a send cut off mid-answer becomes `uncertain` instead of being repeated.
    resumes_safely: bool = True
    # option -> the environment variable it names by default; the value is the secret, shown only as
    # "set" or "missing" (compensation.connectors.config.rows).
    secret_options: dict[str, str] = {}

    def configured(self, options: dict) -> bool:
        return True

    def send(self, item, options: dict) -> Outcome:  # pragma: no cover - every connector overrides it
        raise NotImplementedError


CONNECTORS: dict[str, Connector] = {}


def register(instance: Connector) -> Connector:
    CONNECTORS[instance.name] = instance
    return instance


def connector(name: str) -> Connector:
    from compensation.connectors import registry  # noqa: F401  (registers the built-in connectors)

    try:
        return CONNECTORS[name]
    except KeyError:
        raise ValueError(f"no connector named {name!r} (known: {', '.join(sorted(CONNECTORS))})") from None
