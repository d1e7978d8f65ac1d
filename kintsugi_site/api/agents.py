"""The API for agents in other processes: onboarding a workspace (people's tokens, the Workspace admin
role) and the recording protocol (a recording token of one workspace). Thin views: the services are
provenance.access.onboarding and provenance.recording.remote; their errors are mapped in kintsugi_site.api.errors."""
from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiCallback, OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import exceptions, serializers
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.decorators import action
from rest_framework.generics import get_object_or_404
from rest_framework.permissions import BasePermission, IsAuthenticated
from rest_framework.response import Response
from rest_framework.views import APIView

from kintsugi_site.api import views
from kintsugi_site.api.serializers import WorkspaceSerializer
from kintsugi_site.api.recording_serializers import (
    OpenActionSerializer, ActionOpenedSerializer, ActionDescriptionSerializer, AbandonedSerializer, ANSWERS,
    REQUESTS, SUMMARIES)
from provenance.access import onboarding
from provenance.recording import remote
from provenance.recording import replay as replay_protocol
from provenance.models import AgentRegistration, AgentToken, Source

VIA = views.VIA


# --- recording tokens -----------------------------------------------------------------------------------
class AgentPrincipal:
    """Who a recording token speaks for: an agent process of one workspace, not a person."""

    is_authenticated = True
    is_active = True
    is_superuser = False
    is_staff = False
    pk = None  # no person: the audit trail records it by name (agent-token:<prefix>)

    def __init__(self, token: AgentToken):
        self.token = token
        self.username = f"agent-token:{token.prefix}"

    def get_username(self) -> str:
        return self.username

    def has_perm(self, perm, obj=None) -> bool:
        return False


class AgentTokenAuthentication(BaseAuthentication):
    """`Authorization: Bearer kag_…`: a recording token issued for one workspace."""

    def authenticate(self, request):
        parts = get_authorization_header(request).split()
        if len(parts) != 2 or parts[0].lower() != b"bearer":
            return None
        token = onboarding.token_for_key(parts[1].decode("latin-1"))
        if token is None:
            raise exceptions.AuthenticationFailed("unknown or revoked recording token")
        return AgentPrincipal(token), token

    def authenticate_header(self, request):
        return 'Bearer realm="recording"'


class AgentTokenScheme(OpenApiAuthenticationExtension):
    target_class = AgentTokenAuthentication
    name = "recordingToken"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer",
                "description": "A recording token (`kag_…`) issued by a Workspace admin for one workspace."}


class HasRecordingToken(BasePermission):
    message = "a recording token is required"

    def has_permission(self, request, view) -> bool:
        return isinstance(request.auth, AgentToken)


# --- shapes ---------------------------------------------------------------------------------------------
class RecordingView(APIView):
    authentication_classes = [AgentTokenAuthentication]
    permission_classes = [HasRecordingToken]


class OpenActionView(RecordingView):
    @extend_schema(summary="Open an action: a root, or the next handoff of a finished action",
                   request=OpenActionSerializer, responses={201: ActionOpenedSerializer}, tags=["recording"])
    def post(self, request):
        data = request.data if isinstance(request.data, dict) else {}
        unknown = sorted(set(data) - {"agent", "payload", "parent"})
        if unknown or not isinstance(request.data, dict):
            raise exceptions.ValidationError({name: ["unknown field"] for name in unknown} or "a JSON object is needed")
        opened = remote.open_action(token=request.auth, agent=data.get("agent"), payload=data.get("payload"),
                                    parent=data.get("parent"))
        return Response(opened, status=201)


class ActionView(RecordingView):
    @extend_schema(summary="An open recording's action", responses=ActionDescriptionSerializer, tags=["recording"])
    def get(self, request, action_id: int):
        return Response(remote.describe(token=request.auth, action_id=action_id))

    @extend_schema(summary="Abandon the open recording holding this action (the reason in the body or ?reason=): "
                   "nothing of it is recorded", request=views.ReasonSerializer, responses={200: AbandonedSerializer},
                   tags=["recording"], operation_id="recording_abandon_delete",
                   parameters=[OpenApiParameter("reason", str, required=False,
                                                description="Why, when the DELETE carries no body.")])
    def delete(self, request, action_id: int):
        data = request.data if isinstance(request.data, dict) and request.data else request.query_params
        reason = views._valid(views.ReasonSerializer, {"reason": data.get("reason")})["reason"]
        return Response(remote.abandon(token=request.auth, action_id=action_id, reason=reason))


class AbandonView(RecordingView):
    @extend_schema(summary="Abandon the open recording holding this action: nothing of it is recorded",
                   request=views.ReasonSerializer, responses={200: AbandonedSerializer}, tags=["recording"])
    def post(self, request, action_id: int):
        reason = views._valid(views.ReasonSerializer, request.data)["reason"]
        return Response(remote.abandon(token=request.auth, action_id=action_id, reason=reason))


def _call_view(op: str):
    def post(self, request, action_id: int):
        if op == "finish":
            return Response(remote.finish_action(token=request.auth, action_id=action_id, body=request.data))
        return Response(remote.call(token=request.auth, action_id=action_id, op=op, body=request.data))

    post = extend_schema(summary=SUMMARIES[op], request=REQUESTS[op], responses=ANSWERS[op], tags=["recording"],
                         operation_id=f"recording_{op}")(post)
    return type(f"{op.title()}View", (RecordingView,), {"post": post})


CALL_VIEWS = {op: _call_view(op) for op in ("ingest", "get", "set", "handoff", "effect", "finish")}


# --- onboarding (people) --------------------------------------------------------------------------------
class CreateWorkspaceSerializer(views.ReasonSerializer):
    name = serializers.SlugField(max_length=64)


# POST creates and never overwrites; PUT and PATCH change what exists (the id in the body).
MODES = {"POST": "create", "PUT": "update", "PATCH": "update"}


class SourcePutSerializer(views.ReasonSerializer):
    source_id = serializers.CharField(max_length=200)
    title = serializers.CharField(max_length=200, required=False, allow_blank=True)
    content = serializers.CharField(max_length=256 * 1024, trim_whitespace=False, required=False, allow_blank=True,
                                    help_text="Needed to create a source (it may be empty: a page that says "
                                              "nothing is still read); an update without it keeps the content.")
    trust = serializers.ChoiceField(choices=Source.Trust.choices, required=False,
                                    help_text="A new source's trust; changing it later needs the Support lead role.")


class TicketPutSerializer(views.ReasonSerializer):
    ticket_id = serializers.CharField(max_length=32)
    customer_name = serializers.CharField(max_length=200, required=False)
    customer_email = serializers.EmailField(required=False)
    subject = serializers.CharField(max_length=300, required=False)
    body = serializers.CharField(max_length=32 * 1024, required=False, trim_whitespace=False)
    amount_cents = serializers.IntegerField(min_value=0, required=False)
    currency = serializers.CharField(max_length=3, required=False)
    tier = serializers.CharField(max_length=16, required=False)
    payment_reference = serializers.CharField(max_length=64, required=False, allow_blank=True)
    locale = serializers.CharField(max_length=16, required=False, allow_blank=True,
                                   help_text="The customer's locale (e.g. de_DE): how money is written in their "
                                             "messages; empty: the workspace's.")


class AgentRegistrationSerializer(serializers.ModelSerializer):
    class Meta:
        model = AgentRegistration
        fields = ["name", "replay_url", "timeout_seconds", "created_at", "updated_at"]


class RegisteredAgentSerializer(AgentRegistrationSerializer):
    replay_secret = serializers.CharField(required=False, help_text=(
        "Only in the answer that created the registration (and in a rotation's): the `krs_` secret every "
        "replay POST to replay_url is signed with (X-Kintsugi-Signature). Never shown again."))

    class Meta(AgentRegistrationSerializer.Meta):
        fields = AgentRegistrationSerializer.Meta.fields + ["replay_secret"]


class ReplayRequestSerializer(serializers.Serializer):
    workspace = serializers.CharField()
    agent = serializers.CharField(help_text="The registered agent to run.")
    action = serializers.IntegerField(help_text="The action to re-run: its calls go to "
                                                "`<base_url>/api/v1/recording/actions/<action>/<call>/`.")
    payload = serializers.JSONField(help_text="The action's input, as recorded.")
    mode = serializers.ChoiceField(choices=["replay"])
    purpose = serializers.ChoiceField(choices=replay_protocol.PURPOSES, help_text=(
        "Why it runs: `repair` (a repair job re-runs an action the flagged source reached; what it decides "
        "replaces the old decision, its effects are held for a person's approval), `verification` (the clean "
        "baseline run that checks a repair: nothing of it is kept beyond the comparison), `what_if` (the "
        "walk of a what-if or of the suspicious-sources analysis: never applied)."))
    replay_id = serializers.CharField(help_text="Unique per request: refuse one seen before (401).")
    base_url = serializers.CharField(help_text="Where this replay's calls go: a server that lives as long as the replay.")
    token = serializers.CharField(help_text="Bearer token for those calls only, good for this one action.")


REPLAY_CALLBACK_TEXT = (
    "kintsugi re-runs one recorded action of this agent. Signed: `X-Kintsugi-Timestamp: <unix seconds>` and "
    "`X-Kintsugi-Signature: v1=<hex HMAC-SHA256(replay_secret, \"<timestamp>.\" + raw body)>`. Refuse with 401, "
    "before running anything, a request whose headers are missing, whose signature does not match (compare in "
    "constant time), whose timestamp is more than 300 s from now or whose replay_id was already seen "
    "(kintsugi_client.signing does all four).\n\n"
    "Replay mode: make the same calls as when recording, to `base_url` with `token`, on the action named here "
    "(never open it: it is open). `ingest` of the flagged source answers content null; `get` reads the repair's "
    "view of memory; `set` is staged for the repair; `handoff` is still called (the repair matches it to the "
    "recorded child and replays that child itself; do not open it); every `effect` answers `perform: false, "
    "held: true`: record it, never perform it; `finish` with the decision ends the replay.\n\n"
    "Answers: any 2xx is taken, and the replay then ends at `finish`: a 200 sent after finish (as "
    "kintsugi_client.Desk does) and a 202 sent at once (then finish within the registration's timeout_seconds) "
    "work the same. A 4xx or 5xx, no answer, or no finish within timeout_seconds: the repair blocks with a "
    "fixed-words reason (never the agent's text) and retries like an outage until the agent has been "
    "unreachable for KINTSUGI_REPLAY_OUTAGE_SECONDS (or KINTSUGI_REPLAY_MAX_ATTEMPTS failures), then needs attention "
    "and is resumed once the agent answers. A call the recorder refuses during the replay fails the repair.")


class AgentRegisterSerializer(views.ReasonSerializer):
    name = serializers.CharField(max_length=64)
    replay_url = serializers.CharField(max_length=500)
    timeout_seconds = serializers.IntegerField(required=False, default=30)


class AgentTokenSerializer(serializers.ModelSerializer):
    class Meta:
        model = AgentToken
        fields = ["id", "label", "prefix", "agents", "created_at", "revoked_at"]


class IssuedTokenSerializer(AgentTokenSerializer):
    key = serializers.CharField(help_text="Shown once: only its hash is kept.")

    class Meta(AgentTokenSerializer.Meta):
        fields = AgentTokenSerializer.Meta.fields + ["key"]


class TokenIssueSerializer(views.ReasonSerializer):
    label = serializers.CharField(max_length=100)
    agents = serializers.ListField(child=serializers.CharField(max_length=64), required=False)


class MayCreateWorkspaces(IsAuthenticated):
    """Refused before the body is read, as the service would refuse it (provenance.access.onboarding)."""

    message = "creating workspaces needs the Workspace admin role (provenance.add_workspace)"

    def has_permission(self, request, view) -> bool:
        return super().has_permission(request, view) and request.user.has_perm(onboarding.ADD_WORKSPACE)


class WorkspaceViewSet(views.WorkspaceViewSet):
    """The read endpoints, and what a Workspace admin sets up: the workspace, its sources, tickets,
    agent registrations and recording tokens (the services check the role and membership)."""

    def get_permissions(self):
        if self.action == "create":
            return [MayCreateWorkspaces()]
        return super().get_permissions()

    @extend_schema(summary="Create a workspace; its creator becomes a member (Workspace admin role)",
                   request=CreateWorkspaceSerializer, responses={201: WorkspaceSerializer})
    def create(self, request):
        data = views._valid(CreateWorkspaceSerializer, request.data)
        ws = onboarding.create_workspace(name=data["name"], actor=request.user, reason=data["reason"], via=VIA)
        return Response(WorkspaceSerializer(ws, context={"request": request}).data, status=201)

    @extend_schema(methods=["post"], summary="Create a source (409 if it exists)", request=SourcePutSerializer,
                   responses={201: views.SourceSerializer})
    @extend_schema(methods=["put", "patch"], summary="Change a source's content or title, with a reason",
                   request=SourcePutSerializer, responses={200: views.SourceSerializer})
    @action(detail=True, methods=["post", "put", "patch"], url_path="sources")
    def put_source(self, request, pk=None):
        data = views._valid(SourcePutSerializer, request.data)
        source, created = onboarding.put_source(
            workspace=self.get_object(), source_id=data["source_id"], content=data.get("content"),
            title=data.get("title", ""), trust=data.get("trust"), actor=request.user, reason=data["reason"], via=VIA,
            mode=MODES[request.method])
        return Response(views.SourceSerializer(source, context={"request": request}).data, status=201 if created else 200)

    @extend_schema(methods=["post"], summary="Create a ticket (409 if it exists)", request=TicketPutSerializer,
                   responses={201: OpenApiTypes.OBJECT})
    @extend_schema(methods=["put", "patch"], summary="Change a ticket's fields, with a reason (only its text once "
                   "money was executed on it)", request=TicketPutSerializer, responses={200: OpenApiTypes.OBJECT})
    @action(detail=True, methods=["post", "put", "patch"], url_path="tickets")
    def put_ticket(self, request, pk=None):
        data = views._valid(TicketPutSerializer, request.data)
        reason, ticket_id = data.pop("reason"), data.pop("ticket_id")
        ticket, created = onboarding.put_ticket(workspace=self.get_object(), ticket_id=ticket_id, fields=data,
                                                actor=request.user, reason=reason, via=VIA, mode=MODES[request.method])
        return Response(ticket.as_payload() | {"locale": ticket.locale, "created": created}, status=201 if created else 200)

    @extend_schema(methods=["get"], summary="The workspace's agents in other processes",
                   responses=AgentRegistrationSerializer(many=True))
    @extend_schema(methods=["post"], summary="Register an agent with its replay endpoint (or re-point it); a new "
                   "registration's answer carries its replay_secret, shown this once",
                   request=AgentRegisterSerializer, responses={200: RegisteredAgentSerializer},
                   callbacks=[OpenApiCallback("replay", "{$request.body#/replay_url}", extend_schema(
                       summary="Replay one action (signed; say why in `purpose`)", description=REPLAY_CALLBACK_TEXT,
                       request=ReplayRequestSerializer,
                       responses={200: OpenApiResponse(description="Taken (after finish, or before it: any 2xx)."),
                                  202: OpenApiResponse(description="Taken; finish follows within timeout_seconds."),
                                  401: OpenApiResponse(description="Refused: not signed by kintsugi, stale, or a "
                                                                   "replay_id seen before. The repair blocks."),
                                  500: OpenApiResponse(description="Any 4xx/5xx: the repair blocks and retries, "
                                                                   "then fails.")}))])
    @action(detail=True, methods=["get", "post"], url_path="agents", pagination_class=None)
    def agents(self, request, pk=None):
        ws = self.get_object()
        if request.method == "GET":
            return Response(AgentRegistrationSerializer(ws.agent_registrations.all(), many=True).data)
        data = views._valid(AgentRegisterSerializer, request.data)
        registration, created = onboarding.register_agent(workspace=ws, name=data["name"], replay=data["replay_url"],
                                                          timeout_seconds=data["timeout_seconds"], actor=request.user,
                                                          reason=data["reason"], via=VIA)
        answer = AgentRegistrationSerializer(registration).data
        return Response(answer | {"replay_secret": registration.replay_secret} if created else answer)

    @extend_schema(summary="Give a registered agent a new replay signing secret (shown once; the old one is "
                   "refused from the next replay on)", request=views.ReasonSerializer,
                   responses={200: RegisteredAgentSerializer})
    @action(detail=True, methods=["post"], url_path=r"agents/(?P<agent_name>[A-Za-z0-9_.-]+)/rotate-secret")
    def rotate_agent_secret(self, request, pk=None, agent_name=None):
        ws = self.get_object()
        reason = views._valid(views.ReasonSerializer, request.data)["reason"]
        registration = get_object_or_404(ws.agent_registrations.all(), name=agent_name)
        registration = onboarding.rotate_replay_secret(registration=registration, actor=request.user, reason=reason,
                                                       via=VIA)
        return Response(AgentRegistrationSerializer(registration).data | {"replay_secret": registration.replay_secret})

    @extend_schema(methods=["get"], summary="The workspace's recording tokens (never their keys)",
                   responses=AgentTokenSerializer(many=True))
    @extend_schema(methods=["post"], summary="Issue a recording token (the key is shown once)",
                   request=TokenIssueSerializer, responses={201: IssuedTokenSerializer})
    @action(detail=True, methods=["get", "post"], url_path="agent-tokens", pagination_class=None)
    def agent_tokens(self, request, pk=None):
        ws = self.get_object()
        if request.method == "GET":
            if not onboarding.may_manage_agents(request.user, ws):
                raise exceptions.PermissionDenied("the Workspace admin role is needed to list recording tokens")
            return Response(AgentTokenSerializer(ws.agent_tokens.all(), many=True).data)
        data = views._valid(TokenIssueSerializer, request.data)
        token, key = onboarding.issue_agent_token(workspace=ws, label=data["label"], agents=data.get("agents"),
                                                  actor=request.user, reason=data["reason"], via=VIA)
        return Response(AgentTokenSerializer(token).data | {"key": key}, status=201)

    @extend_schema(summary="Revoke a recording token", request=views.ReasonSerializer,
                   responses={200: AgentTokenSerializer})
    @action(detail=True, methods=["post"], url_path=r"agent-tokens/(?P<token_id>\d+)/revoke")
    def revoke_token(self, request, pk=None, token_id=None):
        ws = self.get_object()
        reason = views._valid(views.ReasonSerializer, request.data)["reason"]
        token = get_object_or_404(ws.agent_tokens.all(), pk=int(token_id))
        token = onboarding.revoke_agent_token(token=token, actor=request.user, reason=reason, via=VIA)
        return Response(AgentTokenSerializer(token).data)
