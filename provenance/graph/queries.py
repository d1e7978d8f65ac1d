"""Cypher for the provenance graph. Every query is parameterised; nothing is formatted into a query.

Node labels: Source, Action, Fact, Effect, Response (model cache). Relationship types: INGESTED,
READ, WROTE, FEEDS, HANDED_OFF, CAUSED. A query that returns rows names their type (provenance.graph.rows);
the graph wrapper builds them, so no caller unpacks a row by position.
"""
from provenance.graph import rows


class Query(str):
    """A Cypher statement that knows the row type of its results."""

    row: type | None

    def __new__(cls, text: str, row: type | None = None) -> "Query":
        query = super().__new__(cls, text)
        query.row = row
        return query


SCHEMA = [f"CREATE INDEX FOR ({label}) ON ({prop})" for label, prop in (
    ("a:Action", "a.id"), ("a:Action", "a.seq"), ("f:Fact", "f.id"), ("f:Fact", "f.key"), ("s:Source", "s.id"),
    ("e:Effect", "e.id"), ("r:Response", "r.key"), ("a:Action", "a.ticket"))]  # ticket: the radius check reads by it

# --- recorder writes (batched with UNWIND; a flush sends them as one query: provenance.graph.flush_query) ---
CREATE_ACTIONS = """
UNWIND $rows AS r
CREATE (:Action {id: r.id, agent: r.agent, seq: toFloat(r.seq), ticket: r.ticket, payload: r.payload,
                 decision: r.decision, dhash: r.dhash, status: r.status, root: r.root, parent: r.parent,
                 read_keys: r.read_keys, recorded_at: r.recorded_at, incident: r.incident,
                 snap: r.snap, rstart: r.rstart, contained: r.contained})
"""
CREATE_FACTS = """
UNWIND $rows AS r
MATCH (a:Action {id: r.writer})
CREATE (a)-[:WROTE]->(:Fact {id: r.id, key: r.key, value: r.value, version: r.version, seq: toFloat(r.seq),
                             active: true, valid_from: r.valid_from, valid_until: r.valid_until,
                             known_at: r.known_at, system_at: r.system_at, contained: r.contained})
"""
CREATE_READS = """
UNWIND $rows AS r
MATCH (a:Action {id: r.reader}), (f:Fact {id: r.fact})
MERGE (a)-[:READ]->(f)
"""
# FEEDS is the writer→reader edge that the blast radius follows; written with the read that caused it.
CREATE_FEEDS = """
UNWIND $rows AS r
MATCH (w:Action {id: r.writer}), (a:Action {id: r.reader})
MERGE (w)-[:FEEDS]->(a)
"""
CREATE_HANDOFFS = """
UNWIND $rows AS r
MATCH (p:Action {id: r.parent}), (c:Action {id: r.child})
MERGE (p)-[:HANDED_OFF]->(c)
"""
CREATE_INGESTS = """
UNWIND $rows AS r
MATCH (a:Action {id: r.action})
MERGE (s:Source {id: r.source})
MERGE (a)-[:INGESTED]->(s)
"""
CREATE_EFFECTS = """
UNWIND $rows AS r
MATCH (a:Action {id: r.action})
CREATE (a)-[:CAUSED]->(:Effect {id: r.id, kind: r.kind, ticket: r.ticket, amount: r.amount,
                                currency: r.currency, details: r.details, live: true, held: r.held,
                                recorded_at: r.recorded_at, incident: r.incident})
"""

# --- loading state into the recorder's mirror ---
# All fact versions with their writer: the recorder resolves reads against this mirror.
LOAD_FACTS = Query("""
MATCH (w:Action)-[:WROTE]->(f:Fact)
RETURN f.id, f.key, f.value, f.version, f.seq, f.active, w.id, f.valid_from, f.valid_until, f.known_at,
       f.system_at, f.invalidated_at, f.invalidated_by, f.contained
""", rows.StoredFact)
# Of each of several fact keys (its versions below $below; all of them when null): the highest version
# number and the active versions at the seq of the newest active one, a row without a fact when none is
# active. What decides a read above them and the next version, without the key's whole history.
LOAD_FACT_HEADS = Query("""
MATCH (f:Fact) WHERE f.key IN $keys AND ($below IS NULL OR f.seq < $below)
WITH f.key AS key, max(f.version) AS top, max(CASE WHEN f.active THEN f.seq END) AS head
OPTIONAL MATCH (w:Action)-[:WROTE]->(f:Fact {key: key}) WHERE f.active AND f.seq = head
RETURN top, f.id, key, f.value, f.version, f.seq, f.active, w.id, f.valid_from, f.valid_until, f.known_at,
       f.system_at, f.invalidated_at, f.invalidated_by, f.contained
""", rows.FactHead)
# Every version of several fact keys (the columns of LOAD_FACTS; the IN list is answered from the key
# index): a read that the versions above can't decide.
LOAD_FACTS_OF_KEYS = Query("""
MATCH (w:Action)-[:WROTE]->(f:Fact)
WHERE f.key IN $keys
RETURN f.id, f.key, f.value, f.version, f.seq, f.active, w.id, f.valid_from, f.valid_until, f.known_at,
       f.system_at, f.invalidated_at, f.invalidated_by, f.contained
""", rows.StoredFact)
# The highest ids in use, counting those a repair applying its plan has set aside (:Reserved).
MAX_IDS = Query("""
OPTIONAL MATCH (a:Action) WITH max(a.id) AS a
OPTIONAL MATCH (f:Fact) WITH a, max(f.id) AS f
OPTIONAL MATCH (e:Effect) WITH a, f, max(e.id) AS e
OPTIONAL MATCH (r:Reserved)
RETURN CASE WHEN r IS NULL OR coalesce(a, 0) >= r.action THEN a ELSE r.action END,
       CASE WHEN r IS NULL OR coalesce(f, 0) >= r.fact THEN f ELSE r.fact END,
       CASE WHEN r IS NULL OR coalesce(e, 0) >= r.effect THEN e ELSE r.effect END
""", rows.MaxIds)
# While a repair applies ids it numbered beside the recording desk: a worker killed half-way leaves
# them set aside, so recordings committed before it resumes never take one.
RESERVE_IDS = "MERGE (r:Reserved) SET r.action = $action, r.fact = $fact, r.effect = $effect"
RELEASE_IDS = "MATCH (r:Reserved) DELETE r"
RESERVED = "MATCH (r:Reserved) RETURN count(r)"
ACTION_COUNT = Query("MATCH (a:Action) RETURN count(a)", rows.Count)
# What a failed recording flushed: every node above the ids it started from (DETACH takes the edges
# along), then the Source nodes only its INGESTED edges held (sources exist in the graph only that way).
DISCARD_ABOVE = """
MATCH (n) WHERE (n:Action AND n.id > $action) OR (n:Fact AND n.id > $fact) OR (n:Effect AND n.id > $effect)
DETACH DELETE n
"""
DISCARD_ORPHAN_SOURCES = "MATCH (s:Source) WHERE NOT (s)--() DELETE s"
# The tickets whose actions read (or tried to read) a key: desk_run's "tickets_read_vip_rules".
TICKETS_READING = Query("MATCH (a:Action) WHERE $key IN a.read_keys RETURN collect(DISTINCT a.ticket)", rows.Tickets)
ALL_EFFECTS = Query("MATCH (:Action)-[:CAUSED]->(e:Effect) RETURN e.kind, e.ticket, e.amount", rows.EffectKindAmount)

# --- blast radius ---
# The actions that read the source directly.
INGESTERS = Query("""
MATCH (s:Source {id: $source})<-[:INGESTED]-(a:Action)
RETURN a.id
""", rows.ActionId)
# Those of them that work a ticket: a repair re-runs them with the source masked instead of masking them.
TICKET_INGESTERS = Query("""
MATCH (s:Source {id: $source})<-[:INGESTED]-(a:Action) WHERE a.ticket IS NOT NULL AND a.ticket <> ''
RETURN a.id
""", rows.ActionId)
# The blast radius inside FalkorDB: algo.BFS from each action that ingested the source, over every
# relationship type (algo.BFS takes one type or NULL, never a list). Every Action out-edge other than
# FEEDS and HANDED_OFF ends at a leaf (Fact, Effect, Source), so the actions it reaches are exactly the
# FEEDS|HANDED_OFF closure, each visited once; the Effects it reaches are theirs. Dead actions
# (poisoned or superseded by an earlier repair) only lead to dead actions and are filtered out.
# One packed string per ingesting action (the caller removes duplicates). The product answers from
# provenance.graph.mirror; this query is its oracle in tests and its comparison in the bench.
RADIUS_ACTIONS = Query("""
MATCH (:Source {id: $source})<-[:INGESTED]-(a:Action)
CALL algo.BFS(a, -1, NULL) YIELD nodes
RETURN string.join([n IN [a] + nodes WHERE n:Action AND NOT n.status IN $dead
                    | toString(n.id) + ':' + toString(n.seq)], ',')
""", rows.Packed)
# The flag preview's radius inside FalkorDB, for a process whose topology mirror is not read yet: the
# live actions (id:seq:agent:has-ticket, tickets as a list in the same order) and the live effects
# (effect id:kind:cents) of every reached action, dead ones included, as the mirror counts them.
RADIUS_PREVIEW = Query("""
MATCH (:Source {id: $source})<-[:INGESTED]-(a:Action)
CALL algo.BFS(a, -1, NULL) YIELD nodes
WITH [n IN [a] + nodes WHERE n:Action AND NOT n.status IN $dead] AS acts, [n IN nodes WHERE n:Effect AND n.live] AS effs
RETURN string.join([n IN acts | toString(n.id) + ':' + toString(n.seq) + ':' + n.agent + ':' +
                    CASE WHEN n.ticket IS NULL THEN '0' ELSE '1' END], ','),
       [n IN acts | coalesce(n.ticket, '')],
       string.join([e IN effs | toString(e.id) + ':' + e.kind + ':' + toString(coalesce(e.amount, 0))], ',')
""", rows.RadiusPreview)
# The topology mirror (provenance.graph.mirror): every action above an id, the FEEDS|HANDED_OFF edges into
# them, their effects and ingests. Numbers and names only in the packed strings (agent names and effect
# kinds match agents.NAME_PATTERN, so they hold no separator); tickets are free text and come back as a
# list collected over the same rows, in the same order ('' standing in for none, told apart by a flag).
MIRROR_ACTIONS = Query("""
MATCH (a:Action) WHERE a.id > $after
RETURN string.join(collect(toString(a.id) + ':' + toString(a.seq) + ':' + a.agent + ':' +
                           CASE WHEN a.status IN $dead THEN '0' ELSE '1' END + ':' +
                           CASE WHEN a.ticket IS NULL THEN '0' ELSE '1' END), ','),
       collect(coalesce(a.ticket, ''))
""", rows.PackedActions)
MIRROR_EDGES = Query("""
MATCH (a:Action)-[:FEEDS|HANDED_OFF]->(b:Action) WHERE b.id > $after
RETURN string.join(collect(toString(a.id) + ':' + toString(b.id)), ',')
""", rows.Packed)
MIRROR_EFFECTS = Query("""
MATCH (a:Action)-[:CAUSED]->(e:Effect) WHERE a.id > $after
RETURN string.join(collect(toString(a.id) + ':' + e.kind + ':' + toString(coalesce(e.amount, 0)) + ':' +
                           CASE WHEN e.live THEN '1' ELSE '0' END), ',')
""", rows.Packed)
MIRROR_INGESTS = Query("""
MATCH (a:Action)-[:INGESTED]->(s:Source) WHERE a.id > $after
RETURN a.id, s.id
""", rows.Ingest)
# One BFS level: the FEEDS|HANDED_OFF successors of a frontier. The caller keeps the visited set, so
# each action is expanded once; a variable-length pattern would enumerate every path instead and
# doubles per layer of diamonds (FALKORDB-NOTES.md).
SUCCESSORS = Query("""
UNWIND $ids AS id
MATCH (:Action {id: id})-[:FEEDS|HANDED_OFF]->(b:Action)
RETURN DISTINCT b.id
""", rows.ActionId)
ACTION_SUMMARIES = Query("""
UNWIND $ids AS id
MATCH (a:Action {id: id})
RETURN a.id, a.agent, a.seq, a.ticket, a.status
""", rows.ActionSummary)
# What the repair walk reads of a whole set of actions (its blast radius) at once, the set given
# as $slot, a list indexed by id - $lo (provenance.graph.graph.id_set). UNWIND with one index lookup per id costs ~20 µs an id and
# `a.id IN $ids` compares against the whole list on every row; a range scan with an O(1) list lookup
# answers 1,500 ids in ~1 ms instead of ~30 ms. The bounds also keep a.id - $lo from going negative
# (a negative list index counts from the end).
IN_SET = "a.id >= $lo AND a.id <= $hi AND $slot[a.id - $lo] > 0"


# The six parts of it (repairs.loading) in one round trip, each packed into one string: the client
# parses a result value by value in Python, which cost three times the query on 1,500 actions' details.
# Fields are joined by $fs, rows by $rs and list items by $ls (control characters: no identifier and no
# JSON text holds one raw); seqs come as numbers beside the packed actions, in the same order.
WALK_LOAD = Query(f"""
MATCH (a:Action) WHERE {IN_SET}
RETURN 'actions' AS part, string.join(collect(string.join([toString(a.id), a.agent, coalesce(a.ticket, ''),
       coalesce(a.payload, 'null'), coalesce(a.decision, 'null'), coalesce(a.dhash, ''), a.status,
       coalesce(toString(a.parent), ''), string.join(coalesce(a.read_keys, []), $ls)], $fs)), $rs) AS text,
       collect(a.seq) AS seqs
UNION ALL
MATCH (a:Action)-[:HANDED_OFF]->(c:Action) WHERE {IN_SET}
RETURN 'children' AS part, string.join(collect(toString(a.id) + $fs + toString(c.id)), $rs) AS text, [] AS seqs
UNION ALL
MATCH (a:Action)-[:WROTE]->(f:Fact) WHERE {IN_SET}
RETURN 'writes' AS part, string.join(collect(string.join([toString(a.id), toString(f.id), f.key, f.value], $fs)),
       $rs) AS text, [] AS seqs
UNION ALL
MATCH (a:Action)-[:CAUSED]->(e:Effect) WHERE {IN_SET}
RETURN 'effects' AS part, string.join(collect(string.join([toString(a.id), toString(e.id), e.kind,
       coalesce(e.ticket, ''), coalesce(toString(e.amount), ''), coalesce(e.currency, ''), coalesce(e.details, ''),
       coalesce(toString(e.live), ''), coalesce(toString(e.held), '')], $fs)), $rs) AS text, [] AS seqs
UNION ALL
MATCH (a:Action)-[:READ]->(f:Fact) WHERE {IN_SET}
RETURN 'reads' AS part, string.join(collect(toString(a.id) + $fs + toString(f.id)), $rs) AS text, [] AS seqs
UNION ALL
MATCH (p:Action)-[r:FEEDS|HANDED_OFF]->(a:Action) WHERE {IN_SET}
RETURN 'preds' AS part, string.join(collect(toString(a.id) + $fs + toString(p.id) + $fs + type(r)), $rs) AS text,
       [] AS seqs
""", rows.PackedPart)
# The facts those reads resolved to, for a walk whose session does not hold every fact version (the
# walk looks them up in its session's mirror: the second hop tripled the reads' part).
WALK_READ_FACTS = Query(f"""
MATCH (a:Action)-[:READ]->(f:Fact)<-[:WROTE]-(w:Action) WHERE {IN_SET}
RETURN 'facts' AS part, string.join(collect(string.join([toString(f.id), f.key, toString(f.version), toString(w.id)],
       $fs)), $rs) AS text, [] AS seqs
""", rows.PackedPart)
# For splitting a repair (repairs.parallel): each action's handoff parent, the keys it read and wrote.
ACTION_KEYS = Query("""
UNWIND $ids AS id
MATCH (a:Action {id: id})
OPTIONAL MATCH (a)-[:WROTE]->(f:Fact)
RETURN a.id, a.parent, a.read_keys, collect(f.key)
""", rows.ActionKeys)
ACTION_EFFECTS = Query("""
UNWIND $ids AS id
MATCH (a:Action {id: id})-[:CAUSED]->(e:Effect)
RETURN a.id, e.id, e.kind, e.ticket, e.amount, e.currency, e.details, e.live, e.held
""", rows.ActionEffect)
ACTION_INGESTS = Query("""
UNWIND $ids AS id
MATCH (a:Action {id: id})-[:INGESTED]->(s:Source)
RETURN a.id, s.id
""", rows.Ingest)
EFFECTS_OF_ACTIONS = Query("""
UNWIND $ids AS id
MATCH (a:Action {id: id})-[:CAUSED]->(e:Effect)
RETURN e.id, e.kind, e.ticket, e.amount, e.live
""", rows.EffectOfAction)
ROOT_ACTIONS = Query("""
MATCH (a:Action) WHERE a.root = true
RETURN a.id, a.agent, a.seq, a.payload, a.snap
ORDER BY a.seq
""", rows.RootAction)
# The actions recorded beside others, with the seqs their reads did not see ([snap, rstart)).
HIDDEN_SEQS = Query("""
MATCH (a:Action) WHERE a.snap IS NOT NULL
RETURN a.id, a.snap, a.rstart
""", rows.HiddenSeqs)
# The live actions recorded at or after a seq (what a repair catches up with after its walk's snapshot).
ACTIONS_SINCE = Query("""
MATCH (a:Action) WHERE a.seq >= $since AND NOT a.status IN $dead
RETURN a.id, a.seq ORDER BY a.seq
""", rows.RadiusAction)
# Which of these fact versions a repair has retired since they were read.
RETIRED_FACTS = Query("""
MATCH (f:Fact) WHERE f.id IN $ids AND f.active = false
RETURN f.id
""", rows.FactId)
# Seqs of actions that earlier repairs slotted between recorded ones (recorded seqs are integers).
FRACTIONAL_SEQS = Query("""
MATCH (a:Action) WHERE a.seq <> toFloat(toInteger(a.seq))
RETURN a.seq
""", rows.Seq)
# Actions with a higher seq that read (or tried to read) one of the keys: a repair that writes a key
# it did not write before changes what these resolve to.
READERS_OF_KEYS = Query("""
MATCH (a:Action) WHERE a.seq > $seq AND a.seq < $below AND any(k IN a.read_keys WHERE k IN $keys)
RETURN a.id
""", rows.ActionId)

# --- export_state / verification ---
ACTIVE_FACTS = Query("""
MATCH (w:Action)-[:WROTE]->(f:Fact) WHERE f.active = true AND f.seq < $below
RETURN f.key, f.value, f.seq, f.version
""", rows.ActiveFact)
LIVE_DECISIONS = Query("""
MATCH (a:Action) WHERE a.ticket IS NOT NULL AND NOT a.status IN ['poisoned', 'superseded'] AND a.seq < $below
RETURN a.ticket, a.seq, a.decision
""", rows.LiveDecision)
LIVE_EFFECTS = Query("""
MATCH (a:Action)-[:CAUSED]->(e:Effect) WHERE e.live = true AND a.seq < $below
RETURN e.id, e.kind, e.ticket, e.amount, e.held, a.id, e.currency, e.details
""", rows.LiveEffect)

# --- explain / facts history ---
FACT_HISTORY = Query("""
MATCH (w:Action)-[:WROTE]->(f:Fact {key: $key})
RETURN f.id, f.value, f.version, f.seq, f.active, f.valid_from, f.valid_until, f.known_at, f.system_at,
       f.invalidated_at, f.invalidated_by, w.id, w.agent
ORDER BY f.seq, f.version
""", rows.FactVersion)
ACTION_READS = Query("""
UNWIND $ids AS id
MATCH (a:Action {id: id})-[:READ]->(f:Fact)<-[:WROTE]-(w:Action)
RETURN a.id, f.key, f.version, w.id
""", rows.ActionRead)
# The fact versions actions read or wrote, with writer and invalidating incident (the PROV export's facts).
ACTION_FACTS = Query("""
UNWIND $ids AS id
MATCH (a:Action {id: id})-[r:READ|WROTE]->(f:Fact)<-[:WROTE]-(w:Action)
RETURN a.id, type(r), f.id, f.key, f.version, f.value, f.active, w.id, f.invalidated_by
""", rows.ActionFact)
# One BFS level of explain_path: the FEEDS|HANDED_OFF successors of a frontier, with the edge that leads
# there, so the shortest path from the source's ingesters to an action can be rebuilt step by step.
SUCCESSOR_EDGES = Query("""
UNWIND $ids AS id
MATCH (:Action {id: id})-[r:FEEDS|HANDED_OFF]->(b:Action)
RETURN id, b.id, type(r)
""", rows.Edge)
PREDECESSORS = Query("""
UNWIND $ids AS id
MATCH (p:Action)-[r:FEEDS|HANDED_OFF]->(:Action {id: id})
RETURN id, p.id, type(r)
""", rows.Edge)

# --- model response cache ---
CACHE_GET = Query("MATCH (r:Response {key: $key}) RETURN r.value LIMIT 1", rows.CachedValue)
CACHE_GET_MANY = Query("UNWIND $keys AS k MATCH (r:Response {key: k}) RETURN r.key, r.value", rows.CachedResponse)
CACHE_PUT_MANY = """
UNWIND $rows AS row
MERGE (r:Response {key: row.key})
ON CREATE SET r.value = row.value, r.model = row.model, r.task = row.task, r.created_at = row.at
"""

# --- incident explain / picture (admin) ---
# An effect, the action that caused it and whether it is still live (or held for approval).
EFFECT_CAUSER = Query("""
MATCH (a:Action)-[:CAUSED]->(e:Effect {id: $id})
RETURN a.id, e.kind, e.ticket, e.amount, e.currency, e.live, e.held
""", rows.EffectCauser)
# The values of named fact versions: what a step of an explain path read.
FACT_VERSIONS = Query("""
UNWIND $rows AS r
MATCH (f:Fact {key: r.key, version: r.version})
RETURN f.key, f.version, f.value, f.active
""", rows.FactValue)
# Effects of a set of actions counted by kind and state (live / held / invalidated), for the grouped picture.
EFFECT_STATES = Query("""
UNWIND $ids AS id
MATCH (:Action {id: id})-[:CAUSED]->(e:Effect)
RETURN e.kind, e.live, e.held, count(e), sum(e.amount)
""", rows.EffectStateCount)

# --- trust, suspicion and time travel ---
# Every fact version with its writer, the sources the writer ingested and the facts it read: the lineage
# that trust follows (provenance.access.trust), and the earlier versions a source's facts may contradict.
FACT_LINEAGE = Query("""
MATCH (w:Action)-[:WROTE]->(f:Fact)
OPTIONAL MATCH (w)-[:INGESTED]->(s:Source)
WITH w, f, collect(DISTINCT s.id) AS sources
OPTIONAL MATCH (w)-[:READ]->(r:Fact)
RETURN f.id, f.key, f.value, f.version, f.seq, f.active, w.id, w.status, sources, collect(DISTINCT r.id)
""", rows.FactLineage)
# When each source first appeared: its first live ingesting action by seq and when that one ran, and how
# many live actions ingested it.
SOURCE_FIRST_SEEN = Query("""
MATCH (a:Action)-[:INGESTED]->(s:Source) WHERE NOT a.status IN $dead
WITH s, a ORDER BY a.seq
RETURN s.id, collect(a.id)[0], collect(a.seq)[0], collect(a.recorded_at)[0], count(a)
""", rows.SourceFirstSeen)
# One action as its time-travel page shows it, with the sources it ingested.
ACTION_RECORD = Query("""
MATCH (a:Action {id: $id})
OPTIONAL MATCH (a)-[:INGESTED]->(s:Source)
RETURN a.id, a.agent, a.seq, a.ticket, a.status, a.recorded_at, a.incident, a.decision, a.prev_decision,
       a.read_keys, a.parent, collect(s.id)
""", rows.ActionRecord)
# The fact versions an action's READ edges point at now (a re-run's edges replace the original run's).
ACTION_READ_VERSIONS = Query("MATCH (:Action {id: $id})-[:READ]->(f:Fact) RETURN f.key, f.version", rows.FactRef)
# When an action ran (Action.recorded_at): the moment an API `as_of_action` stands for.
ACTION_RAN_AT = Query("MATCH (a:Action {id: $id}) RETURN a.recorded_at", rows.RanAt)

# --- moving a workspace between servers ---
# How many nodes a graph holds: a moved copy must hold as many as the original.
GRAPH_NODE_COUNT = Query("MATCH (n) RETURN count(n)", rows.Count)
# How many edges it holds.
GRAPH_EDGE_COUNT = Query("MATCH ()-[r]->() RETURN count(r)", rows.Count)
