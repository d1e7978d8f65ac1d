from django.dispatch import Signal

# Sent inside the transaction of a desk run that replaces a workspace's graph, before anything is
# replaced; receivers may raise to refuse (e.g. a repair is running) and close what the run obsoletes.
desk_replacing = Signal()  # kwargs: workspace, actor, reason
# Sent before a workspace's graphs are copied to another FalkorDB server, and again inside the move's
# transaction holding the workspace's writer lock; receivers raise provenance.moves.MoveRefused to
# refuse (e.g. a repair of the workspace is under way).
workspace_moving = Signal()  # kwargs: workspace
