"""Admin pages for agents in other processes: their registrations (replay endpoints) and the recording
tokens they record with.

Both lists are scoped by the tenancy rule (WorkspaceScoped). Nothing here saves a model itself: a
registration is added or re-pointed through provenance.access.onboarding.register_agent, a token is issued
through issue_agent_token and revoked through revoke_agent_token, so the role check, the validation and
the audit row are the same as from the API and `manage.py onboard`. Managing either needs the
Workspace admin role (provenance.manage_agents) in a workspace one is a member of (superusers: any).
A token's key is shown once, on the page that answers its issuing; only its hash is stored.
"""
from __future__ import annotations

import re
from urllib.parse import urlsplit

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html

from core.admin_rows import WrittenByServices
from core.vocabulary import Via
from provenance.access.admin_tenancy import WorkspaceScoped, refuse_unseen
from provenance.access import onboarding, tenancy
from provenance import validation
from provenance.models import AgentRegistration, AgentToken, Workspace

VIA = Via.ADMIN
ROLE_NEEDED = "the Workspace admin role (provenance.manage_agents) in that workspace"


def _may_manage_any(user) -> bool:
    return bool(user.is_active and (user.is_superuser or user.has_perm(onboarding.MANAGE_AGENTS)))


def manageable_workspaces(user):
    """The workspaces whose agents `user` may manage: the visible ones, if they hold the role."""
    return tenancy.visible_workspaces(user=user) if _may_manage_any(user) else Workspace.objects.none()


def _field_check(check, value):
    """A service's own field check as a form field's validation: the same rule, shown beside the field."""
    try:
        return check(value)
    except validation.InvalidInput as exc:
        raise forms.ValidationError(str(exc)) from None


class ReasonField(forms.CharField):
    def __init__(self, **kwargs):
        super().__init__(widget=forms.Textarea(attrs={"rows": 2, "cols": 60}), max_length=validation.REASON_MAX,
                         help_text="Why: recorded in the workspace's audit chain (required).",
                         error_messages={"required": "Give a reason: it is recorded in the workspace's audit chain."},
                         **kwargs)

    def clean(self, value):
        return _field_check(validation.reason, super().clean(value))


class AgentRegistrationForm(forms.ModelForm):
    # Not the model's URLField (its validator refuses hosts without a dot, such as a compose service's
    # name): the service's rule (http(s), a host, no credentials) is the one that holds.
    replay = forms.CharField(max_length=500, label="Replay URL",
                             help_text="Where a repair POSTs the action to re-run it: http:// or https://, "
                                       "no credentials in it.")
    reason = ReasonField()

    class Meta:
        model = AgentRegistration
        fields = ["workspace", "name", "timeout_seconds"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance.pk and "replay" in self.fields:
            self.fields["replay"].initial = self.instance.replay_url

    def clean_name(self):
        return _field_check(onboarding.remote_agent_name, self.cleaned_data.get("name"))

    def clean_replay(self):
        return _field_check(onboarding.replay_url, self.cleaned_data.get("replay"))

    def clean_timeout_seconds(self):
        return _field_check(onboarding.replay_timeout, self.cleaned_data.get("timeout_seconds"))


def _refused(model_admin, request, *, status: int, message: str, title: str) -> TemplateResponse:
    """A refusal in words, on a page of its own (403: the role; 404: not among the person's workspaces)."""
    context = {**model_admin.admin_site.each_context(request), "opts": model_admin.opts, "title": title,
               "message": message}
    return TemplateResponse(request, "admin/provenance/agenttoken/refused.html", context, status=status)


@admin.register(AgentRegistration)
class AgentRegistrationAdmin(WorkspaceScoped, admin.ModelAdmin):
    form = AgentRegistrationForm
    list_display = ("name", "workspace", "replay_host", "timeout_seconds", "created_by", "created_at")
    list_filter = ("workspace",)
    search_fields = ("name",)
    list_select_related = ("workspace", "created_by")

    @admin.display(description="replay URL host", ordering="replay_url")
    def replay_host(self, obj: AgentRegistration) -> str:
        parts = urlsplit(obj.replay_url)
        return f"{parts.hostname}:{parts.port}" if parts.port else (parts.hostname or "—")

    def has_view_permission(self, request, obj=None) -> bool:
        return _may_manage_any(request.user) or super().has_view_permission(request, obj)

    def has_add_permission(self, request) -> bool:
        return manageable_workspaces(request.user).exists()

    def has_change_permission(self, request, obj=None) -> bool:
        if obj is None:
            return _may_manage_any(request.user)
        return onboarding.may_manage_agents(request.user, obj.workspace)

    def has_delete_permission(self, request, obj=None) -> bool:
        return False  # no service unregisters an agent: a delete here would leave no audit row

    def get_fields(self, request, obj=None):
        if obj is None:
            return ["workspace", "name", "replay", "timeout_seconds", "reason"]
        editable = ["replay", "timeout_seconds", "reason"] if self.has_change_permission(request, obj) \
            else ["replay_url", "timeout_seconds"]
        return ["workspace", "name", *editable, "created_by", "created_at", "updated_at"]

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return ()
        # The workspace and name are who the agent is: another name is another registration.
        readonly = ["workspace", "name", "created_by", "created_at", "updated_at"]
        return readonly if self.has_change_permission(request, obj) else readonly + ["replay_url", "timeout_seconds"]

    def save_model(self, request, obj, form, change):
        """Through register_agent, not obj.save(): its role check, validation and audit row apply."""
        try:  # the workspace choices are the visible ones (WorkspaceScoped); adding needs the role there
            registration, created = onboarding.register_agent(
                workspace=obj.workspace, name=obj.name, replay=form.cleaned_data["replay"],
                timeout_seconds=form.cleaned_data["timeout_seconds"], actor=request.user,
                reason=form.cleaned_data["reason"], via=VIA)
        except onboarding.OnboardingRefused as exc:
            raise PermissionDenied(str(exc)) from None
        if created:  # the one time it is shown: the agent checks every replay's signature with it
            messages.warning(request, f"Replay secret of {registration.name} (shown once; replays are signed with it): "
                                      f"{registration.replay_secret}")
        # The admin's own bookkeeping (the log entry, the redirect) speaks of the row the service wrote.
        for field in obj._meta.concrete_fields:
            setattr(obj, field.attname, getattr(registration, field.attname))
        obj._state.adding = False

    def save_related(self, request, form, formsets, change):
        pass  # no relations of its own; form.save_m2m() would save nothing the service did not


class TokenIssueForm(forms.Form):
    workspace = forms.ModelChoiceField(queryset=Workspace.objects.none(), empty_label=None)
    label = forms.CharField(max_length=100, help_text="What the token is for, to tell it apart in the list.")
    agents = forms.CharField(required=False, max_length=2000,
                             help_text="Only as these agents (names separated by commas or spaces); empty: any "
                                       "agent of the workspace.")
    reason = ReasonField()

    def __init__(self, *args, workspaces, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["workspace"].queryset = workspaces

    def clean_label(self):
        return _field_check(lambda v: validation.text(v, field="label", max_length=100), self.cleaned_data["label"])

    def clean_agents(self):
        names = [n for n in re.split(r"[\s,]+", self.cleaned_data.get("agents") or "") if n]
        return _field_check(onboarding.token_agents, names)


@admin.register(AgentToken)
class AgentTokenAdmin(WrittenByServices, WorkspaceScoped, admin.ModelAdmin):
    """Never the key (it is not stored) nor its hash: the prefix tells tokens apart. Issued and revoked
    only through the services (the pages below)."""

    list_display = ("label", "workspace", "key_prefix", "agent_names", "created_by", "created_at", "expires_at",
                    "last_used_at", "revoked", "revoke_link")
    list_filter = ("workspace",)
    search_fields = ("label", "prefix")
    list_select_related = ("workspace", "created_by")
    fields = ("workspace", "label", "prefix", "agents", "created_by", "created_at", "expires_at", "last_used_at",
              "revoked_at")
    readonly_fields = fields
    change_list_template = "admin/provenance/agenttoken/change_list.html"
    change_form_template = "admin/provenance/agenttoken/change_form.html"

    @admin.display(description="prefix", ordering="prefix")
    def key_prefix(self, obj: AgentToken) -> str:
        return f"{obj.prefix}…"

    @admin.display(description="agents")
    def agent_names(self, obj: AgentToken) -> str:
        return ", ".join(obj.agents) if obj.agents else "any agent"

    @admin.display(description="revoked", ordering="revoked_at")
    def revoked(self, obj: AgentToken) -> str:
        return obj.revoked_at.strftime("%Y-%m-%d %H:%M") if obj.revoked_at else "—"

    @admin.display(description="")
    def revoke_link(self, obj: AgentToken) -> str:
        if obj.revoked_at:
            return ""
        return format_html('<a href="{}" class="revoke-token-link">Revoke…</a>',
                           reverse("admin:provenance_agenttoken_revoke", args=[obj.pk]))

    def has_view_permission(self, request, obj=None) -> bool:
        return _may_manage_any(request.user) or super().has_view_permission(request, obj)

    def get_urls(self):
        wrap = self.admin_site.admin_view
        return [
            path("issue/", wrap(self.issue_view), name="provenance_agenttoken_issue"),
            path("<int:token_pk>/revoke/", wrap(self.revoke_view), name="provenance_agenttoken_revoke"),
        ] + super().get_urls()

    def changelist_view(self, request, extra_context=None):
        return super().changelist_view(request, {"can_issue": manageable_workspaces(request.user).exists(),
                                                 **(extra_context or {})})

    def change_view(self, request, object_id, form_url="", extra_context=None):
        token = self.get_queryset(request).filter(pk=object_id).first() if str(object_id).isdigit() else None
        can_revoke = bool(token and token.revoked_at is None
                          and onboarding.may_manage_agents(request.user, token.workspace))
        return super().change_view(request, object_id, form_url, {"can_revoke": can_revoke, **(extra_context or {})})

    def issue_view(self, request):
        """GET: the form. POST: issue_agent_token, then the key, once, on the page that answers."""
        if request.method not in ("GET", "POST"):
            return HttpResponseNotAllowed(["GET", "POST"])
        workspaces = manageable_workspaces(request.user)
        title = "Issue a recording token"
        if not _may_manage_any(request.user):
            return _refused(self, request, status=403, title=title,
                            message=f"Issuing recording tokens needs {ROLE_NEEDED}; nothing was issued.")
        if request.method == "POST":
            asked = request.POST.get("workspace", "")
            if asked.isdigit() and not workspaces.filter(pk=int(asked)).exists():
                # Another team's workspace is answered like a missing one; the attempt is on the record.
                refuse_unseen(request, attempted="issue agent token", subject_type="workspace", subject_ids=[asked])
                return _refused(self, request, status=404, title=title,
                                message=f"There is no workspace {asked} among the workspaces you may manage; "
                                        f"nothing was issued.")
            form = TokenIssueForm(request.POST, workspaces=workspaces)
            if form.is_valid():
                data = form.cleaned_data
                try:
                    token, key = onboarding.issue_agent_token(workspace=data["workspace"], label=data["label"],
                                                              agents=data["agents"], actor=request.user,
                                                              reason=data["reason"], via=VIA)
                except onboarding.OnboardingRefused as exc:
                    return _refused(self, request, status=403, title=title, message=f"{exc}; nothing was issued.")
                context = {**self.admin_site.each_context(request), "opts": self.opts, "token": token, "key": key,
                           "title": f"Recording token issued for {token.workspace.name}"}
                # admin_view's never_cache marks it no-store: no cache keeps a copy of the key.
                return TemplateResponse(request, "admin/provenance/agenttoken/issued.html", context)
        else:
            asked = request.GET.get("workspace", "")  # preselected from a workspace's page; B's is no option
            form = TokenIssueForm(workspaces=workspaces, initial={"workspace": int(asked)} if asked.isdigit() else None)
        context = {**self.admin_site.each_context(request), "opts": self.opts, "title": title, "form": form}
        return TemplateResponse(request, "admin/provenance/agenttoken/issue.html", context)

    def revoke_view(self, request, token_pk: int):
        """GET: what revoking does and a reason field. POST: revoke_agent_token with that reason."""
        if request.method not in ("GET", "POST"):
            return HttpResponseNotAllowed(["GET", "POST"])
        title = "Revoke a recording token"
        token = self.get_queryset(request).select_related("workspace").filter(pk=token_pk).first()
        if token is None:
            refuse_unseen(request, attempted="revoke agent token", subject_type="agent_token", subject_ids=[token_pk])
            return _refused(self, request, status=404, title=title,
                            message=f"There is no recording token {token_pk} in the workspaces you may see; "
                                    f"nothing was revoked.")
        if not onboarding.may_manage_agents(request.user, token.workspace):
            return _refused(self, request, status=403, title=title,
                            message=f"Revoking recording tokens needs {ROLE_NEEDED}; nothing was revoked.")
        error = None
        if request.method == "POST" and token.revoked_at is None:
            try:
                onboarding.revoke_agent_token(token=token, actor=request.user, reason=request.POST.get("reason", ""),
                                              via=VIA)
            except validation.InvalidInput as exc:
                error = f"{exc}: it is recorded in the workspace's audit chain. Nothing was revoked."
            except onboarding.OnboardingRefused as exc:
                return _refused(self, request, status=403, title=title, message=f"{exc}; nothing was revoked.")
            except tenancy.NotVisible:
                raise Http404("no such recording token") from None
            else:
                self.message_user(request, f"Revoked the recording token {token}: it no longer authenticates.",
                                  messages.SUCCESS)
                return HttpResponseRedirect(reverse("admin:provenance_agenttoken_change", args=[token.pk]))
        context = {**self.admin_site.each_context(request), "opts": self.opts, "title": title, "token": token,
                   "error": error, "reason": request.POST.get("reason", ""),
                   "token_url": reverse("admin:provenance_agenttoken_change", args=[token.pk])}
        return TemplateResponse(request, "admin/provenance/agenttoken/revoke_confirmation.html", context,
                                status=400 if error else 200)
