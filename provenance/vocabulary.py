"""The words the provenance graph and the repair share: an action's status.

Recorded actions are `ok`. A repair gives every action of its blast radius one of the six outcome
statuses (the counts flag_source reports, in this order). Poisoned and superseded actions are dead:
their facts and effects no longer count, and nothing downstream of them is live through them.
"""
from django.db import models


class ActionStatus(models.TextChoices):
    OK = "ok", "recorded"
    POISONED = "poisoned", "poisoned"
    RERUN_CHANGED = "rerun_changed", "re-run, output changed"
    RERUN_SAME = "rerun_same", "re-run, same output"
    SKIPPED = "skipped", "skipped"
    SUPERSEDED = "superseded", "superseded"
    NEW = "new", "new"


# The six outcomes of a repair, in the order reports list them.
OUTCOMES = (ActionStatus.POISONED, ActionStatus.RERUN_CHANGED, ActionStatus.RERUN_SAME, ActionStatus.SKIPPED,
            ActionStatus.SUPERSEDED, ActionStatus.NEW)
COUNT_KEYS = tuple(s.value for s in OUTCOMES)
DEAD = (ActionStatus.POISONED.value, ActionStatus.SUPERSEDED.value)
# Outcomes that change what an action's dependents see: they must be walked, not skipped.
CHANGED = frozenset({ActionStatus.POISONED, ActionStatus.RERUN_CHANGED, ActionStatus.SUPERSEDED, ActionStatus.NEW})
