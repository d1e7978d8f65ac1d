"""The what-if of a large desk, off the request path: a Celery task whose progress and result are kept in
the cache under the desk's fingerprint, so a page polls it, a second request for the same desk reuses
it, and a changed desk asks anew. Nothing goes to the workspace's tables or graph (the result is a
what-if, not an incident)."""
from __future__ import annotations

import hashlib
import logging

from celery import shared_task
from django.contrib.auth import get_user_model
from django.core.cache import cache

from provenance.models import Workspace
from provenance.progress import throttled
from core.broker import send
from core.scrub import scrub_secrets
from repairs.models import Incident
from repairs.what_if import desk_fingerprint, what_if

log = logging.getLogger(__name__)
KEEP_SECONDS = 3600


def _key(workspace_id: int, source: str, fingerprint: str) -> str:
    return f"what-if:{workspace_id}:{hashlib.sha256(source.encode()).hexdigest()[:16]}:{fingerprint}"


def stored_what_if(*, workspace: Workspace, source: str, fingerprint: str) -> dict | None:
    """{"state": queued | running | done | failed, "done", "total", "result", "error"} or None."""
    return cache.get(_key(workspace.pk, source, fingerprint))


def start_what_if(*, workspace: Workspace, source: str, actor) -> tuple[str, dict]:
    """(fingerprint, entry) of the what-if of `source` on the desk as it stands: the stored one, or a new
    task enqueued for it. Safe to call on every page load: one task per desk and source."""
    fingerprint = desk_fingerprint(workspace)
    key = _key(workspace.pk, source, fingerprint)
    entry = {"state": "queued", "done": 0, "total": 0, "result": None, "error": ""}
    if not cache.add(key, entry, KEEP_SECONDS):  # someone asked already: theirs is (or will be) the answer
        return fingerprint, cache.get(key) or entry
    refused = send(what_if_task, workspace.pk, source, fingerprint, getattr(actor, "pk", None),
                   what=f"the what-if of {source}")
    if refused is not None:  # the broker is down: say so on the page instead of waiting forever
        entry = {**entry, "state": "failed", "error": scrub_secrets(f"could not start the what-if: {refused}")}
        cache.set(key, entry, 60)
    return fingerprint, entry


@shared_task(acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def what_if_task(workspace_id: int, source: str, fingerprint: str, actor_id: int | None) -> str:
    """Compute and store the what-if, unless the desk changed since it was asked (then the page asks anew)."""
    workspace = Workspace.objects.get(pk=workspace_id)
    key = _key(workspace_id, source, fingerprint)
    if desk_fingerprint(workspace) != fingerprint:
        cache.set(key, {"state": "failed", "done": 0, "total": 0, "result": None,
                        "error": "the desk changed before the what-if ran; reload the page"}, KEEP_SECONDS)
        return "stale"
    progress = throttled(lambda done, total: cache.set(
        key, {"state": "running", "done": done, "total": total, "result": None, "error": ""}, KEEP_SECONDS))

    actor = get_user_model().objects.filter(pk=actor_id).first() if actor_id else None
    try:
        result = what_if(workspace=workspace, source=source, actor=actor, via=Incident.Via.ADMIN, progress=progress)
    except Exception as exc:  # noqa: BLE001 - any failure is shown on the page that waits for it
        log.exception("what-if of %s in %s failed", source, workspace.name)
        cache.set(key, {"state": "failed", "done": 0, "total": 0, "result": None,
                        "error": scrub_secrets(f"{type(exc).__name__}: {exc}")}, KEEP_SECONDS)
        return "failed"
    total = result.blast_radius
    cache.set(key, {"state": "done", "done": total, "total": total, "result": result.to_json(), "error": ""},
              KEEP_SECONDS)
    return "done"
