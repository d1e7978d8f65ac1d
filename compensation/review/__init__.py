"""Review: people deciding drafts, one by one, by case or by policy, and the queues and numbers they
decide from."""
