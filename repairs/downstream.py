"""What a repair needs from the compensation app above it: drafting the items of what it invalidated,
executing approved items after an outage, and the items' counts, lists and review numbers its pages and
reports show.
compensation provides them at start-up (CompensationConfig.ready), so repairs never imports it."""
from core.provided import Provided

compensation = Provided(
    "repairs' calls into compensation",
    "compensation_items", "item_counts", "item_counts_by_incident", "compensation_summary", "cases_url",
    "review_queue_url", "undecided_count",
    # What still waits for a person (compensation.review_numbers): the incident list, page, dashboard and
    # report print "Needs review · N · $X" in its words.
    "review", "review_by_incident", "review_from_counts", "review_status_text",
    # The dashboard's count of deliveries a person must decide, with the case queue's filter it links to.
    "failed_deliveries",
)
