"""Drafting: what a review item kind is (its spec, its words, its checks), and how a repair's effects
become the drafts people review."""
