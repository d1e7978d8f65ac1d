import secrets

from django.conf import settings
from django.db import models

from core.secret_box import SealedTextField
from core.vocabulary import RecordingStatus
from provenance.placement import new_workspace_server


class Workspace(models.Model):
    """One support desk: its own provenance graph, baseline graph, tickets and sources."""

    name = models.SlugField(max_length=64, unique=True)
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, blank=True, related_name="workspaces")
    # Users a superuser lets this workspace's Workspace admins find in the members picker, beyond the
    # members of the workspaces they administer (provenance.access.membership.pickable_users).
    visible_users = models.ManyToManyField(settings.AUTH_USER_MODEL, blank=True, related_name="visible_in_workspaces",
                                           help_text="Users this workspace's Workspace admins may find and add as "
                                                     "members (set by a superuser).")
    run_number = models.PositiveIntegerField(default=0, help_text="Increments each time a desk run replaces the graph.")
    run_params = models.JSONField(default=dict, blank=True)
    action_count = models.PositiveIntegerField(default=0)
    # Every provisional action id below this was handed to a recording over HTTP or MCP (open, committed,
    # abandoned or expired): the next one opens at or above it (provenance.recording.remote). Moved only under the
    # row's lock, and never by a save of the whole row (save, below).
    next_provisional_action = models.BigIntegerField(default=0, editable=False)
    message_locale = models.CharField(
        "customer message locale", max_length=16, blank=True,
        help_text="How money is written in this workspace's customer messages (e.g. en_US, de_DE); empty: the "
                  "deployment's KINTSUGI_MESSAGE_LOCALE. A ticket's own locale wins. Set on the message template page.")
    falkordb_server = models.CharField(
        "FalkorDB server", max_length=255, blank=True, editable=False, default=new_workspace_server,
        help_text="host:port of the FalkorDB server holding this workspace's graph, baseline and model cache "
                  "(empty: the default server). Chosen at creation; changed only by `manage.py move_workspace`.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        permissions = [("manage_members", "Can add and remove members of the workspaces one belongs to"),
                       ("manage_agents", "Can register agents and issue agent tokens in the workspaces one belongs to")]

    def __str__(self) -> str:
        return self.name

    def save(self, **kwargs):
        # A copy read before ids were handed out (an admin change form, any code holding the row a
        # while) saved whole would move the counter back, and its ids would be handed out again.
        if not self._state.adding and kwargs.get("update_fields") is None and not kwargs.get("force_insert"):
            skip = self.get_deferred_fields() | {"next_provisional_action"}
            kwargs["update_fields"] = [f.attname for f in self._meta.concrete_fields
                                       if not f.primary_key and f.attname not in skip]
        super().save(**kwargs)


class Source(models.Model):
    """An outside document (a policy page) that agents ingest."""

    class Trust(models.TextChoices):
        # Ordered from least to most trusted: a fact is as trusted as the least trusted thing it came from.
        UNTRUSTED = "untrusted"
        UNKNOWN = "unknown"
        TRUSTED = "trusted"

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="sources")
    source_id = models.CharField(max_length=200)
    title = models.CharField(max_length=200, blank=True)
    content = models.TextField()
    trust = models.CharField(max_length=16, choices=Trust.choices, default=Trust.UNKNOWN,
                             help_text="Set by a support lead on the source's trust form; facts inherit the lowest "
                                       "trust of what they came from.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["workspace", "source_id"]
        constraints = [models.UniqueConstraint(fields=["workspace", "source_id"], name="source_unique_per_workspace")]

    def __str__(self) -> str:
        return self.source_id


class Ticket(models.Model):
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="tickets")
    ticket_id = models.CharField(max_length=32)
    customer_name = models.CharField(max_length=200)
    customer_email = models.EmailField()
    subject = models.CharField(max_length=300)
    body = models.TextField()
    amount_cents = models.PositiveIntegerField(help_text="What the customer paid for the order.")
    currency = models.CharField(max_length=3, default="USD")
    tier = models.CharField(max_length=16, default="standard", help_text="Tier in the customer record (vip or standard).")
    payment_reference = models.CharField(max_length=64, blank=True)
    locale = models.CharField(max_length=16, blank=True,
                              help_text="The customer's locale (e.g. de_DE): how money is written in their messages; "
                                        "empty: the workspace's.")

    class Meta:
        ordering = ["workspace", "ticket_id"]
        constraints = [models.UniqueConstraint(fields=["workspace", "ticket_id"], name="ticket_unique_per_workspace")]

    def __str__(self) -> str:
        return self.ticket_id

    def as_payload(self) -> dict:
        return {
            "ticket": self.ticket_id,
            "customer": self.customer_name,
            "email": self.customer_email,
            "subject": self.subject,
            "body": self.body,
            "amount_cents": self.amount_cents,
            "currency": self.currency,
            "tier": self.tier,
            "payment_reference": self.payment_reference,
        }


class LedgerEntry(models.Model):
    """The sandbox ledger: money the refund agent paid out, and reversal requests people approved."""

    class Kind(models.TextChoices):
        PAYMENT = "payment"
        REVERSAL_REQUEST = "reversal_request"

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="ledger")
    run_number = models.PositiveIntegerField()
    kind = models.CharField(max_length=24, choices=Kind.choices, default=Kind.PAYMENT)
    ticket_id = models.CharField(max_length=32)
    amount_cents = models.IntegerField()
    currency = models.CharField(max_length=3)
    effect_id = models.BigIntegerField(null=True, blank=True)
    reference = models.CharField(max_length=64)
    idempotency_key = models.CharField(max_length=128, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name_plural = "ledger entries"


class OutboxEmail(models.Model):
    """Email that left through Django's email framework (the outbox backend)."""

    workspace = models.ForeignKey(Workspace, on_delete=models.SET_NULL, null=True, blank=True, related_name="outbox")
    run_number = models.PositiveIntegerField(null=True, blank=True)
    to = models.CharField(max_length=300)
    subject = models.CharField(max_length=300)
    body = models.TextField()
    effect_id = models.BigIntegerField(null=True, blank=True)
    idempotency_key = models.CharField(max_length=128, unique=True, null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]


REPLAY_SECRET_PREFIX = "krs_"  # tells a replay signing secret from a recording token (kag_) at a glance


def new_replay_secret() -> str:
    return REPLAY_SECRET_PREFIX + secrets.token_urlsafe(32)


class AgentRegistration(models.Model):
    """An agent that runs in its own process: how kintsugi re-runs one of its actions during a repair
    (an HTTP replay endpoint, POSTed the action's payload with a repair-scoped token)."""

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="agent_registrations")
    name = models.CharField(max_length=64)
    replay_url = models.URLField(max_length=500)
    timeout_seconds = models.PositiveIntegerField(default=30)
    # Not hashed, because kintsugi signs each replay POST with it (an HMAC needs the key itself): sealed
    # in the row with a key that is in neither the database nor a backup (core.secret_box); shown once,
    # when created or rotated, and never in a form, a serializer, an export or the audit record.
    replay_secret = SealedTextField(default=new_replay_secret, editable=False)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
                                   related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["workspace", "name"]
        constraints = [models.UniqueConstraint(fields=["workspace", "name"], name="agent_unique_per_workspace")]

    def __str__(self) -> str:
        return self.name


class AgentToken(models.Model):
    """A recording token: lets a process record actions in one workspace (and, if `agents` names any,
    only as those agents). Only the key's SHA-256 is stored; the key is shown once, when issued."""

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="agent_tokens")
    label = models.CharField(max_length=100)
    key_hash = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=12, help_text="The key's first characters, to tell tokens apart.")
    agents = models.JSONField(default=list, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
                                   related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True, help_text="Refused from then on (empty: never).")
    last_used_at = models.DateTimeField(null=True, blank=True, help_text="Updated at most once a minute.")

    class Meta:
        ordering = ["workspace", "-created_at"]

    def __str__(self) -> str:
        return f"{self.label} ({self.prefix}…)"

    def allows(self, agent: str) -> bool:
        return not self.agents or agent in self.agents


class Recording(models.Model):
    """A root action recorded over HTTP and everything it hands off, staged here until its last action
    finishes; only then is it written to the graph, in one flush (provenance.recording.remote)."""

    Status = RecordingStatus

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="recordings")
    token = models.ForeignKey(AgentToken, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.OPEN)
    state = models.JSONField(default=dict)
    version = models.PositiveIntegerField(default=0)
    first_action = models.BigIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)
    touched_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        # Recordings of a workspace are open side by side (provenance.recording.live): each reads the snapshot it
        # opened on and takes its place in seq order when it commits.
        indexes = [models.Index(fields=["workspace", "status", "first_action"], name="recording_open_by_action")]


class SourceQuarantine(models.Model):
    """A flagged source held out of live recordings of its workspace: an ingest gets no content from the
    moment it is flagged until a lead closes the incident as a false alarm (provenance.recording.quarantine).
    `incident_id` is the repairs Incident's id (kept as a number: provenance sits below repairs)."""

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="quarantines")
    source_id = models.CharField(max_length=200)
    incident_id = models.BigIntegerField(unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    attempts = models.PositiveIntegerField(default=0, help_text="Ingests refused since the flag.")
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    audited_attempts = models.PositiveIntegerField(default=0, editable=False)
    last_audited_at = models.DateTimeField(null=True, blank=True, editable=False)
    lifted_at = models.DateTimeField(null=True, blank=True)
    lifted_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True,
                                  related_name="+")
    lift_reason = models.TextField(blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["workspace", "source_id"], condition=models.Q(lifted_at__isnull=True),
                                name="quarantine_held")]

    def __str__(self) -> str:
        return f"{self.source_id} (incident #{self.incident_id})"


class ApiTokenLease(models.Model):
    """The expiry and last use of a person's API token (rest_framework.authtoken's Token has neither):
    one row per token, created with it by provenance.access.tokens, or at its first use."""

    token = models.OneToOneField("authtoken.Token", on_delete=models.CASCADE, primary_key=True, related_name="lease")
    expires_at = models.DateTimeField(null=True, blank=True, help_text="Refused from then on (empty: never).")
    last_used_at = models.DateTimeField(null=True, blank=True, help_text="Updated at most once a minute.")
    # The token row holds only its key's digest (provenance.access.tokens); these first characters of the key
    # are what people tell their tokens apart by.
    prefix = models.CharField(max_length=12, blank=True, default="")

    def __str__(self) -> str:
        return f"lease of {self.prefix or '?'}…"


class Containment(models.Model):
    """What a flag contained at once (provenance.recording.containment): every fact version whose lineage includes
    the flagged source is hidden from live reads of the workspace, and the effects of recordings that read
    through it are held. The versions themselves are marked on their Fact nodes (a read filters them in the
    query it makes anyway); this row is what the incident page, the API and the metrics read.
    `incident_id` is the repairs Incident's id (kept as a number: provenance sits below repairs)."""

    class Ended(models.TextChoices):
        HOLDING = "", "holding"
        REPAIRED = "repaired", "replaced by the repaired facts"
        FALSE_ALARM = "false_alarm", "lifted: a false alarm"
        RUN_REPLACED = "run_replaced", "gone with the desk run it contained"

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="containments")
    incident_id = models.BigIntegerField(unique=True)
    source_id = models.CharField(max_length=200)
    flagged_at = models.DateTimeField()
    contained_at = models.DateTimeField(null=True, blank=True, help_text="Empty: not contained yet (the graph was "
                                                                          "away at the flag; the repair contains first).")
    seconds = models.FloatField(null=True, blank=True, help_text="From the flag to the containment.")
    facts = models.PositiveIntegerField(default=0, help_text="Fact versions the flag contained.")
    sample = models.JSONField(default=list, blank=True, help_text="The first contained versions: [key, version].")
    ended = models.CharField(max_length=16, choices=Ended.choices, blank=True, default=Ended.HOLDING)
    ended_at = models.DateTimeField(null=True, blank=True)
    ended_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True,
                                 related_name="+")
    end_reason = models.TextField(blank=True)

    class Meta:
        ordering = ["-flagged_at"]

    def __str__(self) -> str:
        return f"containment of {self.source_id} (incident #{self.incident_id})"


class HeldEffect(models.Model):
    """An effect a live recording asked for after reading through a containment: recorded in the graph,
    never dispatched, until the repair settles it (performed when the clean run makes it too, dropped
    otherwise) or a false alarm releases it."""

    class Status(models.TextChoices):
        HELD = "held"
        PERFORMED = "performed"
        DROPPED = "dropped"
        RELEASED = "released"

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="held_effects")
    incident_id = models.BigIntegerField(db_index=True)
    run_number = models.PositiveIntegerField()
    effect_id = models.BigIntegerField()
    action_id = models.BigIntegerField()
    kind = models.CharField(max_length=64)
    ticket = models.CharField(max_length=200, blank=True)
    amount_cents = models.BigIntegerField(default=0)
    currency = models.CharField(max_length=3, default="USD")
    details = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.HELD)
    held_at = models.DateTimeField(auto_now_add=True)
    settled_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["effect_id"]
        constraints = [models.UniqueConstraint(fields=["workspace", "run_number", "effect_id"],
                                               name="held_effect_once")]

    def __str__(self) -> str:
        return f"held {self.kind} effect {self.effect_id} (incident #{self.incident_id})"


class EffectKindDeclaration(models.Model):
    """How one workspace's agents declared an effect kind of their own (`send_money`, a transfer): where
    its money is, what it acts on and how a repair compensates it (compensation.drafting.effect_kinds reads it).
    Declared over the API by a Workspace admin or by a recording token of the workspace."""

    class Compensation(models.TextChoices):
        REVERSED = "reversed", "reversed like a refund (a reversal request, netted per ticket)"
        MANUAL = "manual", "compensated by hand, with its amount"
        MESSAGE = "message", "a message: corrected by one email to the ticket's customer"

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="effect_kinds")
    name = models.CharField(max_length=64)
    money = models.BooleanField(default=False, help_text="The effect's `amount` (integer cents) and `currency` "
                                                         "are money that left.")
    target = models.CharField(max_length=64, blank=True, help_text="The details key naming what the effect acts "
                                                                   "on (e.g. `recipient`); required when recorded.")
    compensation = models.CharField(max_length=16, choices=Compensation.choices)
    decides = models.CharField(max_length=200, blank=True, help_text="What a reviewer decides, in their words.")
    declared_by = models.CharField(max_length=150, help_text="The person or recording token that declared it.")
    declared_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["workspace", "name"]
        constraints = [models.UniqueConstraint(fields=["workspace", "name"], name="effect_kind_unique_per_workspace")]

    def __str__(self) -> str:
        return self.name


class GraphDebt(models.Model):
    """Graph nodes a failed recording flushed and could not take back (FalkorDB was away as Postgres
    rolled the recording back): each id range (above, upto] is deleted before the workspace's graph is
    next written or walked (provenance.graph_debts). The workspace is named, not a foreign key: the row
    is written beside a transaction that holds the workspace's row locked, which a key check would wait on."""

    workspace = models.SlugField(max_length=64)
    action_above, action_upto = models.BigIntegerField(), models.BigIntegerField()
    fact_above, fact_upto = models.BigIntegerField(), models.BigIntegerField()
    effect_above, effect_upto = models.BigIntegerField(), models.BigIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)
