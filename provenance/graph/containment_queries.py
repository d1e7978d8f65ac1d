"""Cypher for containment (provenance.recording.containment): marking, reading and lifting the fact versions a flag
holds out of live reads. Parameterised like every statement in provenance.graph.queries (which is full); the
recorder's own statements there carry the marks along (`contained` on Fact and Action nodes).

A mark is a list of incident ids on a Fact node (`f.contained`): several open incidents may contain
the same version, and lifting one leaves the others'. An unmarked node has no such property at all, so
lifting the last mark leaves the node exactly as it was before the flag.
"""
from provenance.graph import rows
from provenance.graph.queries import Query

# The live fact versions the listed actions wrote (the flagged source's radius over facts), marked
# contained by $incident unless they are already. Returns what it marked.
CONTAIN_WRITTEN_BY = Query("""
UNWIND $ids AS id
MATCH (a:Action {id: id})-[:WROTE]->(f:Fact)
WHERE f.active AND NOT $incident IN coalesce(f.contained, [])
SET f.contained = coalesce(f.contained, []) + [$incident]
RETURN f.id, f.key, f.version
""", rows.ContainedFact)
# The live fact versions the listed actions wrote, unmarked: what a flag would contain (the what-if).
CONTAINABLE = Query("""
UNWIND $ids AS id
MATCH (a:Action {id: id})-[:WROTE]->(f:Fact)
WHERE f.active
RETURN f.id, f.key, f.version
""", rows.ContainedFact)
# Which of these fact versions are contained now, and by which incidents (a recording that read them
# before the flag: its commit and its effect calls ask).
CONTAINED_OF = Query("""
MATCH (f:Fact) WHERE f.id IN $ids AND f.contained IS NOT NULL
RETURN f.id, f.contained
""", rows.FactMarks)
# Take $incident's mark off every version it contained; the last mark taken removes the property.
LIFT = Query("""
MATCH (f:Fact) WHERE $incident IN f.contained
WITH f, [x IN f.contained WHERE x <> $incident] AS rest
SET f.contained = CASE WHEN size(rest) = 0 THEN NULL ELSE rest END
RETURN count(f)
""", rows.Count)
# Every incident that marks some version of this graph (a sweep for marks whose flag never committed).
MARKING_INCIDENTS = Query("""
MATCH (f:Fact) WHERE f.contained IS NOT NULL
UNWIND f.contained AS incident
RETURN DISTINCT incident
""", rows.Count)
# How many fact versions $incident holds contained right now.
CONTAINED_COUNT = Query("MATCH (f:Fact) WHERE $incident IN f.contained RETURN count(f)", rows.Count)
# The live actions that read through $incident's containment (or were handed off from one that did):
# its repair's catch-up re-runs them against the repaired facts.
READ_THROUGH = Query("""
MATCH (a:Action) WHERE $incident IN a.contained AND NOT a.status IN $dead
RETURN a.id
""", rows.ActionId)
# Held effects, as the repair left them: still live (the clean run made them too) or not.
EFFECTS_LIVE = Query("""
MATCH (e:Effect) WHERE e.id IN $ids
RETURN e.id, e.live
""", rows.EffectLive)
# A held effect that is performed after all: it is an ordinary live effect from then on.
RELEASE_EFFECTS = "MATCH (e:Effect) WHERE e.id IN $ids SET e.held = false, e.incident = NULL"
