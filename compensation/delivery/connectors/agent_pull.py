"""For a team that performs its own effects: the approved item waits for the team's agent, which pulls
it with the workspace's recording token and acknowledges it (kintsugi_site.api.compensations,
compensation.delivery.acknowledgements).

Nothing leaves kintsugi here. `send` only offers the item: its delivery becomes `awaiting_ack` and the
item stays approved; the agent's answer "performed" makes the delivery `delivered` and the item executed,
"failed" makes it `failed` for a person ("deliver again" offers it once more, with the same execution
key). The agent carries that key to its own provider, so a repeated offer is performed once."""
from __future__ import annotations

from compensation.delivery.connectors.base import Connector, Outcome, register
from compensation.drafting.kinds import KindSet
from compensation.delivery_models import DeliveryState


class AgentPull(Connector):
    name, label = "agent_pull", "the team's agent (pull)"
    kinds = KindSet(lambda k: True)  # every registered kind
    resumes_safely = True  # offering twice is one offer: the delivery row is the offer
    schema = {}  # no options: the agent comes to kintsugi, kintsugi connects nowhere

    def send(self, item, options: dict) -> Outcome:
        return Outcome(DeliveryState.AWAITING_ACK, detail="offered to the team's agent")


register(AgentPull())
