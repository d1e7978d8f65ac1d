"""Splitting one repair walk into parts that workers can walk at the same time, and joining them again.

The walk is sequential because a re-run's writes change what later readers see. Two actions can only
affect each other through a handoff or through a fact key that one of them writes and the other reads,
so the radius falls apart into components: union-find over handoffs and over every key that some radius
action (other than the poisoning one, which every part masks alike) writes. Components are packed into
parts of similar size; each part is walked with its own fact mirror and its own range of new ids.

The split is a prediction: a re-run may write a key its original never wrote, or wake a reader in
another part. So the parts are joined only if, after the fact, no part wrote a key another part read or
wrote, no walked action hangs off or hands off to an action another part walked, no action was walked
twice and no part ran out of ids; otherwise the caller walks the whole radius in one piece. Either way the result is the sequential
walk's, up to the numbering of new ids. repairs.parts walks the parts.
"""
from __future__ import annotations

from provenance.graph.rows import ActionKeys
from provenance.vocabulary import COUNT_KEYS
from repairs.steps import STEP_ORDER, plan_steps

ID_HEADROOM = 4  # new ids a part may use per action it walks (plus a fixed 1,000)


def partition(rows: list[ActionKeys], radius: list[int], masked: list[int], parts: int) -> list[list[int]]:
    """The radius ids in at most `parts` groups with no handoff or written key between them; the group
    holding the poisoning actions (`masked`) and their handoffs comes first. `rows`: the keys and
    parents of the radius and masked actions (queries.ACTION_KEYS)."""
    ids = list(dict.fromkeys(list(masked) + list(radius)))
    parent = {i: i for i in ids}

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(a, b):
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[rb] = ra

    masked_set = set(masked)
    coupling = {k for r in rows if r.id not in masked_set for k in r.written}
    for r in rows:
        if r.parent is not None and r.parent in parent:
            union(r.id, r.parent)
        for key in set(r.read_keys or []) | set(r.written):
            if key in coupling:
                parent.setdefault(("key", key), ("key", key))
                union(r.id, ("key", key))
    for a in masked[1:]:
        union(masked[0], a)
    components: dict = {}
    for i in ids:
        components.setdefault(find(i), []).append(i)
    first = find(masked[0]) if masked else None
    groups: list[list[int]] = [components.pop(first)] if first is not None else []
    bins = groups + [[] for _ in range(max(1, parts - len(groups)))]
    for comp in sorted(components.values(), key=len, reverse=True):
        min(bins, key=len).extend(comp)
    return [sorted(b) for b in bins if b]


def id_bases(sizes: list[int], start: tuple[int, int, int]) -> list[tuple[int, int, int]]:
    """First (action, fact, effect) id of each part: disjoint ranges above everything in the graph."""
    bases, offset = [], 0
    for size in sizes:
        bases.append(tuple(s + offset for s in start))
        offset += 1_000 + ID_HEADROOM * size
    return bases


def conflict(plans: list[dict], bases: list[tuple[int, int, int]]) -> str | None:
    """Why the parts' plans cannot be joined, or None when no part could have changed another's walk."""
    walked: dict[int, int] = {}
    for i, plan in enumerate(plans):
        for o in plan["outcomes"]:
            if walked.setdefault(o["action_id"], i) != i:
                return f"action {o['action_id']} was walked by parts {walked[o['action_id']]} and {i}"
        if i + 1 < len(bases) and any(n > b for n, b in zip(plan["next_ids"], bases[i + 1])):
            return f"part {i} used more new ids than its range holds"
    for i, a in enumerate(plans):
        for j, b in enumerate(plans):
            if i != j:
                shared = set(a["writes"]) & (set(b["reads"]) | set(b["writes"]))
                if shared:
                    return f"part {i} changed {sorted(shared)[0]!r}, which part {j} uses"
        crossing = next((d for d in a["depends_on"] if walked.get(d, i) != i), None)
        if crossing is not None:
            return f"part {i} depends on action {crossing}, which part {walked[crossing]} walked"
    return None


def join(plans: list[dict], blast_radius: int) -> dict:
    """One plan from the parts' plans, in the shape engine.Plan.to_json() gives."""
    rows: dict[str, list] = {k: [] for k in STEP_ORDER}
    for plan in plans:
        for kind, chunk in plan["steps"]:
            rows[kind].extend(chunk)
    steps = plan_steps(rows)
    counts = {k: sum(p["counts"].get(k, 0) for p in plans) for k in COUNT_KEYS}
    upstream: dict = {}
    for plan in plans:
        upstream.update(plan["upstream"])
    return {"steps": steps, "outcomes": sorted((o for p in plans for o in p["outcomes"]), key=lambda o: o["seq"]),
            "effects": [e for p in plans for e in p["effects"]], "blast_radius": blast_radius, "counts": counts,
            "upstream": upstream, "reads": sorted({k for p in plans for k in p["reads"]}),
            "writes": sorted({k for p in plans for k in p["writes"]}), "depends_on": [], "masked": [],
            "next_ids": [max(p["next_ids"][i] for p in plans) for i in range(3)],
            "not_rerun": sorted(a for p in plans for a in p.get("not_rerun", ()))}
