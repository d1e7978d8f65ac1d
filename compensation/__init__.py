"""Compensation: what people do about the effects a repair could not undo.

While a repair is verified (repairs.job's draft step) every invalidated effect becomes a review item, netted
per ticket against the replacements the repair produced (compensation.drafting.netting); the drafts are
written through the model client and validated as untrusted text (compensation.drafting.validation). Reviewers
approve or reject them in the admin, the API or `manage.py review` (compensation.review.services, four-eyes
unless KINTSUGI_FOUR_EYES is off); approved items execute exactly once (compensation.delivery.execution) in the
Celery worker. Every state change of incidents and items lands in a hash-chained, append-only audit
trail (core.audit) that `manage.py verify_audit` checks.

Commands: `review_queue --workspace W [--json]`, `review --item ID --decision approve|reject --user U
--reason R [--json]`, `verify_audit`. Roles: the groups Support lead, Reviewer and Auditor
(core.roles, created by migration 0002_roles).
"""
