"""Workspaces on two FalkorDB servers: placement at creation, a repair on each, moving one."""
import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from compensation.models import AuditEvent
from provenance.desk.scenario import POISONED_PAGE
from provenance.graph.graph import (Graph, GraphUnavailable, cache_graph_name, copy_graph, graph_name, server_url,
                              workspace_graph_names)
from provenance.models import Workspace
from provenance.recording import quarantine
from provenance.moves import MoveRefused, move_workspace
from provenance.recording.services import desk_run
from repairs.deep_check import verify_full
from repairs.models import Incident
from tests.helpers import graph_dump, repair

pytestmark = pytest.mark.django_db(transaction=True)

CANONICAL = {"poisoned": 1, "rerun_changed": 7, "rerun_same": 3, "skipped": 6, "superseded": 8, "new": 4}


def _graphs_on(url: str, workspace: str) -> list[str]:
    return sorted(n for n in workspace_graph_names(workspace) if Graph(n, url).exists())


def _admin():
    return get_user_model().objects.create_superuser("ops", password="ops-pass-123")


def _full_verification_on(url: str, incident: Incident) -> None:
    """The whole-desk replay (`verify --full`) records its baseline graph beside the workspace's own."""
    name = incident.workspace.name
    full = verify_full(incident=incident, actor=None, reason="nightly deep check", via="cli")
    assert (full["scope"], full["facts"], full["decisions"], full["effects"]) == ("full", 0, 0, 0)
    assert _graphs_on(url, name) == sorted(workspace_graph_names(name))


def _assert_repaired(incident: Incident) -> None:
    assert incident.status == "repaired"
    assert incident.blast_radius == 25 and incident.counts == CANONICAL
    assert {k: incident.verification[k] for k in ("facts", "decisions", "effects")} == {
        "facts": 0, "decisions": 0, "effects": 0}


def test_two_workspaces_land_on_different_servers_and_each_repairs_there(two_falkordb_servers, settings):
    settings.CELERY_TASK_ALWAYS_EAGER = False
    first, second = two_falkordb_servers
    desk_run(workspace="east")
    desk_run(workspace="west")
    placed = dict(Workspace.objects.values_list("name", "falkordb_server"))
    assert placed == {"east": first, "west": second}
    for name, key in placed.items():
        other = second if key == first else first
        incident = repair(name, POISONED_PAGE)
        _assert_repaired(incident)
        # Graph and model cache on its own server, nothing of it on the other: a repair's own
        # verification re-runs only its radius and records no baseline graph.
        assert _graphs_on(server_url(key), name) == sorted([graph_name(name), cache_graph_name(name)])
        assert _graphs_on(server_url(other), name) == []
        # The whole-desk replay's baseline lands on the workspace's server too.
        _full_verification_on(server_url(key), incident)
        assert _graphs_on(server_url(other), name) == []


def test_new_workspaces_go_to_the_server_holding_fewest(two_falkordb_servers):
    first, second = two_falkordb_servers
    Workspace.objects.create(name="a1")
    Workspace.objects.create(name="a2", falkordb_server=first)  # placed by hand (a move)
    assert Workspace.objects.get(name="a1").falkordb_server == first
    assert Workspace.objects.create(name="a3").falkordb_server == second  # first holds two
    assert Workspace.objects.create(name="a4").falkordb_server == second  # 2 : 1 -> second again
    assert Workspace.objects.create(name="a5").falkordb_server == first  # 2 : 2, ties to the first listed


def test_a_moved_workspace_keeps_its_data_and_repairs_on_the_new_server(two_falkordb_servers, settings, capsys):
    settings.CELERY_TASK_ALWAYS_EAGER = False
    first, second = two_falkordb_servers
    desk_run(workspace="mover")
    assert Workspace.objects.get(name="mover").falkordb_server == first
    repaired = repair("mover", POISONED_PAGE)
    _assert_repaired(repaired)
    _full_verification_on(server_url(first), repaired)  # so the move has a baseline graph to carry too
    before = graph_dump("mover")
    ops = _admin()
    call_command("move_workspace", "mover", "--to", second, "--user", "ops", "--reason", "spread tenants")
    out = capsys.readouterr().out
    assert f"moved mover from {first} to {second}" in out and "deleted" in out
    assert Workspace.objects.get(name="mover").falkordb_server == second
    assert graph_dump("mover") == before  # read through the placement: the new server
    assert _graphs_on(server_url(first), "mover") == []
    assert _graphs_on(server_url(second), "mover") == sorted(workspace_graph_names("mover"))
    event = AuditEvent.objects.get(action="workspace.moved")
    assert (event.actor, event.reason, event.workspace.name, event.data["from"], event.data["to"]) == (
        ops, "spread tenants", "mover", first, second)
    # The repair's outcome stands on the new server, and the next repair runs there.
    # The flagged page stays quarantined after its repair; lifting it lets the same page poison a new run.
    Incident.objects.filter(pk=repaired.pk).update(status=Incident.Status.CLOSED)
    assert quarantine.lift(incident_id=repaired.pk, actor=ops, reason="the page is back", via="cli")
    desk_run(workspace="mover")
    assert Workspace.objects.get(name="mover").falkordb_server == second  # a new run stays where it is
    _assert_repaired(repair("mover", POISONED_PAGE))
    assert _graphs_on(server_url(first), "mover") == []


def test_rerunning_a_move_deletes_what_an_interrupted_one_left(two_falkordb_servers):
    first, second = two_falkordb_servers
    desk_run(workspace="crashy")
    ops = _admin()
    move_workspace(workspace=Workspace.objects.get(name="crashy"), to_server=second, actor=ops, reason="spread",
                   via="cli")
    # As if the process had died after the switch and before deleting: a copy is back on the first server.
    for name in workspace_graph_names("crashy"):
        copy_graph(name, source_url=server_url(second), target_url=server_url(first))
    assert _graphs_on(server_url(first), "crashy")
    result = move_workspace(workspace=Workspace.objects.get(name="crashy"), to_server=second, actor=ops,
                            reason="finish the move", via="cli")
    assert not result.moved and result.deleted
    assert _graphs_on(server_url(first), "crashy") == []
    assert _graphs_on(server_url(second), "crashy")
    assert AuditEvent.objects.filter(action="workspace.leftovers_deleted").count() == 1
    again = move_workspace(workspace=Workspace.objects.get(name="crashy"), to_server=second, actor=ops,
                           reason="once more", via="cli")
    assert (again.moved, again.deleted) == (False, [])


@pytest.mark.parametrize("case", ["repair under way", "not a superuser", "no reason", "unknown server"])
def test_a_refused_move_copies_and_switches_nothing(two_falkordb_servers, case, lead):
    first, second = two_falkordb_servers
    desk_run(workspace="stay")
    ws = Workspace.objects.get(name="stay")
    actor, reason, target = _admin(), "spread", second
    held = _graphs_on(server_url(first), "stay")
    assert held  # the graph and the model cache; no baseline before a repair
    if case == "repair under way":
        Incident.objects.create(workspace=ws, source_id=POISONED_PAGE, status=Incident.Status.REPAIRING,
                                run_number=ws.run_number, reason="poisoned", flagged_by=lead,
                                flagged_via=Incident.Via.CLI)
    elif case == "not a superuser":
        actor = lead
    elif case == "no reason":
        reason = "  "
    else:
        target = "10.9.9.9:6379"
    with pytest.raises((MoveRefused, ValueError)):
        move_workspace(workspace=ws, to_server=target, actor=actor, reason=reason, via="cli")
    assert Workspace.objects.get(name="stay").falkordb_server == first
    assert _graphs_on(server_url(second), "stay") == []
    assert _graphs_on(server_url(first), "stay") == held
    assert not AuditEvent.objects.filter(action__startswith="workspace.").exists()


def test_a_workspace_placed_on_a_server_no_longer_configured_is_a_clear_error(two_falkordb_servers, settings):
    first, _ = two_falkordb_servers
    Workspace.objects.create(name="orphan", falkordb_server="10.9.9.9:6379")
    from provenance.graph.graph import UnknownServer, workspace_graph

    with pytest.raises(UnknownServer, match="10.9.9.9:6379.*not configured"):
        workspace_graph("orphan")
    assert not isinstance(UnknownServer("x"), GraphUnavailable)


def test_the_admin_shows_each_workspace_s_server(two_falkordb_servers, client):
    first, second = two_falkordb_servers
    Workspace.objects.create(name="shown-a")
    Workspace.objects.create(name="shown-b")
    client.force_login(_admin())
    page = client.get("/admin/provenance/workspace/").content.decode()
    assert first in page and second in page
    ws = Workspace.objects.get(name="shown-b")
    assert second in client.get(f"/admin/provenance/workspace/{ws.pk}/change/").content.decode()
    assert "secret" not in page and "redis://" not in page  # keys only, never URLs with passwords


def test_the_move_command_refuses_in_one_line_and_lists_the_servers(two_falkordb_servers, capsys):
    first, second = two_falkordb_servers
    desk_run(workspace="cli-move")
    _admin()
    with pytest.raises(SystemExit) as exited:
        call_command("move_workspace", "cli-move", "--to", "10.9.9.9:6379", "--user", "ops", "--reason", "spread")
    err = capsys.readouterr().err
    assert exited.value.code == 2 and err.count("\n") == 1 and "10.9.9.9:6379" in err and "not configured" in err
    assert "redis://" not in err  # the configured URLs carry passwords
    assert Workspace.objects.get(name="cli-move").falkordb_server == first
    call_command("move_workspace", "--servers")
    out = capsys.readouterr().out
    assert f"{first}: 1 workspaces" in out and f"{second}: 0 workspaces" in out
