"""A decision's tree as an SVG graph, from the same provenance ``suanli explain`` reads.

The steps follow ``processors/explain.render_mermaid``: the task, the decision (at its
cell-log input position), the matched rule, the strategy, the filter step (the excluded
nodes branch off it, reason by reason), the score step (the ranked candidates branch off
it, best first) and the outcome. The chosen candidate (the node a TaskPlaced or
TaskMigrated put the task on) is drawn highlighted, with the outcome beside it.

Layout: one spine column top-down; branches in a second column level with their step; the
outcome in a third column on the chosen candidate's row (or on the spine when there is no
chosen candidate: pending, unschedulable, released). Pure: payload in, SVG text out.
"""
from __future__ import annotations

from dataclasses import dataclass, field
import time
from html import escape
from typing import Any

SPINE_X, SPINE_W = 16, 340
BRANCH_X, BRANCH_W = 412, 340
OUT_X, OUT_W = 808, 340
BOX_H, GAP = 38, 16
BRANCH_H, BRANCH_GAP = 34, 8
LINE_H = 14                  # one more line of label text
CHAR_W = 6.9                 # average width of a 12 px bold sans-serif character
MAX_LINES = 3                # a longer label is cut (its whole text is in the box's tooltip)


@dataclass
class Box:
    x: float
    y: float
    w: float
    h: float
    label: str
    sub: str = ""
    kind: str = "step"           # step | task | rule | excluded | candidate | chosen | outcome | pending
    title: str = ""
    bar: float | None = None     # candidates: score relative to the best, 0..1
    lines: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.lines = _wrap(self.label, self.w)
        self.h += LINE_H * (len(self.lines) - 1)

    @property
    def cx(self) -> float:
        return self.x + self.w / 2

    @property
    def bottom(self) -> float:
        return self.y + self.h


@dataclass
class Tree:
    boxes: list[Box] = field(default_factory=list)
    edges: list[tuple[str, float, float, float, float]] = field(default_factory=list)   # (class, x1, y1, x2, y2)
    width: float = OUT_X + OUT_W + 16
    height: float = 0


def _pos(prov: dict[str, Any]) -> str:
    i = prov.get("input") or {}
    return f"{i.get('topic', '?')}/{i.get('partition', '?')}@{i.get('offset', '?')}"


def _when(ms: Any) -> str:
    if not isinstance(ms, int) or ms <= 0:
        return "?"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ms / 1000)) + f".{ms % 1000:03d} UTC"


def chosen_node(kind: str, p: dict[str, Any]) -> str:
    """The node the decision put the task on ('' when it placed nothing)."""
    if kind == "TaskPlaced":
        return p.get("node_id") or ""
    if kind == "TaskMigrated":
        return p.get("to_node") or ""
    return ""


def outcome(kind: str, p: dict[str, Any]) -> str:
    if kind == "TaskPlaced":
        dev = p.get("gpu_devices") or []
        gpu = f", GPU {','.join(map(str, dev))} x {p.get('gpu_milli')} milli" if dev else ""
        return f"placed on {p.get('node_id')}{gpu}"
    if kind == "TaskMigrated":
        return f"moved {p.get('from_node')} -> {p.get('to_node')} ({p.get('cause', '')})"
    if kind == "TaskPending":
        return f"pending at queue position {p.get('queue_position', 0)}"
    if kind == "TaskUnschedulable":
        return "unschedulable: no node can ever hold it"
    if kind == "TaskReleased":
        return f"released ({p.get('cause')})" + (f" from {p['node_id']}" if p.get("node_id") else "")
    if kind == "TaskLost":
        return f"lost: {p.get('node_id')} went DOWN"
    if kind == "TaskPreempted":
        return f"preempted on {p.get('node_id')} by {p.get('preempted_by') or '?'}"
    if kind == "JobResized":
        return (f"job {p.get('job_id')} {p.get('action')}: {p.get('clients_from')} -> {p.get('clients_to')} clients, "
                f"batch {p.get('batch_size_from')} -> {p.get('batch_size_to')} (round {p.get('round')})")
    return kind


def build(task_id: str, kind: str, p: dict[str, Any]) -> Tree:
    prov = p.get("provenance") or {}
    path = [str(s) for s in prov.get("path") or []]
    tree = Tree()
    y = 16.0

    def spine(label: str, sub: str = "", kind_: str = "step", title: str = "") -> Box:
        nonlocal y
        box = Box(SPINE_X, y, SPINE_W, BOX_H, label, sub, kind_, title or f"{label} {sub}".strip())
        if tree.boxes:
            prev = last[0]
            tree.edges.append(("flow", prev.cx, prev.bottom, box.cx, box.y))
        tree.boxes.append(box)
        last[0] = box
        y = box.bottom + GAP
        return box

    last: list[Box] = [Box(0, 0, 0, 0, "")]
    spine(f"task {task_id}", p.get("tenant", ""), "task")
    spine(f"{kind} at input {_pos(prov)}", f"decided {_when(prov.get('decided_at'))} (cell clock)",
          title=f"{kind} at input {_pos(prov)}, decision {p.get('decision_id', '')}, "
                f"decided_at {prov.get('decided_at', '?')}")
    spine(f"rule: {prov.get('matched_rule') or 'none (the cell strategy)'}", "", "rule")
    s = prov.get("strategy") or {}
    spine(f"strategy {s.get('name', '?')} v{s.get('version', '?')}",
          f"config {str(s.get('config_digest', ''))[:12]}")

    filtered = prov.get("filtered") or []
    fsteps = [x for x in path if x.startswith("filter:")]
    if fsteps or filtered:
        fbox = spine(fsteps[0] if fsteps else "filter", f"{len(filtered)} exclusion reason(s)" if filtered else "")
        by = _branches(tree, fbox, [
            Box(BRANCH_X, 0, BRANCH_W, BRANCH_H, f"excluded: {f.get('reason')}",
                f"{f.get('nodes')} node(s)" + (f"  e.g. {', '.join(f.get('sample') or [])}" if f.get("sample") else ""),
                "excluded", title=f"excluded: {f.get('reason')} ({f.get('nodes')} nodes; e.g. "
                                  f"{', '.join(f.get('sample') or []) or '-'})")
            for f in filtered], "excluded")
        y = max(y, by + GAP)

    cands = sorted(prov.get("candidates") or [], key=lambda c: c.get("rank", 0))
    pick = chosen_node(kind, p)
    chosen_box: Box | None = None
    if cands:
        ssteps = [x for x in path if x.startswith("score:")]
        sbox = spine("score", ssteps[0].removeprefix("score: ") if ssteps else f"{len(cands)} candidate(s)",
                     title=ssteps[0] if ssteps else "score")
        scores = [float(c.get("score", 0.0)) for c in cands]
        hi, lo = max(scores), min(scores)
        tie = len(cands) > 1 and hi == lo
        boxes = []
        for c in cands:
            chosen = bool(pick) and c.get("node_id") == pick
            score = float(c.get("score", 0.0))
            # the bar: where the score lies between the lowest and the highest shown (none for a tie)
            rel = None if hi == lo else 0.08 + 0.92 * (score - lo) / (hi - lo)
            b = Box(BRANCH_X, 0, BRANCH_W, BRANCH_H, f"#{c.get('rank')} {c.get('node_id')}",
                    f"score {score:g}" + (" (tie: ranked by the tie-break)" if tie else "")
                    + ("  ✓ chosen" if chosen else ""),
                    "chosen" if chosen else "candidate",
                    title=f"rank {c.get('rank')}: {c.get('node_id')} score {c.get('score')}"
                          + (" (chosen)" if chosen else ""), bar=rel)
            boxes.append(b)
            if chosen and chosen_box is None:
                chosen_box = b
        by = _branches(tree, sbox, boxes, "candidate", chosen=chosen_box)
        y = max(y, by + GAP)

    text = outcome(kind, p)
    out_kind = "outcome" if pick else "pending"
    if chosen_box is not None:
        out = Box(OUT_X, 0, OUT_W, BOX_H, text, _bind(path), out_kind, title=text)
        out.y = chosen_box.y + (chosen_box.h - out.h) / 2
        tree.boxes.append(out)
        tree.edges.append(("chosen", chosen_box.x + chosen_box.w, chosen_box.y + chosen_box.h / 2, out.x,
                           out.y + out.h / 2))
    else:
        reasons = "; ".join(f"{r.get('reason')} ({r.get('nodes')} nodes)" for r in p.get("reasons") or [])
        spine(text, reasons, out_kind, title=f"{text}: {reasons}" if reasons else text)
    tree.height = max(y, *(b.bottom + GAP for b in tree.boxes))
    return tree


def _bind(path: list[str]) -> str:
    steps = [x for x in path if x.startswith(("reserve", "bind"))]
    return "  ·  ".join(steps)


def _branches(tree: Tree, parent: Box, boxes: list[Box], kind: str, chosen: Box | None = None) -> float:
    """Stack ``boxes`` in the branch column from ``parent``'s row; return the bottom."""
    y = parent.y + (parent.h - BRANCH_H) / 2
    for b in boxes:
        b.y = y
        y += b.h + BRANCH_GAP
        tree.boxes.append(b)
        edge = "chosen" if b is chosen else ("excluded" if kind == "excluded" else "branch")
        tree.edges.append((edge, parent.x + parent.w, parent.y + parent.h / 2, b.x, b.y + b.h / 2))
    return y - BRANCH_GAP if boxes else parent.bottom


def _fit(text: str, width: float) -> str:
    room = max(4, int((width - 16) / CHAR_W))
    return text if len(text) <= room else text[:room - 1] + "…"


def _wrap(text: str, width: float) -> list[str]:
    """``text`` in lines that fit ``width`` (at spaces when it can), at most MAX_LINES."""
    room = max(8, int((width - 16) / CHAR_W))
    lines: list[str] = []
    rest = text
    while rest and len(lines) < MAX_LINES:
        if len(rest) <= room:
            lines.append(rest)
            rest = ""
            break
        cut = rest.rfind(" ", 0, room + 1)
        cut = cut if cut > room // 3 else room
        lines.append(rest[:cut].rstrip())
        rest = rest[cut:].lstrip()
    if rest:
        lines[-1] = _fit(lines[-1] + " " + rest, width)
    return lines or [""]


def svg(task_id: str, kind: str, p: dict[str, Any]) -> str:
    """The decision tree of one decision as an inline SVG element."""
    t = build(task_id, kind, p)
    parts = [f'<svg class="tree" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {t.width:.0f} {t.height:.0f}" '
             f'width="{t.width:.0f}" height="{t.height:.0f}" role="img" '
             f'aria-label="decision tree of {escape(task_id)}: {escape(outcome(kind, p))}">',
             '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
             'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" class="arrowhead"/></marker>'
             '<marker id="arrow-chosen" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
             'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" class="arrowhead-chosen"/></marker></defs>']
    for cls, x1, y1, x2, y2 in t.edges:
        marker = "arrow-chosen" if cls == "chosen" else "arrow"
        if abs(x1 - x2) < 1:
            d = f"M{x1:.1f},{y1:.1f} L{x2:.1f},{y2:.1f}"
        else:
            mx = (x1 + x2) / 2
            d = f"M{x1:.1f},{y1:.1f} C{mx:.1f},{y1:.1f} {mx:.1f},{y2:.1f} {x2:.1f},{y2:.1f}"
        parts.append(f'<path class="edge edge-{cls}" d="{d}" marker-end="url(#{marker})"/>')
    for b in t.boxes:
        extra = ' data-node="' + escape(b.label.split(" ", 1)[1]) + '"' if b.kind in ("candidate", "chosen") else ""
        parts.append(f'<g class="box box-{b.kind}{" chosen" if b.kind == "chosen" else ""}"{extra}>'
                     f'<title>{escape(b.title or b.label)}</title>'
                     f'<rect x="{b.x:.1f}" y="{b.y:.1f}" width="{b.w:.1f}" height="{b.h:.1f}" rx="6"/>')
        if b.bar is not None:
            parts.append(f'<rect class="bar" x="{b.x + 1:.1f}" y="{b.bottom - 5:.1f}" '
                         f'width="{(b.w - 2) * b.bar:.1f}" height="4" rx="2"/>')
        top = b.y + 15 if b.sub else b.y + (b.h - LINE_H * (len(b.lines) - 1)) / 2 + 4
        for i, line in enumerate(b.lines):
            parts.append(f'<text x="{b.x + 8:.1f}" y="{top + i * LINE_H:.1f}" class="label">{escape(line)}</text>')
        if b.sub:
            parts.append(f'<text x="{b.x + 8:.1f}" y="{top + len(b.lines) * LINE_H:.1f}" class="sub">'
                         f'{escape(_fit(b.sub, b.w * 1.12))}</text>')
        parts.append("</g>")
    parts.append("</svg>")
    return "".join(parts)
