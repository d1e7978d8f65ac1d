from rest_framework.settings import api_settings
from rest_framework.throttling import ScopedRateThrottle


class ExpensiveEndpointThrottle(ScopedRateThrottle):
    """Per-user rate for the endpoints that walk the graph or render reports (`throttle_scope` on the view).

    Reads the rate from settings on every request (ScopedRateThrottle binds the rates at import time),
    so a deployment, or a test, can change REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"] without a restart."""

    def get_rate(self):
        return api_settings.DEFAULT_THROTTLE_RATES.get(self.scope)
