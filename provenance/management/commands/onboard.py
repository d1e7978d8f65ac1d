import json
from pathlib import Path

from provenance.access import onboarding
from core.commands import KintsugiCommand
from provenance.recording.services import get_workspace
from core.users import get_user
from core.vocabulary import Via

VIA = Via.CLI


class Command(KintsugiCommand):
    help = ("Set up a workspace for its agents without the admin: create it, put its sources and tickets, "
            "register agents that run in other processes (with their replay endpoint) and issue or revoke "
            "recording tokens. Each change is made as --user (a superuser or a Workspace admin) with a --reason "
            "and lands in the audit record.")

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="what", required=True)

        def change(name, help):
            p = sub.add_parser(name, help=help)
            p.add_argument("--user", required=True, help="who makes the change")
            p.add_argument("--reason", required=True)
            p.add_argument("--json", action="store_true")
            return p

        p = change("workspace", "create a workspace (its creator becomes a member)")
        p.add_argument("--name", required=True)
        p = change("source", "create a source or replace its content")
        p.add_argument("--workspace", required=True)
        p.add_argument("--source", required=True)
        p.add_argument("--title", default="")
        p.add_argument("--trust", choices=["untrusted", "unknown", "trusted"])
        group = p.add_mutually_exclusive_group(required=True)
        group.add_argument("--content")
        group.add_argument("--content-file", type=Path)
        p = change("ticket", "create a ticket or change its fields")
        p.add_argument("--workspace", required=True)
        p.add_argument("--ticket", required=True)
        p.add_argument("--fields", required=True, help='JSON: {"customer_name": ..., "amount_cents": ...}')
        p = change("agent", "register an agent in another process with its replay endpoint (its replay signing "
                            "secret is printed once), or give an existing one a new secret (--rotate-secret)")
        p.add_argument("--workspace", required=True)
        p.add_argument("--name", required=True)
        p.add_argument("--replay-url", help="needed to register or re-point the agent")
        p.add_argument("--timeout", type=int, default=30)
        p.add_argument("--rotate-secret", action="store_true",
                       help="replace the registered agent's replay signing secret (the new one is printed once)")
        p = change("token", "issue a recording token (the key is printed once)")
        p.add_argument("--workspace", required=True)
        p.add_argument("--label", required=True)
        p.add_argument("--agent", action="append", default=[], help="only as this agent (repeatable)")
        p.add_argument("--expires-in", type=int, metavar="DAYS", help="refused after this many days (default: never)")
        p = change("revoke-token", "revoke a recording token")
        p.add_argument("--workspace", required=True)
        p.add_argument("--token-id", type=int, required=True)
        p = change("rotate-token", "replace a recording token: a new key (printed once), the old one revoked")
        p.add_argument("--workspace", required=True)
        p.add_argument("--token-id", type=int, required=True)
        p.add_argument("--expires-in", type=int, metavar="DAYS", help="the new key is refused after this many days")

    def handle(self, *args, **o):
        actor = get_user(o["user"])
        what = o["what"]
        if what == "workspace":
            ws = onboarding.create_workspace(name=o["name"], actor=actor, reason=o["reason"], via=VIA)
            return self._out(o, {"workspace": ws.name, "id": ws.pk}, f"created workspace {ws.name} (id {ws.pk})")
        ws = get_workspace(o["workspace"])
        common = dict(actor=actor, reason=o["reason"], via=VIA)
        if what == "source":
            content = o["content"] if o["content"] is not None else o["content_file"].read_text()
            source, created = onboarding.put_source(workspace=ws, source_id=o["source"], content=content,
                                                    title=o["title"], trust=o["trust"], **common)
            return self._out(o, {"source": source.source_id, "created": created},
                             f"{'created' if created else 'changed'} source {source.source_id}")
        if what == "ticket":
            try:
                fields = json.loads(o["fields"])
            except json.JSONDecodeError as exc:
                raise ValueError(f"--fields is not JSON: {exc.msg}") from None
            if not isinstance(fields, dict):
                raise ValueError("--fields must be a JSON object")
            ticket, created = onboarding.put_ticket(workspace=ws, ticket_id=o["ticket"], fields=fields, **common)
            return self._out(o, ticket.as_payload() | {"created": created},
                             f"{'created' if created else 'changed'} ticket {ticket.ticket_id}")
        if what == "agent":
            return self._agent(o, ws, common)
        if what == "token":
            token, key = onboarding.issue_agent_token(workspace=ws, label=o["label"], agents=o["agent"],
                                                      expires_in_days=o["expires_in"], **common)
            return self._out(o, {"id": token.pk, "key": key, "agents": token.agents,
                                 "expires_at": token.expires_at}, key)
        token = ws.agent_tokens.filter(pk=o["token_id"]).first()
        if token is None:
            raise LookupError(f"no recording token {o['token_id']} in workspace {ws.name!r}")
        if what == "rotate-token":
            new, key = onboarding.rotate_agent_token(token=token, expires_in_days=o["expires_in"], **common)
            return self._out(o, {"id": new.pk, "key": key, "replaces": token.pk, "expires_at": new.expires_at}, key)
        onboarding.revoke_agent_token(token=token, **common)
        return self._out(o, {"id": token.pk, "revoked_at": token.revoked_at}, f"revoked token {token.pk}")

    def _agent(self, o, ws, common) -> None:
        if o["rotate_secret"]:
            reg = ws.agent_registrations.filter(name=o["name"]).first()
            if reg is None:
                raise LookupError(f"no agent {o['name']!r} registered in workspace {ws.name!r}")
            if o["replay_url"] is not None:
                raise ValueError("--rotate-secret changes only the secret; re-point the agent without it")
            reg = onboarding.rotate_replay_secret(registration=reg, **common)
            return self._out(o, {"agent": reg.name, "replay_secret": reg.replay_secret},
                             f"new replay secret for agent {reg.name} (shown once; the old one is refused now): "
                             f"{reg.replay_secret}")
        if o["replay_url"] is None:
            raise ValueError("--replay-url is needed to register or re-point an agent")
        reg, created = onboarding.register_agent(workspace=ws, name=o["name"], replay=o["replay_url"],
                                                 timeout_seconds=o["timeout"], **common)
        data = {"agent": reg.name, "replay_url": reg.replay_url, "created": created}
        if not created:
            return self._out(o, data, f"changed agent {reg.name} -> {reg.replay_url} (its replay secret is kept)")
        return self._out(o, data | {"replay_secret": reg.replay_secret},
                         f"registered agent {reg.name} -> {reg.replay_url}\n"
                         f"replay secret (shown once; replays are signed with it): {reg.replay_secret}")

    def _out(self, o, data, line) -> None:
        if o["json"]:
            self.print_json(data)
        else:
            self.stdout.write(line)
