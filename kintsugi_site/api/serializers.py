"""Request and response shapes of the API. Responses that come from a service or selector as plain data
(incident_summary, blast_radius, fact_history, explain_path) are passed through a declared serializer so
that the OpenAPI schema states exactly what the endpoint returns."""
from __future__ import annotations

from django.core.validators import RegexValidator
from django.db.models import Count, Q
from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from compensation.review import review_numbers
from provenance.recording import containment, quarantine
from provenance.models import Source, Workspace
from provenance.validation import MAX_AMOUNT_CENTS
from repairs.models import Incident
from kintsugi_site.api.not_rerun_serializers import NotRerunSerializer
from repairs.services import incident_summary

MAX_BLAST_RADIUS_PAGE = 500


# --- requests ---------------------------------------------------------------------------------------
# Free text as the services take it (provenance.validation.text): line breaks and tabs, no other control
# character. In the schema as a pattern, so that what it calls valid is what the services accept.
_TEXT_CHAR = r"[^\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]"
FREE_TEXT = RegexValidator(rf"^{_TEXT_CHAR}*$", "control characters (other than line breaks and tabs) are not allowed")
# ...and a reason has something in it besides spaces (it is stripped, then required).
REASON_TEXT = RegexValidator(rf"^{_TEXT_CHAR}*[^\s\x00-\x1f\x7f-\x9f]{_TEXT_CHAR}*$",
                             "a reason is required, without control characters (other than line breaks and tabs)")


class ReasonSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=2000, validators=[REASON_TEXT],
                                   help_text="Why: recorded with the change, and required.")

    def validate_reason(self, value: str) -> str:
        if not value.strip():
            raise serializers.ValidationError("a reason is required")
        return value.strip()


class StrictSerializer(serializers.Serializer):
    """Refuses fields it does not declare (a 400 naming them) instead of silently dropping them: a caller
    who sends `edits` to an endpoint that ignores them believes they were applied."""

    def to_internal_value(self, data):
        # Here rather than in validate(): a nested serializer has no initial_data of its own.
        if hasattr(data, "keys"):
            unknown = sorted(set(data.keys()) - set(self.fields) - {"csrfmiddlewaretoken"})
            if unknown:
                raise serializers.ValidationError({name: ["unknown field"] for name in unknown})
        return super().to_internal_value(data)


class StrictSerializerSchema(OpenApiSerializerExtension):
    """A StrictSerializer's schema says what it does: fields it does not declare are refused."""

    target_class = StrictSerializer
    match_subclasses = True

    def map_serializer(self, auto_schema, direction):
        schema = auto_schema._map_basic_serializer(self.target, direction)
        return schema | {"additionalProperties": False}


class ApproveEditsSerializer(StrictSerializer):
    """The admin's edit-then-approve fields; which of them a kind takes is in compensation.review.services
    its kind's spec (compensation.drafting.kinds: money kinds: amount_cents and body; emails: to, subject and body)."""

    amount_cents = serializers.IntegerField(required=False, min_value=0, max_value=MAX_AMOUNT_CENTS)
    to = serializers.CharField(required=False, max_length=320)
    subject = serializers.CharField(required=False, max_length=300, allow_blank=True)
    body = serializers.CharField(required=False, max_length=80000, allow_blank=True, trim_whitespace=False)


class ApproveSerializer(StrictSerializer):
    reason = serializers.CharField(max_length=2000, required=False, allow_blank=True, validators=[FREE_TEXT],
                                   help_text="Why (optional for an approval; recorded with it).")
    edits = ApproveEditsSerializer(required=False, help_text="Edit the draft, then approve the edited text "
                                   "(recorded as an edit); refused when the edited draft fails validation.")
    content_hash = serializers.RegexField(r"^[0-9a-f]{64}$", required=False,
                                          help_text="The item's content_hash as you read it: the approval is refused "
                                                    "(409) when the item has changed since.")


class BlastRadiusQuerySerializer(serializers.Serializer):
    limit = serializers.IntegerField(min_value=1, max_value=MAX_BLAST_RADIUS_PAGE, default=50,
                                     help_text=f"Actions per page; at most {MAX_BLAST_RADIUS_PAGE}.")
    offset = serializers.IntegerField(min_value=0, default=0)


class ExplainQuerySerializer(serializers.Serializer):
    source = serializers.IntegerField(min_value=1, help_text="The id of the source (as in /api/v1/sources/{id}/).")


class FactQuerySerializer(serializers.Serializer):
    as_of = serializers.DateTimeField(required=False, help_text="ISO 8601; also answer what held at this time.")
    as_of_action = serializers.IntegerField(required=False, min_value=1, max_value=10 ** 18 - 1,
                                            help_text="An action's id: answer what held when it ran (instead of as_of).")
    clock = serializers.ChoiceField(choices=["known", "valid", "system"], default="known",
                                    help_text="known: what the system believed then; valid: what held in the world; "
                                              "system: what was stored then.")

    def validate(self, attrs):
        if "as_of" in attrs and "as_of_action" in attrs:
            raise serializers.ValidationError({"as_of_action": "give as_of or as_of_action, not both"})
        return attrs


class IncidentReportQuerySerializer(serializers.Serializer):
    format = serializers.ChoiceField(choices=["json", "csv", "pdf"], default="json")


# --- workspaces and sources ----------------------------------------------------------------------------
class WorkspaceSerializer(serializers.ModelSerializer):
    class Meta:
        model = Workspace
        fields = ["id", "name", "run_number", "action_count", "created_at"]


# One count per incident status, derived from the statuses themselves so that a new status (as
# "needs attention" was) is declared in the schema the moment it exists.
IncidentStatusCountsSerializer = type("IncidentStatusCountsSerializer", (serializers.Serializer,), {
    "total": serializers.IntegerField(), **{s: serializers.IntegerField() for s in Incident.Status.values}})


class WorkspaceCountsSerializer(serializers.Serializer):
    sources = serializers.IntegerField()
    tickets = serializers.IntegerField()
    actions = serializers.IntegerField()
    incidents = IncidentStatusCountsSerializer()


class WorkspaceDetailSerializer(WorkspaceSerializer):
    counts = serializers.SerializerMethodField()

    class Meta(WorkspaceSerializer.Meta):
        fields = WorkspaceSerializer.Meta.fields + ["run_params", "counts"]

    @extend_schema_field(WorkspaceCountsSerializer)
    def get_counts(self, workspace: Workspace) -> dict:
        by_status = workspace.incidents.aggregate(
            total=Count("pk"), **{s: Count("pk", filter=Q(status=s)) for s in Incident.Status.values})
        return {"sources": workspace.sources.count(), "tickets": workspace.tickets.count(),
                "actions": workspace.action_count, "incidents": by_status}


class SourceSerializer(serializers.ModelSerializer):
    workspace_name = serializers.CharField(source="workspace.name", read_only=True)
    open_incident = serializers.SerializerMethodField(help_text="The id of the source's open incident, if any.")

    class Meta:
        model = Source
        fields = ["id", "workspace", "workspace_name", "source_id", "title", "trust", "created_at", "open_incident"]

    def get_open_incident(self, source: Source) -> int | None:
        if hasattr(source, "open_incident_id"):  # annotated by the list's own query (SourceViewSet)
            return source.open_incident_id
        return (Incident.objects.open_of_source(workspace=source.workspace_id, source_id=source.source_id)
                .values_list("pk", flat=True).first())


class SourceDetailSerializer(SourceSerializer):
    class Meta(SourceSerializer.Meta):
        fields = SourceSerializer.Meta.fields + ["content"]


# --- incidents (the canonical incident_summary shape, plus who/when/why) --------------------------------
class OutcomeCountsSerializer(serializers.Serializer):
    poisoned = serializers.IntegerField()
    rerun_changed = serializers.IntegerField()
    rerun_same = serializers.IntegerField()
    skipped = serializers.IntegerField()
    superseded = serializers.IntegerField()
    new = serializers.IntegerField()


class DifferenceSerializer(serializers.Serializer):
    table = serializers.CharField(help_text="facts, decisions or effects")
    side = serializers.CharField(help_text="repaired: only in the repaired workspace; baseline: only in the clean run")
    row = serializers.DictField(help_text="The differing row as export_state shows it.")


class VerificationSerializer(serializers.Serializer):
    facts = serializers.IntegerField(allow_null=True, help_text="Active facts differing from the clean baseline.")
    decisions = serializers.IntegerField(allow_null=True)
    effects = serializers.IntegerField(allow_null=True)
    differences = DifferenceSerializer(many=True, help_text=(
        "The differing rows (the first 50; an incident with any is never repaired: it needs attention)."))
    differences_total = serializers.IntegerField()
    scope = serializers.CharField(allow_null=True, help_text=(
        "radius: re-ran only what the flagged source could change and checked the boundary around it; "
        "full: replayed the whole desk."))
    actions_rerun = serializers.IntegerField(allow_null=True)
    replay_calls = serializers.IntegerField(allow_null=True, help_text="Replay calls made to remote agents.")
    seconds = serializers.FloatField(allow_null=True)
    full = serializers.DictField(allow_null=True, help_text=(
        "The last whole-desk replay asked for (verify --full, the API, the admin, the deep check)."))


class ProgressSerializer(serializers.Serializer):
    phase = serializers.CharField(allow_blank=True)
    done = serializers.IntegerField()
    total = serializers.IntegerField()
    percent = serializers.IntegerField()


class PhaseTimingSerializer(serializers.Serializer):
    started_at = serializers.DateTimeField(help_text="When the repair first entered the phase (a resumed repair "
                                                     "keeps its first attempt's time).")
    seconds = serializers.FloatField(allow_null=True, help_text="Time in the phase (null: the repair is in it).")


class QuarantineSerializer(serializers.Serializer):
    held = serializers.BooleanField(help_text="True: live recordings' ingests of the source get no content.")
    attempts = serializers.IntegerField(help_text="Ingests of the source refused since the flag.")
    last_attempt_at = serializers.DateTimeField(allow_null=True)
    lifted_at = serializers.DateTimeField(allow_null=True, help_text="When a lead closed it as a false alarm.")
    lifted_by = serializers.CharField(allow_null=True)
    lift_reason = serializers.CharField(allow_blank=True)


class ContainedVersionSerializer(serializers.Serializer):
    key = serializers.CharField()
    version = serializers.IntegerField()


class HeldEffectsSerializer(serializers.Serializer):
    held = serializers.IntegerField(help_text="Effects held now: asked for by recordings that read through the "
                                              "containment, waiting for the repair.")
    performed = serializers.IntegerField(help_text="Settled by the repair: the clean run made them too.")
    dropped = serializers.IntegerField(help_text="Settled by the repair: the clean run did not make them.")
    released = serializers.IntegerField(help_text="Performed as asked when the flag was closed as a false alarm.")
    held_refund_cents = serializers.DictField(child=serializers.IntegerField(),
                                              help_text="Money the held refunds would move, per currency, in cents.")


class ContainmentSerializer(serializers.Serializer):
    holding = serializers.BooleanField(help_text="True: live reads resolve around the contained versions.")
    ended = serializers.CharField(allow_null=True, help_text='"repaired" (replaced by the repaired facts) or '
                                                             '"false_alarm" (lifted); null while holding.')
    ended_at = serializers.DateTimeField(allow_null=True)
    ended_by = serializers.CharField(allow_null=True)
    end_reason = serializers.CharField(allow_blank=True)
    contained_at = serializers.DateTimeField(allow_null=True, help_text="Null: not contained yet (the graph was "
                                                                        "away at the flag).")
    flag_to_containment_seconds = serializers.FloatField(allow_null=True)
    contained_facts = serializers.IntegerField(help_text="Fact versions whose lineage includes the source.")
    sample = ContainedVersionSerializer(many=True, help_text="The first contained versions.")
    held_effects = HeldEffectsSerializer()


class ReviewSerializer(serializers.Serializer):
    items_pending = serializers.IntegerField(help_text="Review items still waiting for a decision.")
    amount_pending_cents = serializers.IntegerField(help_text="Money those items move, in cents.")
    cases_pending = serializers.IntegerField(help_text="Cases (tickets) with an item waiting for a decision.")
    status_text = serializers.CharField(help_text='The status as people read it: "Needs review · 10 · $400.00" '
                                                  "while items wait.")


class IncidentSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    incident = serializers.IntegerField(help_text="Same as id (the flag_source --json shape).")
    status = serializers.ChoiceField(choices=Incident.Status.choices)
    workspace = serializers.CharField()
    workspace_id = serializers.IntegerField()
    source = serializers.CharField()
    reason = serializers.CharField()
    flagged_by = serializers.CharField()
    flagged_via = serializers.CharField()
    created_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)
    attempts = serializers.IntegerField()
    blast_radius = serializers.IntegerField(allow_null=True)
    counts = OutcomeCountsSerializer()
    effects_invalidated = serializers.IntegerField(allow_null=True)
    compensations = serializers.IntegerField(allow_null=True)
    verification = VerificationSerializer()
    progress = ProgressSerializer()
    error = serializers.CharField(allow_null=True)
    timings = serializers.DictField(child=PhaseTimingSerializer(), help_text=(
        "Each phase the repair has entered (walking, applying, verifying; drafting runs inside verifying), "
        "in order."))
    quarantine = QuarantineSerializer(allow_null=True, help_text="The flagged source's quarantine (null: none).")
    containment = ContainmentSerializer(allow_null=True, help_text="What the flag contained at once and the effects "
                                                                   "it holds (null: flagged before containment).")
    review = ReviewSerializer(help_text="What still waits for a person (compensation.review.review_numbers).")
    not_rerun = NotRerunSerializer(allow_null=True, help_text="Traced actions not re-run (null: none; docs/otel.md).")

    def to_representation(self, incident: Incident) -> dict:
        found = review_numbers.review(incident=incident)
        data = incident_summary(incident) | {
            "quarantine": quarantine.state_of(incident_id=incident.pk),
            "containment": containment.state_of(incident_id=incident.pk),
            "review": found.as_dict() | {"status_text": review_numbers.status_text(incident, found)},
            "id": incident.pk, "workspace_id": incident.workspace_id, "reason": incident.reason,
            "flagged_by": incident.flagged_by.get_username(), "flagged_via": incident.flagged_via,
            "created_at": incident.created_at, "finished_at": incident.finished_at, "attempts": incident.attempts,
        }
        return super().to_representation(data)


# --- blast radius -------------------------------------------------------------------------------------------
class RadiusActionSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    agent = serializers.CharField()
    seq = serializers.FloatField()
    ticket = serializers.CharField(allow_null=True)


class BlastRadiusSerializer(serializers.Serializer):
    source = serializers.CharField()
    source_pk = serializers.IntegerField(help_text="The source's API id.")
    workspace = serializers.CharField()
    size = serializers.IntegerField(help_text="Actions in the blast radius (all pages).")
    tickets = serializers.IntegerField(help_text="Tickets those actions touched.")
    effects = serializers.IntegerField(help_text="Live external effects (refunds, emails) of those actions.")
    amount_at_stake = serializers.FloatField(help_text="Sum of the live refunds, in the currency's main unit.")
    by_agent = serializers.DictField(child=serializers.IntegerField())
    effects_by_kind = serializers.DictField(child=serializers.IntegerField())
    limit = serializers.IntegerField()
    offset = serializers.IntegerField()
    next = serializers.CharField(allow_null=True)
    previous = serializers.CharField(allow_null=True)
    actions = RadiusActionSerializer(many=True, help_text="This page of the radius, in re-execution (seq) order.")


# --- explain ------------------------------------------------------------------------------------------------
class FactReadSerializer(serializers.Serializer):
    key = serializers.CharField()
    version = serializers.IntegerField()
    writer = serializers.IntegerField(help_text="The action that wrote this version.")


class ReachedBySerializer(serializers.Serializer):
    edge = serializers.ChoiceField(choices=["INGESTED", "FEEDS", "HANDED_OFF"])
    source = serializers.CharField(allow_null=True, help_text="For INGESTED (the first step): the source.")
    from_action = serializers.IntegerField(allow_null=True, help_text="The previous step (null on the first).")
    facts = serializers.ListField(child=serializers.CharField(),
                                  help_text="For FEEDS: the keys this step read that the previous step wrote.")


class ExplainStepSerializer(serializers.Serializer):
    action = serializers.IntegerField()
    agent = serializers.CharField()
    seq = serializers.FloatField()
    ticket = serializers.CharField(allow_null=True)
    status = serializers.CharField(allow_null=True)
    reached_by = ReachedBySerializer()
    facts_read = FactReadSerializer(many=True)
    handoffs = serializers.ListField(child=serializers.IntegerField(), help_text="Actions this step handed off to.")


class ExplainSerializer(serializers.Serializer):
    workspace = serializers.CharField()
    source = serializers.CharField()
    action = serializers.IntegerField()
    steps = ExplainStepSerializer(many=True)


# --- facts --------------------------------------------------------------------------------------------------
class FactVersionSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    value = serializers.JSONField()
    version = serializers.IntegerField()
    seq = serializers.FloatField()
    active = serializers.BooleanField()
    valid_from = serializers.CharField(allow_null=True, help_text="Valid time: from when it held in the world.")
    valid_until = serializers.CharField(allow_null=True)
    known_at = serializers.CharField(allow_null=True, help_text="Known time: when the system learned it.")
    system_at = serializers.CharField(allow_null=True, help_text="System time: when it was written.")
    invalidated_at = serializers.CharField(allow_null=True)
    invalidated_by = serializers.IntegerField(allow_null=True, help_text="The incident that invalidated it.")
    writer = serializers.IntegerField()
    writer_agent = serializers.CharField()
    sources = serializers.ListField(child=serializers.CharField(), help_text="The sources its writer ingested.")
    trust = serializers.CharField(help_text="The lowest trust of what it came from: trusted, unknown or untrusted.")


class FactHistorySerializer(serializers.Serializer):
    workspace = serializers.CharField()
    key = serializers.CharField()
    clock = serializers.CharField()
    as_of = serializers.DateTimeField(allow_null=True)
    as_of_action = serializers.IntegerField(allow_null=True, help_text="The action whose run as_of is, when asked so.")
    value_as_of = FactVersionSerializer(allow_null=True, help_text="The version that held at as_of on that clock.")
    versions = FactVersionSerializer(many=True)
