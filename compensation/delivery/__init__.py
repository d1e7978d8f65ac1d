"""Delivery: when an approved item may leave (its approval still holding, its repair verified, its money
item decided first) and how it leaves, exactly once, through the connector registry."""
