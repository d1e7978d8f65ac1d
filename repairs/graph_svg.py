"""The blast-radius picture as server-rendered SVG: no JavaScript library, nothing fetched at run time.

layout_page() places one page of the radius (repairs.radius_picture.graph_page): the flagged source on the
left, then the actions in columns by handoff/read depth, one horizontal lane per ticket, each action's
effects in the last column of its lane. layout_overview() draws the whole radius grouped by (agent,
status) for radii too big to read action by action. Both return plain data that the template
`admin/repairs/incident/graph.svg` turns into SVG; every label goes through Django's autoescaping there,
so text from tickets, pages or models can't become markup.
"""
from __future__ import annotations

from django.template.loader import render_to_string

from core.money import format_money
from repairs.selectors import STATUS_LABELS, describe

# (stroke, fill, dash) per repair status; superseded is dashed because its work no longer stands.
STATUS_STYLE = {
    "source": ("#7b241c", "#f5b7b1", ""),
    "poisoned": ("#c0392b", "#fadbd8", ""),
    "rerun_changed": ("#ba4a00", "#fdebd0", ""),
    "rerun_same": ("#1f618d", "#d6eaf8", ""),
    "skipped": ("#717d7e", "#f2f3f4", ""),
    "superseded": ("#6c3483", "#ebdef0", "5 3"),
    "new": ("#1e8449", "#d5f5e3", ""),
}
EFFECT_STYLE = {
    "live": ("#1e8449", "#ffffff", "", "live"),
    "held": ("#9a7d0a", "#fef9e7", "2 2", "held for approval"),
    "invalidated": ("#c0392b", "#ffffff", "6 3", "invalidated"),
}
SHORT_LABELS = {"poisoned": "poisoned", "rerun_changed": "re-run, changed", "rerun_same": "re-run, same",
                "skipped": "skipped", "superseded": "superseded", "new": "new"}

LABEL_W, COL_W, NODE_W, NODE_H, ROW_H, EFFECT_W = 64, 190, 160, 36, 46, 170
TOP, LEGEND_H = 12, 56


def _money(cents: int | None, currency: str | None = None) -> str:
    # The grouped overview sums effects without their currency: a plain amount there, money where known.
    return format_money(int(cents or 0), currency or "")


def _legend() -> list[dict]:
    items, x = [], LABEL_W
    for status, label in STATUS_LABELS.items():
        stroke, fill, dash = STATUS_STYLE[status]
        items.append({"x": x, "y": TOP, "stroke": stroke, "fill": fill, "dash": dash, "label": label})
        x += 34 + 6 * len(label)
    x2 = LABEL_W
    for state, (stroke, fill, dash, label) in EFFECT_STYLE.items():
        items.append({"x": x2, "y": TOP + 22, "stroke": stroke, "fill": fill, "dash": dash,
                      "label": f"effect {label}"})
        x2 += 34 + 6 * len(f"effect {label}")
    return items


def _curve(x1: float, y1: float, x2: float, y2: float) -> str:
    mid = (x1 + x2) / 2
    return f"M{x1:.1f},{y1:.1f} C{mid:.1f},{y1:.1f} {mid:.1f},{y2:.1f} {x2:.1f},{y2:.1f}"


def layout_page(data: dict, *, explain_url: str = "") -> dict:
    """Positions for one page of the picture (see the module docstring)."""
    nodes = sorted(data["nodes"], key=lambda n: n["seq"])
    preds: dict[int, list[int]] = {}
    for pid, aid, _kind, _facts in data["edges"]:
        preds.setdefault(aid, []).append(pid)
    depth: dict[int, int] = {}
    for n in nodes:  # seq order is a topological order: reads and handoffs only go forward in seq
        depth[n["action_id"]] = 1 + max((depth.get(p, 0) for p in preds.get(n["action_id"], ())), default=0)
    effects_col = max(depth.values(), default=0) + 1
    lanes = [""] + [t for t in data["tickets"]]
    slots: dict[tuple[str, int], int] = {}  # (lane, column) -> next free row in that lane and column
    placed: dict[int, tuple[float, float]] = {}
    rows_in_lane: dict[str, int] = {lane: 1 for lane in lanes}
    lane_of: dict[int, str] = {}

    def take(lane: str, col: int) -> int:
        row = slots.get((lane, col), 0)
        slots[(lane, col)] = row + 1
        rows_in_lane[lane] = max(rows_in_lane[lane], row + 1)
        return row

    cells = []
    # Within a lane, the old chain first and the repair's new actions under it: a superseded refund and
    # the notifier it handed off to stay on one row, the new reply below them.
    for n in sorted(nodes, key=lambda n: (n["status"] == "new", n["seq"])):
        lane = n["ticket"] or ""
        lane_of[n["action_id"]] = lane
        cells.append(("action", n, lane, depth[n["action_id"]], take(lane, depth[n["action_id"]])))
    row_of = {c[1]["action_id"]: c[4] for c in cells}
    for e in sorted(data["effects"], key=lambda e: (row_of.get(e["action"], 0), e["action"], e["id"])):
        lane = lane_of.get(e["action"], e["ticket"] or "")
        cells.append(("effect", e, lane, effects_col, take(lane, effects_col)))
    take("", 0)  # the source sits in the first lane, column 0
    lane_top, y = {}, TOP + LEGEND_H
    for lane in lanes:
        lane_top[lane] = y
        y += rows_in_lane[lane] * ROW_H + 10
    height = y + 8
    width = LABEL_W + (effects_col + 1) * COL_W + 20

    def xy(lane: str, col: int, row: int) -> tuple[float, float]:
        return LABEL_W + col * COL_W, lane_top[lane] + row * ROW_H + 5

    boxes, effect_boxes, edges = [], [], []
    sx, sy = xy("", 0, 0)
    stroke, fill, dash = STATUS_STYLE["source"]
    boxes.append({"x": sx, "y": sy, "w": NODE_W, "h": NODE_H, "stroke": stroke, "fill": fill, "dash": dash,
                  "line1": data["source"], "line2": "flagged source", "title": f"source {data['source']}",
                  "href": "", "cls": "node source", "status": "source"})
    for kind, item, lane, col, row in cells:
        x, y0 = xy(lane, col, row)
        if kind == "action":
            stroke, fill, dash = STATUS_STYLE.get(item["status"], STATUS_STYLE["skipped"])
            label = STATUS_LABELS.get(item["status"], item["status"])
            short = SHORT_LABELS.get(item["status"], item["status"])
            placed[item["action_id"]] = (x, y0)
            boxes.append({
                "x": x, "y": y0, "w": NODE_W, "h": NODE_H, "stroke": stroke, "fill": fill, "dash": dash,
                "line1": f"{item['agent']} #{item['action_id']}",
                "line2": f"{item['ticket'] + ' · ' if item['ticket'] else ''}{short}",
                "title": f"{item['agent']} #{item['action_id']} ({label}): {describe(item['before'])} → "
                         f"{describe(item['after'])}",
                "href": f"{explain_url}?action={item['action_id']}" if explain_url else "",
                "cls": f"node {item['status']}", "status": item["status"],
            })
        else:
            stroke, fill, dash, label = EFFECT_STYLE[item["state"]]
            effect_boxes.append({
                "x": x, "y": y0 + 3, "w": EFFECT_W, "h": NODE_H - 6, "stroke": stroke, "fill": fill, "dash": dash,
                "line1": f"{item['kind']} {_money(item['amount'], item.get('currency'))}", "line2": label,
                "title": f"effect #{item['id']}: {item['kind']} {_money(item['amount'], item.get('currency'))} "
                         f"on {item['ticket']} ({label})",
                "href": f"{explain_url}?effect={item['id']}" if explain_url else "",
                "cls": f"effect {item['state']}", "status": item["state"], "action": item["action"],
            })
    for b in boxes[1:]:
        if b["status"] == "poisoned":
            edges.append({"d": _curve(sx + NODE_W, sy + NODE_H / 2, b["x"], b["y"] + NODE_H / 2),
                          "cls": "edge ingested", "stroke": "#7b241c", "dash": "", "title": "INGESTED"})
    for pid, aid, kind, facts in data["edges"]:
        if pid in placed and aid in placed:
            (x1, y1), (x2, y2) = placed[pid], placed[aid]
            read = ", ".join(f"{k} v{v}" for k, v in facts)
            edges.append({"d": _curve(x1 + NODE_W, y1 + NODE_H / 2, x2, y2 + NODE_H / 2),
                          "cls": f"edge {kind.lower()}", "stroke": "#566573" if kind == "HANDED_OFF" else "#a04000",
                          "dash": "" if kind == "HANDED_OFF" else "4 3",
                          "title": f"{kind} #{pid} → #{aid}" + (f" (read {read})" if read else "")})
    for b in effect_boxes:
        if b["action"] in placed:
            x1, y1 = placed[b["action"]]
            edges.append({"d": _curve(x1 + NODE_W, y1 + NODE_H / 2, b["x"], b["y"] + (NODE_H - 6) / 2),
                          "cls": "edge caused", "stroke": "#aab7b8", "dash": "", "title": "CAUSED"})
    lane_boxes = [{"y": lane_top[lane] - 2, "h": rows_in_lane[lane] * ROW_H + 6, "label": lane or "memory",
                   "shade": i % 2 == 0} for i, lane in enumerate(lanes)]
    return {"width": width, "height": height, "nodes": boxes + effect_boxes, "edges": edges, "lanes": lane_boxes,
            "legend": _legend(), "label_w": LABEL_W}


def layout_overview(data: dict) -> dict:
    """Positions for the grouped picture: one box per (agent, status) group, columns in agent order."""
    order = list(STATUS_LABELS)
    columns = {agent: i + 1 for i, agent in enumerate(data["agents"])}
    effects_col = len(columns) + 1
    by_col: dict[int, list] = {}
    for g in sorted(data["groups"], key=lambda g: (columns[g["agent"]], order.index(g["status"]) if g["status"] in order else 99)):
        by_col.setdefault(columns[g["agent"]], []).append(g)
    effects = list(data["effects"])
    rows = max([len(v) for v in by_col.values()] + [len(effects), 1])
    height = TOP + LEGEND_H + rows * ROW_H + 20
    width = LABEL_W + (effects_col + 1) * COL_W + 20
    y0 = TOP + LEGEND_H + 5
    pos: dict[tuple[str, str], tuple[float, float]] = {}
    boxes = []
    stroke, fill, dash = STATUS_STYLE["source"]
    boxes.append({"x": LABEL_W, "y": y0, "w": NODE_W, "h": NODE_H, "stroke": stroke, "fill": fill, "dash": dash,
                  "line1": data["source"], "line2": "flagged source", "title": data["source"], "href": "",
                  "cls": "node source", "status": "source"})
    for col, groups in by_col.items():
        for row, g in enumerate(groups):
            x, y = LABEL_W + col * COL_W, y0 + row * ROW_H
            pos[(g["agent"], g["status"])] = (x, y)
            stroke, fill, dash = STATUS_STYLE.get(g["status"], STATUS_STYLE["skipped"])
            label = STATUS_LABELS.get(g["status"], g["status"])
            boxes.append({"x": x, "y": y, "w": NODE_W, "h": NODE_H, "stroke": stroke, "fill": fill, "dash": dash,
                          "line1": f"{g['agent']} × {g['count']:,}", "line2": SHORT_LABELS.get(g["status"], label),
                          "title": f"{g['count']:,} {g['agent']} actions: {label}", "href": "",
                          "cls": f"node group {g['status']}", "status": g["status"]})
    for row, e in enumerate(effects):
        stroke, fill, dash, label = EFFECT_STYLE[e["state"]]
        boxes.append({"x": LABEL_W + effects_col * COL_W, "y": y0 + row * ROW_H + 3, "w": EFFECT_W, "h": NODE_H - 6,
                      "stroke": stroke, "fill": fill, "dash": dash,
                      "line1": f"{e['kind']} × {e['n']:,} ({_money(e['amount'])})", "line2": label,
                      "title": f"{e['n']:,} {e['kind']} effects, {label}", "href": "",
                      "cls": f"effect {e['state']}", "status": e["state"]})
    edges = []
    for (agent, status), (x, y) in pos.items():
        if status == "poisoned":
            edges.append({"d": _curve(LABEL_W + NODE_W, y0 + NODE_H / 2, x, y + NODE_H / 2), "cls": "edge ingested",
                          "stroke": "#7b241c", "dash": "", "title": "INGESTED"})
    for e in data["edges"]:
        a, b = pos.get(tuple(e["from"])), pos.get(tuple(e["to"]))
        if a and b:
            edges.append({"d": _curve(a[0] + NODE_W, a[1] + NODE_H / 2, b[0], b[1] + NODE_H / 2),
                          "cls": f"edge {e['kind'].lower()}", "stroke": "#566573" if e["kind"] == "HANDED_OFF" else "#a04000",
                          "dash": "" if e["kind"] == "HANDED_OFF" else "4 3",
                          "title": f"{e['count']:,} {e['kind']} edges", "label": f"{e['count']:,}",
                          "lx": b[0] - 9, "ly": b[1] + NODE_H / 2 - 4})
    return {"width": width, "height": height, "nodes": boxes, "edges": edges, "lanes": [], "legend": _legend(),
            "label_w": LABEL_W}


def render_svg(picture: dict, *, title: str) -> str:
    return render_to_string("admin/repairs/incident/graph.svg", {"p": picture, "title": title})
