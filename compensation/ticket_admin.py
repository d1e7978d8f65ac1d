"""The ticket's admin page, with what the desk did about the ticket under its fields."""
from django.contrib import admin

from compensation.ticket_record import ticket_record
from provenance.admin import MoneyColumn
from provenance.access.admin_tenancy import WorkspaceScoped
from provenance.models import Ticket


@admin.register(Ticket)
class TicketAdmin(MoneyColumn, WorkspaceScoped, admin.ModelAdmin):
    list_display = ("ticket_id", "workspace", "customer_name", "subject", "amount", "tier")
    list_filter = ("workspace", "tier")
    search_fields = ("ticket_id", "customer_name", "customer_email")
    change_form_template = "admin/provenance/ticket/change_form.html"

    def change_view(self, request, object_id, form_url="", extra_context=None):
        # Under the ticket's fields: what the desk did about it (compensation.ticket_record reads it).
        ticket = self.get_queryset(request).filter(pk=object_id).first() if str(object_id).isdigit() else None
        record = ticket_record(ticket=ticket, user=request.user) if ticket is not None else None
        return super().change_view(request, object_id, form_url, {"ticket_record": record, **(extra_context or {})})
