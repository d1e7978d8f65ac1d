"""What every connector is: the item kinds it delivers, the options it takes (a schema: anything else
is refused), whether it is configured, and one `send` whose failures say whether a retry can help.

Every connection a connector makes passes core.egress: `destinations` names where it would connect
(checked when the connector is chosen), and `send` connects only through core.egress (checked again
then, at the address connected to). A failure is told in fixed words, never the remote side's text."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Collection

from core import egress, secret_registry


@dataclass(frozen=True)
class Outcome:
    state: str  # a compensation.delivery_models.DeliveryState value
    reference: str = ""
    status_code: int | None = None
    detail: str = ""


class DeliveryFailure(Exception):
    """A fixed-vocabulary reason, with at most a number of the remote side's (a status or reply code):
    never its text, which may carry internal names and addresses."""

    def __init__(self, detail: str, *, status_code: int | None = None):
        super().__init__(detail)
        self.detail = detail[:300]
        self.status_code = status_code


class TemporaryFailure(DeliveryFailure):
    """The provider is away or asked to come back later: retried with backoff."""


class PermanentFailure(DeliveryFailure):
    """The provider refused for good: the item is failed with the reason, and a person decides."""


@dataclass(frozen=True)
class Option:
    """One option a connector takes: its JSON type and what it is (`role`): "url" or "host" and "port"
    (where the connector connects: checked against the egress policy), "secret" (a name from the secret
    registry, core.secret_registry), "email", or "" (a plain setting)."""

    type: type
    role: str = ""
    required: bool = False


def _type_problem(key: str, value, option: Option) -> str | None:
    if option.type is int and (isinstance(value, bool) or not isinstance(value, int)):
        return f"option {key!r} must be a whole number"
    if not isinstance(value, option.type):
        return f"option {key!r} must be {'true or false' if option.type is bool else 'a string'}"
    if option.role == "port" and not 0 < value < 65536:
        return f"option {key!r} must be a port number (1-65535)"
    if option.type is str and (len(value) > 2000 or "\x00" in value):
        return f"option {key!r} is too long or holds a NUL"
    if option.role == "email" and ("@" not in value or any(c in value for c in "\r\n")):
        return f"option {key!r} must be an email address"
    return None


class Connector:
    name: str = ""
    label: str = ""
    kinds: Collection[str] = frozenset()  # a KindSet for kinds read from their specs
    schema: dict[str, Option] = {}  # every connector declares its own, even an empty one
    # The setting naming the API base it calls when no option says where (Stripe's): checked like an option.
    base_setting: str = ""
    # True when repeating a send after a crash sends nothing twice (an idempotency key the provider
    # honours). False (SMTP): a send cut off mid-answer becomes `uncertain` instead of being repeated.
    resumes_safely: bool = True
    # option -> the environment variable it names by default; the value is the secret, shown only as
    # "set" or "missing" (compensation.delivery.connectors.config.rows).
    secret_options: dict[str, str] = {}

    def configured(self, options: dict, *, workspace: str) -> bool:
        return True

    def destinations(self, options: dict) -> list[str]:
        """Where `send` would connect with these options, as URLs (`smtp://host:port` for a mail server):
        each must pass the egress policy when the connector is chosen. None: it connects nowhere."""
        return []

    def exempt(self, options: dict) -> frozenset[tuple[str, int]]:
        """(host, port) among the deployment's own services this connector exists to reach (the operator's
        own mail relay), never one a workspace's option can add."""
        return frozenset()

    def secret(self, options: dict, option: str, *, workspace: str) -> str:
        """The value of the registered secret an option names (or its default name); "" when unset.
        SecretRefused when the name is not registered for the workspace."""
        return secret_registry.value(options.get(option) or self.secret_options[option], workspace=workspace)

    def validate(self, options: dict, *, workspace: str) -> dict:
        """The options as stored, or ValueError saying what is wrong: an unknown key or a wrong type, a
        secret name the registry does not hold for the workspace, a destination the egress policy refuses."""
        unknown = sorted(set(options) - set(self.schema))
        if unknown:
            known = ", ".join(sorted(self.schema)) or "none"
            raise ValueError(f"connector {self.name!r} takes no option {', '.join(map(repr, unknown))[:200]} "
                             f"(its options: {known})")
        for key, option in self.schema.items():
            if key not in options:
                if option.required:
                    raise ValueError(f"connector {self.name!r} needs the option {key!r}")
                continue
            problem = _type_problem(key, options[key], option)
            if problem:
                raise ValueError(problem)
            if option.role == "secret":
                secret_registry.entry(options[key], workspace=workspace)
        for url in self.destinations(options):
            egress.check_url(url, exempt=self.exempt(options), schemes=("http", "https", "smtp"))
        return dict(options)

    def send(self, item, options: dict) -> Outcome:  # pragma: no cover - every connector overrides it
        raise NotImplementedError

    def executed(self, item) -> dict:
        """What the item's `item.executed` audit row records beyond the delivery's state and reference."""
        return {}


CONNECTORS: dict[str, Connector] = {}


def register(instance: Connector) -> Connector:
    CONNECTORS[instance.name] = instance
    return instance


def unregister(name: str) -> None:
    CONNECTORS.pop(name, None)


def connector(name: str) -> Connector:
    """The registered connector `name` (the built-in ones are registered when the app is ready)."""
    try:
        return CONNECTORS[name]
    except KeyError:
        raise ValueError(f"no connector named {name!r} (known: {', '.join(sorted(CONNECTORS))})") from None
