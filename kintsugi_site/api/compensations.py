"""For a team that performs its own effects (a workspace whose connector for an item kind is
agent_pull): its agent pulls the approved compensations offered to it and acknowledges each, with the
workspace's recording token. Thin views over compensation.delivery.acknowledgements; another workspace's item,
or one compensating actions of agents the token may not record as, answers 404 as one that does not
exist."""
from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.response import Response
from rest_framework.reverse import reverse

from compensation.delivery import acknowledgements
from kintsugi_site.api import views
from kintsugi_site.api.agents import RecordingView
from kintsugi_site.api.errors import ApiError
from kintsugi_site.api.compensation_serializers import AckAnswerSerializer, AckSerializer, OfferedPageSerializer

PAGE_DEFAULT, PAGE_MAX = 50, 200
STATES = ("pending",)  # what the agent may ask for: the items awaiting its answer


def _whole(request, name: str, *, minimum: int, default: int | None, maximum: int = 2 ** 63 - 1) -> int | None:
    values = request.query_params.getlist(name)
    if not values:
        return default
    if len(values) != 1 or not values[0].isdigit() or len(values[0]) > 19 or not minimum <= int(values[0]) <= maximum:
        raise ApiError(f"{name} must be a whole number from {minimum} to {maximum}", code="invalid",
                       details={name: [v[:40] for v in values]})
    return int(values[0])


class OfferedCompensationsView(RecordingView):
    @extend_schema(
        summary="Approved compensations awaiting your agent (agent_pull), oldest first, keyset-paginated",
        parameters=[OpenApiParameter("state", str, enum=list(STATES), description="pending (the default): offered "
                                     "and not yet acknowledged"),
                    OpenApiParameter("after", int, description="The last id of the previous page."),
                    OpenApiParameter("limit", int, description=f"At most {PAGE_MAX}; {PAGE_DEFAULT} by default.")],
        responses=OfferedPageSerializer, tags=["recording"], operation_id="recording_compensations_pending")
    def get(self, request):
        state = request.query_params.getlist("state") or ["pending"]
        if len(state) != 1 or state[0] not in STATES:
            raise ApiError(f"state must be one of {', '.join(STATES)}", code="invalid",
                           details={"state": [s[:40] for s in state]})
        after = _whole(request, "after", minimum=0, default=None)
        limit = _whole(request, "limit", minimum=1, default=PAGE_DEFAULT, maximum=PAGE_MAX)
        items = acknowledgements.offered(token=request.auth, after=after, limit=limit)
        nxt = None
        if len(items) == limit:
            nxt = request.build_absolute_uri(reverse("api:recording-compensations") +
                                             f"?state=pending&limit={limit}&after={items[-1].pk}")
        page = {"results": acknowledgements.offered_payloads(items), "next": nxt}
        return Response(OfferedPageSerializer(page).data)


class AcknowledgeView(RecordingView):
    @extend_schema(
        summary="Acknowledge an offered compensation: performed (executed) or failed (a person decides); the "
                "same answer again returns the first, another answer is a 409",
        request=AckSerializer, responses={200: AckAnswerSerializer}, tags=["recording"],
        operation_id="recording_compensation_ack")
    def post(self, request, item_id: int):
        data = views._valid(AckSerializer, request.data)
        answer = acknowledgements.acknowledge(token=request.auth, actor=request.user, item_id=item_id,
                                              outcome=data["outcome"], reference=data.get("reference", ""),
                                              message=data.get("message", ""), via=views.VIA)
        return Response(AckAnswerSerializer(answer).data)
