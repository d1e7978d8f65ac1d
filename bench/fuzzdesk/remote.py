"""The fuzz desks over HTTP: each desk is set up and recorded through kintsugi's API by the public Python
client (kintsugi_client), its agents registered as remote agents, so the repair re-runs them through
their replay endpoint; the repaired state is then compared with the reference's clean run exactly as
for a desk recorded in-process (bench.fuzzdesk.harness).

The remote agents run the harness's own interpreter (harness.interpret) under names of their own,
fuzz_remote_0 .. fuzz_remote_3 (a registration may not take an in-process agent's name): a desk's
root agent fuzz_agent_K is recorded as fuzz_remote_K, and its handoffs go to fuzz_remote agents. One
kintsugi_client Desk per workspace serves their replays on a loopback port of its own, checking
kintsugi's signature with the secrets the registrations answered with.
"""
from __future__ import annotations

import uuid
from contextlib import contextmanager

from bench.common import _free_port
from bench.fuzzdesk import harness
from bench.fuzzdesk.programs import AGENTS, DECLARED, commit_order, shapes
from provenance.models import Workspace

PREFIX = "fuzz_remote"
REASON = "repair fuzzer over HTTP"


def remote_name(agent: str) -> str:
    """The remote agent a desk's root agent (fuzz_agent_K) is recorded as."""
    return f"{PREFIX}_{agent.rsplit('_', 1)[1]}"


def _run(rec, payload: dict) -> dict:
    return harness.interpret(rec, payload, prefix=PREFIX)


class RemoteDesk:
    """A desk's workspace made through the API by a person's token (`admin`, a kintsugi_client Client
    of a superuser or Workspace admin), its agents registered with a replay endpoint this desk serves."""

    def __init__(self, admin, desk: dict, *, name: str | None = None):
        from kintsugi_client import Client, Desk

        self.desk, self.name = desk, name or f"fh-{uuid.uuid4().hex[:10]}"
        made = admin.request("POST", "/api/v1/workspaces/", {"name": self.name, "reason": REASON})
        for source_id, content in desk["sources"].items():
            admin.create_source(made["id"], source_id, content, title=source_id, reason=REASON)
        for ticket, paid in desk["tickets"].items():
            admin.create_ticket(made["id"], ticket, reason=REASON, customer_name=f"Customer {ticket}",
                                customer_email=f"{ticket}@example.com", subject="order", body="where is it",
                                amount_cents=paid, payment_reference=f"ch_{ticket}")
        port = _free_port()
        url = f"http://127.0.0.1:{port}/replay"
        secrets = {f"{PREFIX}_{i}": admin.register_agent(made["id"], f"{PREFIX}_{i}", url, reason=REASON)["replay_secret"]
                   for i in range(AGENTS)}
        key = admin.issue_agent_token(made["id"], label="fuzz agents", reason=REASON)
        self.agents = Desk(Client(admin.base_url, key), replay_secret=secrets)
        for agent_name in secrets:
            self.agents.agent(agent_name)(_run)
        self.server = self.agents.serve_replays("127.0.0.1", port, block=False)

    def record(self) -> Workspace:
        """Record the desk's roots, each with its handoffs depth first, one recording per root; a root
        recorded beside the next one opens its recording before the next one's and commits after it."""
        if "declared effect kind" in shapes(self.desk):  # the agents' side declares the kind it records
            self.agents.client.request("POST", "/api/v1/recording/effect-kinds/", {**DECLARED, "reason": REASON})
        opened: dict | None = None
        order = commit_order(self.desk)
        for n, (root, _) in enumerate(order):
            agent, payload = remote_name(root["agent"]), {"ticket": root["ticket"], "ops": root["ops"]}
            if n + 1 < len(order) and order[n + 1][1]:  # the next root to commit opened before this one
                nxt = order[n + 1][0]
                opened = self.agents.client.open_action(remote_name(nxt["agent"]),
                                                        {"ticket": nxt["ticket"], "ops": nxt["ops"]})
                self.agents.run_root(agent, payload)
            else:
                self.agents.run_root(agent, payload, opened=opened)
                opened = None
        return Workspace.objects.get(name=self.name)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@contextmanager
def served(admin, desk: dict, *, name: str | None = None):
    """A RemoteDesk serving its replays for the block's length."""
    remote = RemoteDesk(admin, desk, name=name)
    try:
        yield remote
    finally:
        remote.stop()


def check(desk: dict, *, admin, actor) -> list[str]:
    """harness.check over HTTP: recorded through the API, flagged and repaired here (the re-runs and the
    whole-desk replay through the replay endpoint), compared with the reference's clean run."""
    with served(admin, desk) as remote:
        ws = remote.record()
        incidents = harness.repair(ws, desk, actor=actor)
        return harness.differences(desk, ws, incidents) + harness.verifications(incidents)
