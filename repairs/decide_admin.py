"""Admin pages for deciding before flagging: the what-if on the flag confirmation page (in words, with a
progress bar for large desks), sources worth a look, a source's trust, and time travel (an action's
reads then and now, a fact's versions on three clocks).

Views here are called by the Source and Workspace admins' get_urls (provenance/admin.py) with objects
already scoped by the tenancy rule: another workspace's source, action or fact is a 404.
"""
from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponseNotAllowed, HttpResponseRedirect, JsonResponse
from django.template.response import TemplateResponse
from django.urls import reverse

from provenance.access.admin_tenancy import refuse_unseen
from core.money import format_money, format_totals
from core.vocabulary import Via
from provenance.access import capabilities, tenancy
from provenance import validation
from provenance.graph.graph import GraphUnavailable
from provenance.models import Source, Workspace


def scoped_source(request, source_pk: int, *, attempted: str) -> Source:
    source = tenancy.scoped(Source.objects.select_related("workspace"), user=request.user).filter(pk=source_pk).first()
    if source is None:
        refuse_unseen(request, attempted=attempted, subject_type="source", subject_ids=[source_pk])
        raise Http404("no such source")
    return source


def scoped_workspace(request, workspace_pk: int) -> Workspace:
    """A workspace the person may see, for the pages that read its sources, actions and facts: the
    capability table's `read_sources` first, as the API asks it (403 before the object's 404). An action's
    page shows what it decided for a ticket: customers and amounts."""
    if not capabilities.may(request.user, "read_sources"):
        raise PermissionDenied("your role does not allow reading this")
    workspace = tenancy.visible_workspaces(user=request.user).filter(pk=workspace_pk).first()
    if workspace is None:
        raise Http404("no such workspace")
    return workspace


# --- the what-if on the flag confirmation page ----------------------------------------------------------
def _decision(d: dict | None) -> str:
    if not d:
        return "nothing"
    return f"{d.get('choice')} ({d.get('level')})" if "choice" in d else ", ".join(f"{k} {v}" for k, v in sorted(d.items()))


def _n(count: int, word: str) -> str:
    return f"{count:,} {word}" + ("" if count == 1 else "s")


LIST_PAGE = 25  # tickets and items listed per page of the flag page (the counts always cover them all)


def paged(rows: list, page: int) -> dict:
    """One page of a long list for the flag page: its rows, where they start, and the pages around it."""
    pages = max(1, -(-len(rows) // LIST_PAGE))
    page = min(max(1, page), pages)
    start = (page - 1) * LIST_PAGE
    return {"rows": rows[start:start + LIST_PAGE], "first": start + 1, "last": min(start + LIST_PAGE, len(rows)),
            "total": len(rows), "page": page, "pages": pages,
            "previous": page - 1 if page > 1 else None, "next": page + 1 if page < pages else None}


def what_if_words(wi) -> dict:
    """The what-if as sentences a lead reads (money through core.money)."""
    c = wi.counts
    kinds = ", ".join(f"{n:,} {k}{'s' if n != 1 else ''}" for k, n in wi.effects_by_kind.items())
    return {
        "walk": (f"The repair would walk {wi.blast_radius:,} actions: {c['poisoned']:,} poisoned, {c['rerun_changed']:,} "
                 f"re-run with a changed outcome, {c['rerun_same']:,} re-run with the same outcome, {c['skipped']:,} "
                 f"skipped, {c['superseded']:,} superseded and {c['new']:,} new."),
        # The same words and numbers the incident, its cases and its reports print once it is flagged
        # (compensation.review.selectors.ItemCounts.sentence): drafts + held replacements = items, in cases.
        "effects": (f"{wi.effects_invalidated:,} effects that already left would be invalidated"
                    + (f" ({kinds})" if kinds else "") + f", and become {_n(wi.compensations, 'compensation draft')}"
                    f" + {_n(len(wi.items) - wi.compensations, 'held replacement')} = {_n(len(wi.items), 'item')}"
                    f" in {_n(len({i['ticket'] for i in wi.items}), 'case')} for reviewers to approve or reject."),
        "money": (f"{format_totals(wi.amount_reversed)} would be asked back"
                  + (f"; {format_totals(wi.amount_paid)} of corrected refunds would wait for approval"
                     if wi.amount_paid else "") + "."),
        "containment": _containment_words(wi.containment),
        "tickets": [f"{t['ticket']}: {_decision(t['before'])} → {_decision(t['after'])}" for t in wi.tickets_changed],
        "items": [f"{i['kind'].replace('_', ' ')} for {i['ticket']}"
                  + (f", {format_money(i['amount_cents'], i['currency'])}" if i["amount_cents"] else "")
                  for i in wi.items],
    }


def _containment_words(contains: dict) -> str:
    if not contains:  # a what-if computed before the preview said it
        return ""
    n, sample = contains["facts"], contains["sample"][:5]
    shown = ", ".join(f"{f['key']} v{f['version']}" for f in sample) + (", …" if n > len(sample) else "")
    return (f"At the flag, {_n(n, 'fact version')} it put into memory would be contained at once"
            + (f" ({shown})" if n else "") + ": live reads resolve around them and the effects of recordings "
            "that read them are held, until the repair lands.")


def what_if_preview(request, source: Source, radius_size: int) -> dict:
    """The what-if box of one source on the flag page: computed here for a small radius, by a Celery task
    behind a progress bar for a large one."""
    from repairs.models import Incident
    from repairs.what_if import WhatIf, what_if
    from repairs.what_if_tasks import start_what_if

    progress_url = reverse("admin:provenance_source_what_if_progress", args=[source.pk])
    try:
        if radius_size <= settings.KINTSUGI_WHAT_IF_INLINE_MAX:
            wi = what_if(workspace=source.workspace, source=source.source_id, actor=request.user, via=Incident.Via.ADMIN)
            return _done(request, wi, wi.fingerprint)
        fingerprint, entry = start_what_if(workspace=source.workspace, source=source.source_id, actor=request.user)
    except GraphUnavailable as exc:
        return {"state": "failed", "error": f"The provenance graph is unreachable, so there is no what-if: {exc}"}
    if entry["state"] == "done":
        return _done(request, WhatIf(**entry["result"]), fingerprint)
    return {"state": entry["state"], "error": entry.get("error", ""), "fingerprint": fingerprint,
            "percent": _percent(entry), "progress_url": progress_url}


def _done(request, wi, fingerprint: str) -> dict:
    """A finished what-if in words, its long lists (tickets that change, items it would draft) paged by
    ?tickets_page= and ?items_page= so a desk of thousands of tickets is a page a person can read, not one 9,000 px long."""
    from repairs.views import page_number

    words = what_if_words(wi)
    return {"state": "done", "result": wi, "words": words, "fingerprint": fingerprint,
            "tickets": paged(words["tickets"], page_number(request, "tickets_page")),
            "items": paged(words["items"], page_number(request, "items_page"))}


def _percent(entry: dict) -> int:
    return 100 if entry["state"] == "done" else (int(100 * entry["done"] / entry["total"]) if entry["total"] else 0)


def what_if_progress(request, source_pk: int) -> JsonResponse:
    """The progress of a source's what-if on the desk as it stands, for the flag page's bar."""
    from repairs.what_if import desk_fingerprint
    from repairs.what_if_tasks import stored_what_if

    source = scoped_source(request, source_pk, attempted="what-if progress")
    fingerprint = desk_fingerprint(source.workspace)
    entry = stored_what_if(workspace=source.workspace, source=source.source_id, fingerprint=fingerprint)
    if entry is None:
        return JsonResponse({"state": "missing", "percent": 0, "running": False})
    return JsonResponse({"state": entry["state"], "percent": _percent(entry), "error": entry.get("error", ""),
                         "running": entry["state"] in ("queued", "running")})


def desk_changed(source: Source, posted: str | None) -> bool:
    """True when the confirmation was given for a what-if of another desk than the current one."""
    from repairs.what_if import desk_fingerprint

    return bool(posted) and posted != desk_fingerprint(source.workspace)


# --- sources worth a look and trust --------------------------------------------------------------------
def suspicious_view(model_admin, request, workspace_pk: int):
    from repairs.suspicious import suspicious_sources

    workspace = scoped_workspace(request, workspace_pk)
    ranked = suspicious_sources(workspace=workspace)
    pks = dict(Source.objects.filter(workspace=workspace).values_list("source_id", "pk"))
    trust = dict(Source.objects.filter(workspace=workspace).values_list("source_id", "trust"))
    context = {**model_admin.admin_site.each_context(request), "opts": model_admin.opts, "workspace": workspace,
               "title": f"Sources worth a look in {workspace.name}",
               "ranked": [{"s": s, "pk": pks.get(s.source), "trust": trust.get(s.source, "unknown")} for s in ranked]}
    return TemplateResponse(request, "admin/provenance/workspace/suspicious.html", context)


def trust_view(model_admin, request, source_pk: int):
    from provenance.access.trust import TrustRefused, set_source_trust

    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    source = scoped_source(request, source_pk, attempted="set source trust")
    try:
        set_source_trust(source=source, level=request.POST.get("trust", ""), actor=request.user,
                         reason=request.POST.get("reason", ""), via=Via.ADMIN)
    except TrustRefused as exc:
        raise PermissionDenied(str(exc)) from None
    except validation.InvalidInput as exc:
        model_admin.message_user(request, str(exc), messages.ERROR)
    else:
        model_admin.message_user(request, f"{source.source_id} is now {request.POST['trust']}.", messages.SUCCESS)
    return HttpResponseRedirect(reverse("admin:provenance_source_change", args=[source.pk]))


# --- time travel -----------------------------------------------------------------------------------------
def action_view(model_admin, request, workspace_pk: int, action_id: int):
    from provenance.recording.time_travel import UnknownAction, action_page

    workspace = scoped_workspace(request, workspace_pk)
    try:
        page = action_page(workspace=workspace, action_id=action_id)
    except UnknownAction as exc:
        raise Http404(str(exc)) from None
    context = {**model_admin.admin_site.each_context(request), "opts": model_admin.opts, "workspace": workspace,
               "title": f"{page['agent']} #{page['action']}" + (f" ({page['ticket']})" if page["ticket"] else ""),
               "page": page}
    return TemplateResponse(request, "admin/provenance/workspace/action.html", context)


def fact_view(model_admin, request, workspace_pk: int, key: str):
    from provenance.recording.time_travel import UnknownFact, fact_page

    workspace = scoped_workspace(request, workspace_pk)
    try:
        validation.fact_key(key)
        page = fact_page(workspace=workspace, key=key)
    except (UnknownFact, validation.InvalidInput) as exc:
        raise Http404(str(exc)) from None
    context = {**model_admin.admin_site.each_context(request), "opts": model_admin.opts, "workspace": workspace,
               "title": f"Fact {key} in {workspace.name}", "page": page}
    return TemplateResponse(request, "admin/provenance/workspace/fact.html", context)
