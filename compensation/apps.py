from django.apps import AppConfig


class CompensationConfig(AppConfig):
    name = "compensation"
    verbose_name = "Compensation"

    def ready(self) -> None:
        from compensation import checks, drafting, receivers  # noqa: F401  (registers checks, model tasks, receivers)
        from compensation import delivery_selectors, review_numbers, selectors
        from compensation.models import CompensationItem
        from repairs import downstream

        downstream.compensation.provide(
            compensation_items=selectors.compensation_items,
            item_counts=selectors.item_counts, item_counts_by_incident=selectors.item_counts_by_incident,
            compensation_summary=selectors.compensation_summary, cases_url=selectors.cases_url,
            review_queue_url=selectors.review_queue_url,
            review=review_numbers.review, review_by_incident=review_numbers.review_by_incident,
            review_from_counts=review_numbers.from_counts, review_status_text=review_numbers.status_text,
            failed_deliveries=delivery_selectors.failed_deliveries,
            undecided_count=lambda *, incident: CompensationItem.objects.filter(
                incident=incident, status=CompensationItem.Status.PENDING).count(),
        )
