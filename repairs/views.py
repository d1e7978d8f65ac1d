"""Small views behind the incident page, wired into the admin by IncidentAdmin.get_urls (so each one is
wrapped in admin_site.admin_view: staff only, and each checks the incident's view permission)."""
from __future__ import annotations

from django.http import HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.clickjacking import xframe_options_sameorigin

from repairs import graph_svg, radius_picture, selectors
from repairs.models import Incident


@never_cache
def progress_json(request, incident: Incident) -> JsonResponse:
    """What the progress bar polls: status, phase and percent; `running` false once the repair stopped."""
    return JsonResponse(selectors.progress(incident))


def page_number(request, name: str, default: int = 1) -> int:
    try:
        return max(1, int(request.GET.get(name, default)))
    except (TypeError, ValueError):
        return default


@xframe_options_sameorigin  # the incident page embeds it in an <object>
def graph_picture(request, incident: Incident, *, explain_url: str) -> HttpResponse:
    """The blast-radius picture as SVG: ?overview=1 for the grouped whole, else ?page=N of the detail."""
    if request.GET.get("overview"):
        picture = graph_svg.layout_overview(radius_picture.graph_overview(incident=incident))
        title = f"Blast radius of {incident.source_id}, grouped by agent and repair status"
    else:
        page, per_page = page_number(request, "page"), min(page_number(request, "per_page", 12), 50)
        picture = graph_svg.layout_page(radius_picture.graph_page(incident=incident, page=page, per_page=per_page),
                                        explain_url=explain_url)
        title = f"Blast radius of {incident.source_id}, tickets page {page}"
    response = HttpResponse(graph_svg.render_svg(picture, title=title), content_type="image/svg+xml; charset=utf-8")
    response["Content-Security-Policy"] = "default-src 'none'; style-src 'unsafe-inline'"  # no script in the picture
    return response
