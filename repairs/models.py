from django.conf import settings
from django.db import models
from django.db.models import Q

from core.vocabulary import EffectRole, IncidentStatus, Via
from provenance.vocabulary import ActionStatus


class IncidentQuerySet(models.QuerySet):
    def open(self) -> "IncidentQuerySet":
        """Not closed: a source has at most one such incident (the one_open_incident_per_source index)."""
        return self.exclude(status=Incident.Status.CLOSED)

    def open_of_source(self, *, workspace, source_id) -> "IncidentQuerySet":
        """The open incident of a source, as a queryset (`.first()` for the row, or a subquery)."""
        return self.open().filter(workspace=workspace, source_id=source_id)


def open_incident_id(*, workspace=models.OuterRef("workspace"), source_id=models.OuterRef("source_id")):
    """The id of each source's open incident, as an annotation (one query for a whole list)."""
    return models.Subquery(Incident.objects.open_of_source(workspace=workspace, source_id=source_id).values("pk")[:1])


class Incident(models.Model):
    """A flagged source and the repair of everything that depended on it."""

    objects = IncidentQuerySet.as_manager()

    Status = IncidentStatus

    class Phase(models.TextChoices):
        WALKING = "walking", "Repairing"
        APPLYING = "applying", "Applying the repair"
        VERIFYING = "verifying", "Verifying"
        DONE = "done", "Done"

    Via = Via

    workspace = models.ForeignKey("provenance.Workspace", on_delete=models.PROTECT, related_name="incidents")
    run_number = models.PositiveIntegerField()
    source_id = models.CharField(max_length=200)
    reason = models.TextField()
    flagged_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="flagged_incidents")
    flagged_via = models.CharField(max_length=16, choices=Via.choices)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.OPEN)
    error = models.TextField(blank=True)
    attempts = models.PositiveIntegerField(default=0)
    # How many times a remote agent did not take its replay (repairs.job bounds them).
    replay_failures = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # Progress for the admin's bar and the API: the phase and how far it is.
    phase = models.CharField(max_length=16, blank=True, choices=Phase.choices)
    progress_done = models.PositiveIntegerField(default=0)
    progress_total = models.PositiveIntegerField(default=0)
    # Checkpoint: the computed repair plan and how many of its steps reached the graph.
    plan = models.JSONField(null=True, blank=True, editable=False)
    applied_steps = models.PositiveIntegerField(default=0)
    # Outcome
    blast_radius = models.PositiveIntegerField(null=True, blank=True)
    counts = models.JSONField(default=dict, blank=True)
    effects_invalidated = models.PositiveIntegerField(null=True, blank=True)
    compensations = models.PositiveIntegerField(null=True, blank=True)
    tickets_untouched = models.PositiveIntegerField(null=True, blank=True)
    verification = models.JSONField(null=True, blank=True)
    # The clean baseline recorded for this repair's verification (which sources it left out), so the
    # repairing worker does not record it again when another worker already did.
    baseline_for = models.JSONField(null=True, blank=True, editable=False)
    # The sources this repair leaves out (sorted), fixed when its walk starts: the walk and the
    # verification baseline must leave out the same ones even when other incidents open meanwhile.
    excluded = models.JSONField(null=True, blank=True, editable=False)
    # The repair this blocked incident waits for (one of the workspace's, half-applied); the end of a
    # repair of the workspace enqueues its waiters again.
    waiting_for = models.ForeignKey("self", on_delete=models.SET_NULL, null=True, blank=True, editable=False,
                                    related_name="waiters")

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(fields=["workspace", "source_id"], condition=~Q(status=IncidentStatus.CLOSED),
                                    name="one_open_incident_per_source"),
        ]
        permissions = [("flag_source", "Can flag a source and start a repair")]
        indexes = [models.Index(fields=["status", "-created_at"])]

    # The statuses a repair job takes up (a delivered task for any other incident does nothing).
    REPAIRABLE = (Status.OPEN, Status.REPAIRING, Status.BLOCKED, Status.NEEDS_ATTENTION)
    # What a person may do with an incident: the services refuse anything else, the admin offers no more.
    RETRYABLE = (Status.FAILED, Status.BLOCKED, Status.NEEDS_ATTENTION)
    UNCLOSABLE = (Status.REPAIRING, Status.CLOSED)

    def may_retry(self) -> bool:
        return self.status in self.RETRYABLE

    def may_close(self) -> bool:
        return self.status not in self.UNCLOSABLE

    def __str__(self) -> str:
        return f"Incident #{self.pk}: {self.source_id} in {self.workspace}"

    def excluded_sources(self) -> set[str]:
        """The sources this incident's repair leaves out: as fixed when its walk started, or, before that,
        what the walk would fix now (excluded_now)."""
        return set(self.excluded) if self.excluded is not None else self.excluded_now()

    def excluded_now(self) -> set[str]:
        # Its own source and those of the run's incidents whose repair is in the graph (finished_at is set
        # only when a repair has been applied whole). Not the sources of overlapping incidents still open:
        # the graph keeps their effects until their own repairs, which run after this one, so a baseline
        # without them would show their blast radius as this repair's diff.
        repaired = (Incident.objects.filter(workspace_id=self.workspace_id, run_number=self.run_number,
                                            finished_at__isnull=False).exclude(pk=self.pk)
                    .values_list("source_id", flat=True))
        return set(repaired) | {self.source_id}

    @property
    def percent(self) -> int:
        weights = {self.Phase.WALKING: (0, 60), self.Phase.APPLYING: (60, 15), self.Phase.VERIFYING: (75, 25)}
        if self.status in (self.Status.REPAIRED, self.Status.CLOSED):
            return 100
        start, span = weights.get(self.phase, (0, 0))
        frac = self.progress_done / self.progress_total if self.progress_total else 0
        return int(start + span * frac)


class IncidentPhase(models.Model):
    """When an incident's repair first entered a phase (Incident.Phase); repairs.phases reads the phases'
    durations from these. One row per phase, never rewritten: a repair resumed after a crash or an
    outage keeps the time its first attempt entered the phase, so the phase's duration counts the wait."""

    incident = models.ForeignKey(Incident, on_delete=models.CASCADE, related_name="phase_marks")
    phase = models.CharField(max_length=16, choices=Incident.Phase.choices)
    entered_at = models.DateTimeField()

    class Meta:
        ordering = ["incident", "entered_at"]
        constraints = [models.UniqueConstraint(fields=["incident", "phase"], name="one_mark_per_phase")]

    def __str__(self) -> str:
        return f"incident #{self.incident_id} entered {self.phase} at {self.entered_at}"


class RepairPart(models.Model):
    """One part of a repair walked apart from the others (repairs.parallel). Whoever holds the part's
    advisory lock walks it (the repairing worker or a helper task); the plan and its chunks are its
    checkpoint."""

    incident = models.ForeignKey(Incident, on_delete=models.CASCADE, related_name="parts")
    index = models.PositiveIntegerField()
    action_ids = models.JSONField()
    id_base = models.JSONField()  # first new (action, fact, effect) id this part may use
    plan = models.JSONField(null=True, blank=True, editable=False)
    walked_by = models.CharField(max_length=200, blank=True)
    progress_done = models.PositiveIntegerField(default=0)
    progress_total = models.PositiveIntegerField(default=0)
    seconds = models.FloatField(null=True, blank=True)

    class Meta:
        ordering = ["incident", "index"]
        constraints = [models.UniqueConstraint(fields=["incident", "index"], name="one_part_per_index")]

    def __str__(self) -> str:
        return f"part {self.index} of incident #{self.incident_id}"


class RepairPartChunk(models.Model):
    """A chunk of one of a part's long lists (its outcomes, effects, steps or upstream edges), so that
    a part's plan, like the incident's, stays far from what one jsonb value holds (256 MB)."""

    part = models.ForeignKey(RepairPart, on_delete=models.CASCADE, related_name="chunks")
    list = models.CharField(max_length=16)
    index = models.PositiveIntegerField()
    rows = models.JSONField()

    class Meta:
        ordering = ["part", "list", "index"]
        constraints = [models.UniqueConstraint(fields=["part", "list", "index"], name="one_chunk_per_index")]


class RepairStep(models.Model):
    """One step of a checkpointed repair plan: a chunk of graph rows of one kind (repairs.steps), applied
    in `index` order. In a table of their own rather than in the plan: a million-action repair's steps
    outgrow what one jsonb value holds (256 MB), and each step is read only when it is applied."""

    incident = models.ForeignKey(Incident, on_delete=models.CASCADE, related_name="steps")
    index = models.PositiveIntegerField()
    kind = models.CharField(max_length=32)
    rows = models.JSONField()

    class Meta:
        ordering = ["incident", "index"]
        constraints = [models.UniqueConstraint(fields=["incident", "index"], name="one_step_per_index")]

    def __str__(self) -> str:
        return f"step {self.index} ({self.kind}) of incident #{self.incident_id}"


class IncidentTransition(models.Model):
    """Who moved an incident from one status to another, when, why and from where. Append-only."""

    incident = models.ForeignKey(Incident, on_delete=models.PROTECT, related_name="transitions")
    at = models.DateTimeField(auto_now_add=True)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True)
    via = models.CharField(max_length=16, choices=Incident.Via.choices)
    from_status = models.CharField(max_length=16, blank=True)
    to_status = models.CharField(max_length=16)
    reason = models.TextField(blank=True)

    class Meta:
        ordering = ["at", "pk"]


class ActionOutcome(models.Model):
    """What the repair did to one action of the blast radius (or a new action it created)."""

    incident = models.ForeignKey(Incident, on_delete=models.CASCADE, related_name="outcomes")
    action_id = models.BigIntegerField()
    agent = models.CharField(max_length=64)
    ticket = models.CharField(max_length=32, blank=True)
    seq = models.FloatField()
    parent_id = models.BigIntegerField(null=True, blank=True)
    status = models.CharField(max_length=16, choices=ActionStatus.choices)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["incident", "seq"]
        constraints = [models.UniqueConstraint(fields=["incident", "action_id"], name="one_outcome_per_action")]


class RepairEffect(models.Model):
    """An external effect the repair invalidated (it already left: compensate) or produced (a
    replacement that waits for approval), or a held replacement of an earlier repair it cancelled."""

    Role = EffectRole

    incident = models.ForeignKey(Incident, on_delete=models.CASCADE, related_name="effects")
    effect_id = models.BigIntegerField()
    action_id = models.BigIntegerField()
    role = models.CharField(max_length=16, choices=Role.choices)
    kind = models.CharField(max_length=32)
    ticket = models.CharField(max_length=32, blank=True)
    amount_cents = models.IntegerField()
    currency = models.CharField(max_length=3, default="USD")
    details = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["incident", "ticket", "kind"]
        constraints = [models.UniqueConstraint(fields=["incident", "effect_id", "role"], name="one_row_per_effect_role")]
