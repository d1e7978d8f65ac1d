from django.dispatch import Signal

# Sent inside the transaction of a desk run that replaces a workspace's graph, before anything is
# replaced; receivers may raise to refuse (e.g. a repair is running) and close what the run obsoletes.
desk_replacing = Signal()  # kwargs: workspace, actor, reason
