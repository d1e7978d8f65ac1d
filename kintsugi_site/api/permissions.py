from rest_framework.permissions import IsAuthenticated


class MayRetryIncidents(IsAuthenticated):
    """Retrying a repair is the Support lead's call, like flagging (repairs.flag_source).

    flag_source checks its permission inside the service; retry_incident does not check one, so the API
    checks it here."""

    message = "retrying a repair needs the Support lead role (repairs.flag_source)"

    def has_permission(self, request, view) -> bool:
        return super().has_permission(request, view) and request.user.has_perm("repairs.flag_source")
