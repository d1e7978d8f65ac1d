"""Access: who may see and do what in a workspace (tenancy, capabilities, roles, tokens), how a workspace
and its agents, sources and tickets come in (onboarding), how far a source is trusted, and the record of
refusals."""
