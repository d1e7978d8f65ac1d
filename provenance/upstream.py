"""What provenance needs from the apps above it: which repairs are under way in a workspace (a workspace
does not move during one) and how each effect kind is dispatched (the effect-kind registry lives with
what compensates the kinds). repairs and compensation provide them at start-up (their AppConfig.ready),
so provenance never imports them."""
from core.provided import Provided

repairs = Provided("provenance's calls into repairs", "open_repair_ids")
compensation = Provided("provenance's calls into compensation", "effect_kind")
