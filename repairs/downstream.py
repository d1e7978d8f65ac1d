"""What a repair needs from the compensation app above it: drafting the items of what it invalidated,
executing approved items after an outage, and the items' counts and lists its pages and reports show.
compensation provides them at start-up (CompensationConfig.ready), so repairs never imports it."""
from core.provided import Provided

compensation = Provided(
    "repairs' calls into compensation",
    "draft_repair", "compensation_count", "draft_planned", "planned_items", "execute_approved",
    "compensation_items", "item_counts", "item_counts_by_incident", "compensation_summary", "cases_url",
    "review_queue_url", "undecided_count",
)
