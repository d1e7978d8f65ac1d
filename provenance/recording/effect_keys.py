"""The idempotency keys agents sent with the effects they recorded over HTTP, kept on each committed
recording (provenance.recording.remote stores them when it commits): how an approved compensation names the effect
it undoes in the agent's own terms."""
from __future__ import annotations

from core.vocabulary import RecordingStatus
from provenance.models import Recording


def of_effects(*, workspace_id: int, effect_ids) -> dict[int, str]:
    """The idempotency key the agent sent with each of `effect_ids` (effects of the workspace recorded
    over HTTP); effects recorded otherwise are absent. Limits: reads the workspace's committed recordings
    that hold any of the ids (no index on the keys: a scan of that workspace's recordings)."""
    wanted = {str(e) for e in effect_ids}
    if not wanted:
        return {}
    found: dict[int, str] = {}
    rows = (Recording.objects.filter(workspace_id=workspace_id, status=RecordingStatus.COMMITTED,
                                     state__effect_keys__has_any_keys=sorted(wanted))
            .values_list("state__effect_keys", flat=True))
    for keys in rows:
        found.update({int(e): k for e, k in keys.items() if e in wanted})
    return found
