"""The MCP tool that exports an incident's provenance as W3C PROV (kintsugi_site.prov_export), under the
rule of the API's `GET /api/v1/incidents/{id}/prov/`: the incident read capability, and an incident of
another workspace is unknown."""
from __future__ import annotations

import json
from typing import Any

from mcp.types import ToolAnnotations

from kintsugi_site import prov_export
from provenance.access import capabilities, tenancy
from repairs.models import Incident


def incident_prov(*, user, incident: int, format: str) -> dict[str, Any]:
    """The incident's PROV document: PROV-JSON as an object (`prov`), or PROV-O as Turtle text (`turtle`)."""
    if format not in prov_export.FORMATS:
        raise ValueError(f"format must be one of {', '.join(prov_export.FORMATS)}")
    capabilities.require(user, "read_incidents")  # before the lookup, in the API's order: 403, then 404
    found = (Incident.objects.filter(pk=incident, workspace__in=tenancy.visible_workspaces(user=user))
             .select_related("workspace", "flagged_by").first())
    if found is None:
        raise LookupError(f"unknown incident {incident}")
    body, _, _ = prov_export.render(found, format)
    answer = {"incident": found.pk, "workspace": found.workspace.name, "format": format}
    return answer | ({"prov": json.loads(body)} if format == "json" else {"turtle": body})


def register_prov_tools(server) -> None:
    from kintsugi_site.mcp_server import _call

    @server.tool(name="incident_prov", annotations=ToolAnnotations(readOnlyHint=True, openWorldHint=False))
    async def incident_prov_tool(incident: int, format: str = "json") -> dict[str, Any]:
        """The provenance of an incident as W3C PROV: format "json" (PROV-JSON, under `prov`) or "ttl"
        (PROV-O as Turtle text, under `turtle`). Sources, fact versions, effects and compensation items
        are entities; actions, the repair and each review decision are activities; kintsugi agents and
        people are agents. Needs the incident read role."""
        return await _call(incident_prov, incident=incident, format=format)
