from django.apps import AppConfig


class CompensationConfig(AppConfig):
    name = "compensation"
    verbose_name = "Compensation"

    def ready(self) -> None:
        from compensation import checks, drafting, receivers  # noqa: F401  (registers checks, model tasks, receivers)
        from compensation import delivery_selectors, drafts, execution, review_numbers, selectors
        from compensation.models import CompensationItem
        from compensation.effect_kinds import effect_kind
        from provenance import upstream
        from repairs import downstream

        upstream.compensation.provide(effect_kind=effect_kind)
        downstream.compensation.provide(
            draft_repair=drafts.draft_repair, compensation_count=drafts.compensation_count,
            draft_planned=drafts.draft_planned, planned_items=drafts.planned_items,
            execute_approved=execution.execute_approved, compensation_items=selectors.compensation_items,
            item_counts=selectors.item_counts, item_counts_by_incident=selectors.item_counts_by_incident,
            compensation_summary=selectors.compensation_summary, cases_url=selectors.cases_url,
            review_queue_url=selectors.review_queue_url,
            review=review_numbers.review, review_by_incident=review_numbers.review_by_incident,
            review_from_counts=review_numbers.from_counts, review_status_text=review_numbers.status_text,
            failed_deliveries=delivery_selectors.failed_deliveries,
            undecided_count=lambda *, incident: CompensationItem.objects.filter(
                incident=incident, status=CompensationItem.Status.PENDING).count(),
        )
