from django.contrib import admin

from provenance.models import LedgerEntry, OutboxEmail, Source, Ticket, Workspace


@admin.register(Workspace)
class WorkspaceAdmin(admin.ModelAdmin):
    list_display = ("name", "run_number", "action_count", "created_at")
    search_fields = ("name",)
    filter_horizontal = ("members",)


@admin.register(Source)
class SourceAdmin(admin.ModelAdmin):
    list_display = ("source_id", "workspace", "title")
    list_filter = ("workspace",)
    search_fields = ("source_id", "title")


@admin.register(Ticket)
class TicketAdmin(admin.ModelAdmin):
    list_display = ("ticket_id", "workspace", "customer_name", "subject", "amount_cents", "tier")
    list_filter = ("workspace", "tier")
    search_fields = ("ticket_id", "customer_name", "customer_email")


@admin.register(LedgerEntry)
class LedgerEntryAdmin(admin.ModelAdmin):
    list_display = ("reference", "workspace", "kind", "ticket_id", "amount_cents", "currency", "created_at")
    list_filter = ("workspace", "kind")


@admin.register(OutboxEmail)
class OutboxEmailAdmin(admin.ModelAdmin):
    list_display = ("to", "subject", "workspace", "created_at")
    list_filter = ("workspace",)
