"""The actions a repair could not re-run because they were recorded from OpenTelemetry traces
(provenance.recording.otel): a trace says what an agent did, never how to ask it again. The walk takes each one out
(repairs.engine: masked when it ingested the source, else superseded), so the facts it wrote are
invalidated and each effect it made is invalidated, drafted as a review item a person decides on. What
the incident says of them is read here, for the incident page, the API, MCP and `flag_source --json`."""
from __future__ import annotations

from core.vocabulary import EffectRole
from repairs.models import ActionOutcome, Incident, RepairEffect

SAMPLE = 50


def not_rerun_actions(incident: Incident) -> list[int]:
    """The plan's traced actions taken out, read without loading the rest of the plan (megabytes on a large
    repair): from the incident's `not_rerun_ids` when its query annotated it (repairs.selectors.incident_for_page)."""
    if hasattr(incident, "not_rerun_ids"):
        return list(incident.not_rerun_ids or ())
    found = Incident.objects.filter(pk=incident.pk).values_list("plan__not_rerun", flat=True).first()
    return list(found or ())


def not_rerun_summary(incident: Incident) -> dict | None:
    """What the incident says of its traced actions (None: the repair re-ran or skipped every action)."""
    ids = not_rerun_actions(incident)
    if not ids:
        return None
    agents = sorted(set(ActionOutcome.objects.filter(incident=incident, action_id__in=ids)
                        .values_list("agent", flat=True)))
    effects = RepairEffect.objects.filter(incident=incident, action_id__in=ids,
                                          role__in=(EffectRole.INVALIDATED, EffectRole.CANCELLED))
    items = sorted({i for i in effects.values_list("compensation_items", flat=True) if i is not None})
    return {
        "actions": len(ids), "action_ids": ids[:SAMPLE], "agents": agents,
        "effects": effects.count(), "items": len(items), "item_ids": items[:SAMPLE],
        "text": (f"{len(ids)} action(s) of {', '.join(agents) or 'traced agents'} were recorded from OpenTelemetry "
                 f"traces and were not re-run: a trace cannot re-run anything. The repair took them out: the facts "
                 f"they wrote are invalidated, and each of their {effects.count()} effect(s) is a review item marked "
                 f"not re-run ({len(items)} drafted so far): a reviewer decides whether to reverse or correct it."),
    }


def finish_reason(incident: Incident) -> str | None:
    """The reason a clean repair with traced actions taken out finishes with (None: it re-ran everything)."""
    ids = not_rerun_actions(incident)
    if not ids:
        return None
    return (f"repaired with review: {len(ids)} action(s) recorded from OpenTelemetry traces were not re-run; "
            f"their effects are review items marked not re-run")


def item_not_rerun(item) -> bool:
    """Whether a review item stands for an effect of a traced action its repair did not re-run."""
    ids = not_rerun_actions(item.incident)
    return bool(ids) and item.effects.filter(action_id__in=ids).exists()
