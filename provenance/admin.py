"""The provenance models' admin pages that need nothing above provenance: the sandbox ledger, the outbox,
the agents. Workspaces and sources are administered from repairs (repairs.workspace_admin: flagging, the
what-if), tickets from compensation (compensation.ticket_admin: what the desk did about each)."""
from django.contrib import admin

from core.money import format_money
from provenance.access.admin_tenancy import WorkspaceScoped
from provenance.models import LedgerEntry, OutboxEmail


class MoneyColumn:
    """An "amount" column and read-only field shown as money ("$75.00") from amount_cents and currency.
    Whoever may edit the row (a superuser) edits the stored integer, labelled in the currency's hundredths."""

    @admin.display(description="amount", ordering="amount_cents")
    def amount(self, obj) -> str:
        return format_money(obj.amount_cents, obj.currency) if obj.amount_cents is not None else "—"

    def get_exclude(self, request, obj=None):
        return () if self.has_change_permission(request, obj) else ("amount_cents",)

    def get_readonly_fields(self, request, obj=None):
        return ("amount",) if obj is not None else ()

    def formfield_for_dbfield(self, db_field, request, **kwargs):
        if db_field.name == "amount_cents":
            kwargs["label"] = "Amount in hundredths (7500 = 75.00)"
        return super().formfield_for_dbfield(db_field, request, **kwargs)


@admin.register(LedgerEntry)
class LedgerEntryAdmin(MoneyColumn, WorkspaceScoped, admin.ModelAdmin):
    list_display = ("reference", "workspace", "kind", "ticket_id", "amount", "created_at")
    list_filter = ("workspace", "kind")


@admin.register(OutboxEmail)
class OutboxEmailAdmin(WorkspaceScoped, admin.ModelAdmin):
    list_display = ("to", "subject", "workspace", "created_at")
    list_filter = ("workspace",)


# Agent registrations and recording tokens live in their own module.
from provenance.agents_admin import AgentRegistrationAdmin, AgentTokenAdmin  # noqa: E402,F401
from provenance import tokens_admin  # noqa: E402,F401  (the API token list with expiry and last use)
from provenance import tokens_admin  # noqa: E402,F401  (the API token list with expiry and last use)
