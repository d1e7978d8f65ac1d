"""Every admin URL, as requests a member of workspace A makes against workspace B's objects, and the
check that none of them shows or changes anything of B.

`requests_for(name, b)` knows each admin URL by name. The URLs come from the resolver, not from this
file: a view added to the admin without an entry here makes `unknown_admin_urls()` name it, so a view
nobody has written yet cannot slip past the tenancy test.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from types import SimpleNamespace

from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.contenttypes.models import ContentType
from django.urls import reverse

from kintsugi_site.screens import admin_url_names  # every URL name of the admin site

# Models whose object URLs (change, history, delete) take a workspace's object; value: B's object pk.
OBJECT_MODELS = {
    "provenance_workspace": lambda b: b.workspace.pk,
    "provenance_source": lambda b: b.source.pk,
    "provenance_ticket": lambda b: b.ticket.pk,
    "provenance_ledgerentry": lambda b: b.ledger.pk,
    "provenance_outboxemail": lambda b: b.outbox.pk,
    "repairs_incident": lambda b: b.incident.pk,
    "repairs_incidenttransition": lambda b: b.transition.pk,
    "compensation_compensationitem": lambda b: b.item.pk,
    "compensation_auditevent": lambda b: b.event.pk,
    "provenance_agentregistration": lambda b: b.agent.pk,
    "provenance_agenttoken": lambda b: b.agent_token.pk,
    "compensation_workspaceconnector": lambda b: b.connector.pk,
    "compensation_messagetemplate": lambda b: b.template.pk,
    # Not workspace data: only superusers have these permissions, so members of A get 403.
    "auth_user": lambda b: b.user.pk,
    "auth_group": lambda b: b.group.pk,
    "authtoken_tokenproxy": lambda b: b.token_user.pk,
}
B_EMAIL_DOMAIN = "@team-b.example"  # B's customers' addresses (A's desk has the canonical ones)
SITE_URLS = {"index", "login", "logout", "password_change", "password_change_done", "autocomplete", "jsi18n",
             "view_on_site", "app_list", None}


@dataclass
class Request:
    method: str
    path: str
    data: dict | None = None
    # "object": B's object: must answer 403/404. "list": a page of many: must show nothing of B.
    kind: str = "object"
    echo: str = ""  # what the page repeats back from the request (a search term): not a leak


def _object_requests(model: str, view: str, pk) -> list[Request]:
    url = reverse(f"admin:{model}_{view}", args=[pk])
    post = {"change": {"reason": "x", "members": [], "membership_reason": "x"}, "delete": {"post": "yes"},
            "history": {}}[view]
    return [Request("GET", url), Request("POST", url, post)]


def _list_requests(name: str, b) -> list[Request]:
    url = reverse(f"admin:{name}")
    model = name.rsplit("_", 1)[0]
    reqs = [Request("GET", url, kind="list"),
            Request("GET", f"{url}?workspace__id__exact={b.workspace.pk}", kind="list"),
            Request("GET", f"{url}?incident__id__exact={b.incident.pk}", kind="list"),
            Request("GET", f"{url}?q={b.workspace.name}", kind="list", echo=b.workspace.name)]
    if model == "compensation_compensationitem":
        selected = {ACTION_CHECKBOX_NAME: [b.item.pk], "index": 0}
        reqs += [Request("POST", url, {**selected, "action": "bulk_approve", "confirm": "yes", "reason": "x"}, "list"),
                 Request("POST", url, {**selected, "action": "bulk_approve"}, "list"),
                 Request("POST", url, {**selected, "action": "redraft"}, "list")]
    if model == "provenance_source":
        reqs.append(Request("POST", url, {ACTION_CHECKBOX_NAME: [b.source.pk], "index": 0, "action": "flag_sources"},
                            "list"))
    return reqs


def requests_for(name: str, b) -> list[Request] | None:
    """The requests that try workspace B through admin URL `name`; None for a URL this file does not know."""
    if name in SITE_URLS:
        ct = ContentType.objects.get(app_label="repairs", model="incident")
        return {
            "index": [Request("GET", reverse("admin:index"), kind="list")],
            "app_list": [Request("GET", reverse("admin:app_list", args=[app]), kind="list")
                         for app in ("provenance", "repairs", "compensation")],
            "autocomplete": [Request("GET", reverse("admin:autocomplete") + f"?app_label=repairs&model_name=incident"
                                            f"&field_name=incident&term={b.workspace.name}", kind="list",
                                            echo=b.workspace.name)],
            "view_on_site": [Request("GET", reverse("admin:view_on_site", args=[ct.pk, b.incident.pk]))],
            # Pages about the person themselves or no data at all; logout is left out (it ends the session).
            "login": [], "logout": [], "password_change": [], "password_change_done": [], "jsi18n": [], None: [],
        }[name]
    incident, item, source = b.incident.pk, b.item.pk, b.source.pk
    custom = {
        "provenance_source_flag": [Request("GET", reverse("admin:provenance_source_flag", args=[source])),
                                   Request("POST", reverse("admin:provenance_source_flag", args=[source]), {"reason": "x"})],
        "provenance_source_flag_many": [
            Request("GET", reverse("admin:provenance_source_flag_many") + f"?ids={source}"),
            Request("POST", reverse("admin:provenance_source_flag_many") + f"?ids={source}", {"reason": "x"})],
        "repairs_incident_progress": [Request("GET", reverse("admin:repairs_incident_progress", args=[incident]))],
        "repairs_incident_graph": [Request("GET", reverse("admin:repairs_incident_graph", args=[incident])),
                                   Request("GET", reverse("admin:repairs_incident_graph", args=[incident]) + "?overview=1")],
        "repairs_incident_explain": [Request("GET", reverse("admin:repairs_incident_explain", args=[incident])
                                             + f"?action={b.action_id}")],
        "repairs_incident_report": [Request("GET", reverse("admin:repairs_incident_report", args=[incident, fmt]))
                                    for fmt in ("json", "csv", "pdf")],
        "repairs_incident_retry": [Request("POST", reverse("admin:repairs_incident_retry", args=[incident]), {"reason": "x"})],
        "repairs_incident_close": [Request("GET", reverse("admin:repairs_incident_close", args=[incident])),
                                   Request("POST", reverse("admin:repairs_incident_close", args=[incident]), {"reason": "x"})],
        "repairs_incident_verify_full": [Request("POST", reverse("admin:repairs_incident_verify_full", args=[incident]),
                                                 {"reason": "x"})],
        "compensation_compensationitem_decide": [
            Request("POST", reverse("admin:compensation_compensationitem_decide", args=[item]), {"decision": d, "reason": "x"})
            for d in ("approve", "reject", "redraft", "edit_approve")] + [
            Request("POST", reverse("admin:compensation_compensationitem_decide", args=[item]),
                    {"decision": "set_customer", "customer_email": "x@team-a.example", "reason": "x"})],
        # Cases: B's case by its incident and ticket, its decisions, and the list filtered to B's incident.
        "compensation_compensationitem_cases": [
            Request("GET", reverse("admin:compensation_compensationitem_cases"), kind="list"),
            Request("GET", reverse("admin:compensation_compensationitem_cases") + "?status=all", kind="list"),
            Request("GET", reverse("admin:compensation_compensationitem_cases") + f"?incident={incident}&status=all")],
        "compensation_compensationitem_case": [
            Request("GET", reverse("admin:compensation_compensationitem_case", args=[incident, b.item.ticket_id])),
            Request("GET", reverse("admin:compensation_compensationitem_case", args=[incident, b.item.ticket_id])
                    + f"?incident={incident}")],
        # Bulk: B's cases ticked, or "all matching" B's incident: a 404, nothing decided or assigned.
        "compensation_compensationitem_cases_bulk": [
            Request("POST", reverse("admin:compensation_compensationitem_cases_bulk"),
                    {"case": [f"{incident}/{b.item.ticket_id}"], "decision": d, "confirm": "yes", "reason": "x"})
            for d in ("approve", "reject", "claim")] + [
            Request("POST", reverse("admin:compensation_compensationitem_cases_bulk"),
                    {"all_matching": "1", "filters": f"incident={incident}&state=all", "decision": "approve",
                     "confirm": "yes", "reason": "x"})],
        # The toast's undo takes no ids: what it takes back is the person's own last decision (their
        # session), read through the tenancy rule; with none remembered it undoes nothing.
        "compensation_compensationitem_cases_undo": [
            Request("POST", reverse("admin:compensation_compensationitem_cases_undo"), kind="list")],
        "compensation_compensationitem_case_decide": [
            Request("POST", reverse("admin:compensation_compensationitem_case_decide", args=[incident, b.item.ticket_id]),
                    data) for data in ({"decision": "approve_all"}, {"decision": "reject_all", "reason": "x"},
                                       {"decision": "approve", "item": item}, {"decision": "reject", "item": item,
                                                                                 "reason": "x"})],
        # Verifying: every chain A may see (a list: nothing of B on it), and B's chain by id (a 404).
        "compensation_auditevent_verify": [
            Request("GET", reverse("admin:compensation_auditevent_verify"), kind="list"),
            Request("GET", reverse("admin:compensation_auditevent_verify") + f"?workspace={b.workspace.pk}")],
        "provenance_source_trust": [Request("POST", reverse("admin:provenance_source_trust", args=[source]),
                                            {"trust": "untrusted", "reason": "x"})],
        "provenance_source_what_if_progress": [Request("GET", reverse("admin:provenance_source_what_if_progress",
                                                                      args=[source]))],
        "compensation_compensationitem_cases_next": [
            Request("POST", reverse("admin:compensation_compensationitem_cases_next"), {"incident": incident, "count": "5"})],
        "compensation_compensationitem_message": [
            Request("GET", reverse("admin:compensation_compensationitem_message", args=[item]))],
        "provenance_workspace_members": [
            Request("GET", reverse("admin:provenance_workspace_members", args=[b.workspace.pk]))] + [
            Request("POST", reverse("admin:provenance_workspace_members", args=[b.workspace.pk]),
                    {"do": do, "user": b.user.pk, "reason": "x"}) for do in ("add", "remove")],
        "provenance_workspace_suspicious": [Request("GET", reverse("admin:provenance_workspace_suspicious",
                                                                   args=[b.workspace.pk]))],
        "provenance_workspace_action": [Request("GET", reverse("admin:provenance_workspace_action",
                                                               args=[b.workspace.pk, b.action_id]))],
        "provenance_workspace_fact": [Request("GET", reverse("admin:provenance_workspace_fact",
                                                             args=[b.workspace.pk, "vip_rules"]))],
        # Recording tokens: issuing one for B's workspace, and revoking B's token.
        "provenance_agenttoken_issue": [
            Request("GET", reverse("admin:provenance_agenttoken_issue") + f"?workspace={b.workspace.pk}", kind="list"),
            Request("POST", reverse("admin:provenance_agenttoken_issue"),
                    {"workspace": b.workspace.pk, "label": "x", "agents": "", "reason": "x"})],
        "provenance_agenttoken_revoke": [
            Request("GET", reverse("admin:provenance_agenttoken_revoke", args=[b.agent_token.pk])),
            Request("POST", reverse("admin:provenance_agenttoken_revoke", args=[b.agent_token.pk]), {"reason": "x"})],
        # Delivery: sending B's item again, and B's connectors page (read, and a new choice posted).
        "compensation_compensationitem_deliver_again": [
            Request("POST", reverse("admin:compensation_compensationitem_deliver_again", args=[item]), {"reason": "x"})],
        "compensation_workspaceconnector_workspace": [
            Request("GET", reverse("admin:compensation_workspaceconnector_workspace", args=[b.workspace.pk])),
            Request("POST", reverse("admin:compensation_workspaceconnector_workspace", args=[b.workspace.pk]),
                    {"kind": "refund_reversal", "connector": "sandbox_ledger", "options": "", "reason": "x"})],
        # B's customer message template: its page read, previewed against B's incident, saved, applied.
        "compensation_messagetemplate_workspace": [
            Request("GET", reverse("admin:compensation_messagetemplate_workspace", args=[b.workspace.pk]))] + [
            Request("POST", reverse("admin:compensation_messagetemplate_workspace", args=[b.workspace.pk]),
                    {"subject": "Hi $customer", "body": "$explanation", "reason": "x", "incident": incident,
                     "step": step}) for step in ("preview", "save", "apply")],
        "compensation_auditevent_export": [
            Request("GET", reverse("admin:compensation_auditevent_export") + q, kind="export")
            for q in ("?format=json", f"?format=json&incident={incident}", "?format=csv")],
    }
    if name in custom:
        return custom[name]
    for model, pk in OBJECT_MODELS.items():
        for view in ("change", "history", "delete"):
            if name == f"{model}_{view}":
                return _object_requests(model, view, pk(b))
        if name == f"{model}_changelist":
            return _list_requests(name, b)
        if name == f"{model}_add":
            return [Request("GET", reverse(f"admin:{name}") + f"?workspace={b.workspace.pk}", kind="list")]
    if name == "auth_user_password_change":
        return [Request("GET", reverse("admin:auth_user_password_change", args=[b.user.pk])),
                Request("POST", reverse("admin:auth_user_password_change", args=[b.user.pk]),
                        {"password1": "x-Very-long-1234", "password2": "x-Very-long-1234"})]
    return None


def unknown_admin_urls(known=requests_for, b=None) -> list:
    b = b or SimpleNamespace(**{k: SimpleNamespace(pk=1, name="x") for k in (
        "workspace", "source", "ticket", "ledger", "outbox", "incident", "transition", "item", "event", "user",
        "group", "token_user", "agent", "agent_token", "connector", "template")}, action_id=1)
    b.item.ticket_id = getattr(b.item, "ticket_id", "t01")
    return sorted({str(n) for n in admin_url_names() if known(n, b) is None})


def markers(b) -> list[str]:
    """Strings that appear on a page only if something of workspace B is shown on it."""
    out = [b.workspace.name, f"/admin/repairs/incident/{b.incident.pk}/",
           f"/admin/provenance/source/{b.source.pk}/", f"/admin/provenance/ticket/{b.ticket.pk}/",
           f"/admin/provenance/ledgerentry/{b.ledger.pk}/", f"/admin/provenance/outboxemail/{b.outbox.pk}/",
           f"/admin/provenance/workspace/{b.workspace.pk}/", f"data-incident=\"{b.incident.pk}\"",
           f"/admin/provenance/agentregistration/{b.agent.pk}/", f"/admin/provenance/agenttoken/{b.agent_token.pk}/",
           b.agent.name, b.agent_token.prefix]
    out += [f"/admin/compensation/compensationitem/{pk}/" for pk in b.item_ids]
    out.append(B_EMAIL_DOMAIN)
    return out


def leaks(client, b) -> list[str]:
    """Every request of every admin URL against B; returns what went wrong ([] when B stayed invisible)."""
    found = []
    for name in admin_url_names():
        for r in requests_for(name, b) or []:
            response = client.post(r.path, r.data or {}) if r.method == "POST" else client.get(r.path)
            body = b"".join(response.streaming_content) if response.streaming else response.content
            text = body.decode("utf-8", "replace")
            if r.echo:
                text = text.replace(r.echo, "")
            where = f"{r.method} {r.path} ({name}) -> {response.status_code}"
            if r.kind == "object":
                # 405: a POST-only endpoint refuses GET before looking anything up.
                if response.status_code not in (403, 404, 405):
                    found.append(where)
            elif r.kind == "export":
                if response.status_code == 200:
                    rows = json.loads(text) if "format=json" in r.path else []
                    if any(e.get("incident") == b.incident.pk for e in rows) or b.workspace.name in text:
                        found.append(f"{where}: B's audit events exported")
                elif response.status_code != 403:
                    found.append(where)
            else:
                if response.status_code >= 500:
                    found.append(where)
                hits = [m for m in markers(b) if m in text]
                if hits:
                    found.append(f"{where}: shows {hits[0]!r}")
    return found
