"""The recording protocol's requests and answers, each a named component of the OpenAPI schema: what an
agent developer outside reads to follow the protocol alone (the views are in kintsugi_site.api.agents)."""
from __future__ import annotations

from rest_framework import serializers

class OpenActionSerializer(serializers.Serializer):
    agent = serializers.CharField(max_length=64, help_text="A registered agent of the token's workspace.")
    payload = serializers.JSONField(required=False, help_text="The root action's input; a handoff's is its own.")
    parent = serializers.IntegerField(required=False, help_text="Open the next handoff of this finished action.")


class ActionOpenedSerializer(serializers.Serializer):
    action = serializers.IntegerField(help_text="The action's id: every call of it names it in its path.")
    seq = serializers.FloatField()
    recording = serializers.IntegerField()
    agent = serializers.CharField()
    payload = serializers.JSONField()
    parent = serializers.IntegerField(allow_null=True)
    replay = serializers.BooleanField(help_text="Always false here: a replay's action is opened by kintsugi, "
                                                "which names it in the replay request.")


class NextHandoffSerializer(serializers.Serializer):
    agent = serializers.CharField()
    parent = serializers.IntegerField()
    payload = serializers.JSONField(required=False)


class ActionDescriptionSerializer(serializers.Serializer):
    action = serializers.IntegerField()
    recording = serializers.IntegerField()
    agent = serializers.CharField()
    payload = serializers.JSONField()
    parent = serializers.IntegerField(allow_null=True)
    seq = serializers.FloatField()
    finished = serializers.BooleanField()
    open = serializers.IntegerField(allow_null=True, help_text="The recording's open action, if any.")
    next = NextHandoffSerializer(allow_null=True, help_text="The handoff to open next, if one waits.")


class AbandonedSerializer(serializers.Serializer):
    recording = serializers.IntegerField()
    status = serializers.CharField(help_text="`abandoned`: nothing of the recording reached the graph.")
    actions = serializers.IntegerField(help_text="How many actions it had opened.")


class IngestSerializer(serializers.Serializer):
    source = serializers.CharField(max_length=200)


class IngestAnswerSerializer(serializers.Serializer):
    source = serializers.CharField()
    content = serializers.CharField(allow_null=True, help_text="Null when the source is masked or quarantined "
                                                              "(in a replay: the flagged source is masked).")
    quarantined = serializers.BooleanField(required=False, help_text="Present and true when the source is flagged: "
                                                                     "its text is held out of every new action.")
    incident = serializers.IntegerField(required=False, help_text="The incident that quarantines the source.")


class GetSerializer(serializers.Serializer):
    key = serializers.CharField(max_length=200)
    default = serializers.JSONField(required=False)


class GetAnswerSerializer(serializers.Serializer):
    key = serializers.CharField()
    value = serializers.JSONField(allow_null=True, help_text="The latest active version written before this action "
                                                             "(in a replay: the repair's view), else `default`.")
    found = serializers.BooleanField(help_text="False when `value` is the default.")


class SetSerializer(serializers.Serializer):
    key = serializers.CharField(max_length=200)
    value = serializers.JSONField()
    valid_from = serializers.CharField(required=False, help_text="Valid time: when it became true in the world.")
    valid_until = serializers.CharField(required=False)
    observed_at = serializers.CharField(required=False, help_text="Known time, for back-filled material.")


class SetAnswerSerializer(serializers.Serializer):
    key = serializers.CharField()
    written = serializers.BooleanField(help_text="Staged: it reaches memory when the recording commits.")


class HandoffSerializer(serializers.Serializer):
    agent = serializers.CharField(max_length=64)
    payload = serializers.JSONField()


class HandoffAnswerSerializer(serializers.Serializer):
    agent = serializers.CharField()
    position = serializers.IntegerField(help_text="Its index among this action's handoffs.")


EFFECT_KINDS_TEXT = (
    "The effect kinds kintsugi drafts compensations for, and the `details` each needs: "
    "`refund` (amount: integer cents refunded on `ticket`; details optional: {reference: the payment reference, "
    "customer}); a repair that invalidates it drafts a refund reversal (and a replacement refund when a re-run pays "
    "again) from the ticket's customer and payment. "
    "`email` (details required: {to, subject, body}, all strings, checked when recorded: 400 otherwise); an "
    "invalidated email gets a correction email drafted from its subject and body, a re-run's email is held as a "
    "replacement with its own to/subject/body. "
    "Any other kind is recorded as it is, never sent by kintsugi, and compensated by hand (a manual item carrying "
    "the effect and its details).")


class EffectSerializer(serializers.Serializer):
    kind = serializers.CharField(max_length=64, help_text=EFFECT_KINDS_TEXT)
    amount = serializers.IntegerField(required=False, help_text="Integer cents.")
    ticket = serializers.CharField(required=False, max_length=32,
                                   help_text="The ticket it concerns (default: the action payload's `ticket`).")
    currency = serializers.CharField(required=False, max_length=3)
    details = serializers.JSONField(required=False, help_text="What the kind needs (see `kind`); must not repeat "
                                                              "kind, amount, ticket or currency.")
    idempotency_key = serializers.CharField(max_length=128, help_text=(
        "Scope: one action. The same key twice in the same action is one effect (a retried call answers the "
        "first one; a different effect under it is a 409). The same key in another action is another effect: "
        "derive keys from what makes the effect unique in its action (e.g. `refund-<ticket>-<amount>`)."))
    external = serializers.BooleanField(required=False, help_text="True: the ticket is not one of the workspace's.")


class EffectAnswerSerializer(serializers.Serializer):
    effect = serializers.IntegerField()
    idempotency_key = serializers.CharField()
    kind = serializers.CharField()
    ticket = serializers.CharField(allow_null=True)
    amount = serializers.IntegerField()
    currency = serializers.CharField()
    perform = serializers.BooleanField(help_text="True: perform it now; false (in every replay, and for an action "
                                                 "that read through a flag's containment): it is held, never "
                                                 "perform it.")
    held = serializers.BooleanField()
    incident = serializers.IntegerField(required=False, help_text="Present when the action read through this "
                                                                  "incident's containment (or depends on an action "
                                                                  "of its recording that did): its repair settles the "
                                                                  "effect (performed if the clean run makes it too); "
                                                                  "in a repair's replay, the incident re-running it.")


DECISION_KEYS_TEXT = (
    "The structured decision: a JSON object without floats (integers for cents and levels); its SHA-256 over "
    "sorted-key JSON is what a repair compares. Keys kintsugi reads: `choice` (a decision with a `choice` is the "
    "ticket's standing decision: export_state, what-if's changed tickets; e.g. refund, reply, escalate) with "
    "`level` (e.g. full, partial, none); the ticket comes from the action payload's `ticket`. Reports word "
    "{choice, level}, {amount, level} (a refund in cents) and {template, amount} (an email) decisions; any "
    "other shape is recorded and compared as it is.")


class FinishSerializer(serializers.Serializer):
    decision = serializers.JSONField(help_text=DECISION_KEYS_TEXT)


class FinishAnswerSerializer(serializers.Serializer):
    action = serializers.IntegerField()
    dhash = serializers.CharField(help_text="The decision's hash.")
    recording = serializers.IntegerField(required=False, help_text="Absent in a replay's answer.")
    committed = serializers.BooleanField(help_text="True when this finish committed the whole recording (always "
                                                   "false in a replay: the repair commits).")
    next = NextHandoffSerializer(allow_null=True, help_text="The handoff to open next (POST /recording/actions/ "
                                                            "with its agent and parent), or null.")
    actions = serializers.ListField(child=serializers.IntegerField(), required=False,
                                    help_text="When committed: the recorded actions' ids, in order.")


ANSWERS = {"ingest": IngestAnswerSerializer, "get": GetAnswerSerializer, "set": SetAnswerSerializer,
           "handoff": HandoffAnswerSerializer, "effect": EffectAnswerSerializer, "finish": FinishAnswerSerializer}
REQUESTS = {"ingest": IngestSerializer, "get": GetSerializer, "set": SetSerializer, "handoff": HandoffSerializer,
            "effect": EffectSerializer, "finish": FinishSerializer}
SUMMARIES = {
    "ingest": "Read a source (records INGESTED); content is null when the source is masked or quarantined",
    "get": "Read a fact: the latest active version written before this action (READ and FEEDS)",
    "set": "Write a new version of a fact, with its valid and known clocks",
    "handoff": "Hand work to another agent; it is opened after this action finishes (in a replay the repair runs it)",
    "effect": "Record an external effect before it leaves; the answer says whether to perform it",
    "finish": "Finish the action with its decision; the recording's last action commits it",
}
