"""Explanations (C8): decision payloads -> a readable decision path, or a Mermaid graph.

Pure functions over the decisions of one task, in log order (``[(kind, payload), ...]``
as the core emits them: TaskPlaced / TaskPending / TaskUnschedulable / TaskReleased).
:func:`render_text` walks each decision from submission through rule matching, filters
and scores to the allocation; :func:`render_mermaid` draws the same as a ``graph TD``
decision tree (excluded nodes branch off the filter step, the ranked candidates off the
score step, the chosen one leads to the allocation).
"""
from __future__ import annotations

from typing import Any, Iterable

Decision = tuple[str, dict[str, Any]]

OUTCOME = {"TaskPlaced": "placed", "TaskPending": "pending", "TaskUnschedulable": "unschedulable",
           "TaskReleased": "released"}


def _pos(prov: dict[str, Any]) -> str:
    i = prov.get("input") or {}
    return f"{i.get('topic', '?')}/{i.get('partition', '?')}@{i.get('offset', '?')}"


def _strategy(prov: dict[str, Any]) -> str:
    s = prov.get("strategy") or {}
    return f"{s.get('name', '?')} v{s.get('version', '?')} (config {str(s.get('config_digest', ''))[:12]})"


def _outcome(kind: str, p: dict[str, Any]) -> str:
    if kind == "TaskPlaced":
        dev = p.get("gpu_devices") or []
        g = f", GPU {dev} x {p.get('gpu_milli')} milli" if dev else ""
        return f"placed on {p['node_id']} (cpu {p.get('cpu_milli')} milli, mem {p.get('memory_mib')} MiB{g})"
    if kind == "TaskPending":
        rs = "; ".join(f"{r['reason']} ({r['nodes']} nodes)" for r in p.get("reasons") or [])
        return f"pending at queue position {p.get('queue_position', 0)}: {rs}"
    if kind == "TaskUnschedulable":
        return "unschedulable: " + "; ".join(r["reason"] for r in p.get("reasons") or [])
    if kind == "TaskReleased":
        return f"released ({p.get('cause')})" + (f" from {p['node_id']}" if p.get("node_id") else "")
    return kind


def render_text(task_id: str, decisions: Iterable[Decision]) -> str:
    decisions = list(decisions)
    if not decisions:
        return f"{task_id}: no decisions found"
    out = [f"task {task_id}: {len(decisions)} decision(s)"]
    for n, (kind, p) in enumerate(decisions, 1):
        prov = p.get("provenance") or {}
        out.append(f"\n[{n}] {OUTCOME.get(kind, kind).upper()} at input {_pos(prov)}, "
                   f"decided_at {prov.get('decided_at')}, decision {p.get('decision_id', '?')}")
        out.append(f"    strategy: {_strategy(prov)}")
        out.append(f"    rule:     {prov.get('matched_rule') or '(none: the cell strategy)'}")
        out.append("    path:")
        for i, step in enumerate(prov.get("path") or [], 1):
            out.append(f"      {i:2d}. {step}")
        for note in prov.get("notes") or []:
            out.append(f"    note:     {note}")
        prof = prov.get("profile")
        if prof:
            out.append(f"    profile:  {profile_summary(prof)} (`suanli profile` shows all of it)")
        filt = prov.get("filtered") or []
        if filt:
            out.append("    excluded by filters:")
            for f in filt:
                sample = ", ".join(f.get("sample") or [])
                out.append(f"      - {f['reason']}: {f['nodes']} node(s)" + (f" (e.g. {sample})" if sample else ""))
        cands = prov.get("candidates") or []
        if cands:
            out.append("    candidates (best first):")
            for c in cands:
                mark = " <- chosen" if kind == "TaskPlaced" and c["node_id"] == p.get("node_id") and c["rank"] == 1 else ""
                out.append(f"      #{c['rank']} {c['node_id']:<24} score {c['score']:g}{mark}")
        out.append(f"    outcome: {_outcome(kind, p)}")
    return "\n".join(out)


def _q(text: Any) -> str:
    """A Mermaid node label: quoted, with quotes and brackets escaped as entities."""
    s = str(text).replace("&", "#amp;").replace('"', "#quot;").replace("<", "#lt;").replace(">", "#gt;")
    return f'"{s}"'


def render_mermaid(task_id: str, decisions: Iterable[Decision]) -> str:
    decisions = list(decisions)
    lines = ["graph TD", f"  T0([{_q('task ' + task_id)}])"]
    prev = "T0"
    for n, (kind, p) in enumerate(decisions, 1):
        prov = p.get("provenance") or {}
        d = f"D{n}"
        path = prov.get("path") or []
        lines.append(f"  {d}[{_q(f'{path[0] if path else kind} at {_pos(prov)}')}]")
        lines.append(f"  {prev} --> {d}")
        cur = d
        rule = prov.get("matched_rule")
        strat = (prov.get("strategy") or {}).get("name", "?")
        m = f"{d}M"
        lines.append(f"  {m}{{{_q(rule or 'no rule')}}}")
        lines.append(f"  {cur} --> {m}")
        s_node = f"{d}S"
        lines.append(f"  {s_node}[{_q('strategy ' + strat)}]")
        lines.append(f"  {m} --> {s_node}")
        cur = s_node
        fsteps = [x for x in path if x.startswith("filter:")]
        if fsteps or prov.get("filtered"):
            f = f"{d}F"
            lines.append(f"  {f}[{_q(fsteps[0] if fsteps else 'filter')}]")
            lines.append(f"  {cur} --> {f}")
            for j, fo in enumerate(prov.get("filtered") or []):
                x = f"{d}X{j}"
                label = "excluded: {} ({})".format(fo["reason"], fo["nodes"])
                lines.append(f"  {x}[{_q(label)}]")
                lines.append(f"  {f} -.-> {x}")
            cur = f
        cands = prov.get("candidates") or []
        if cands:
            c = f"{d}C"
            lines.append(f"  {c}{{{_q('score')}}}")
            lines.append(f"  {cur} --> {c}")
            for cand in cands:
                k = f"{d}C{cand['rank']}"
                label = "#{} {} ({:g})".format(cand["rank"], cand["node_id"], cand["score"])
                lines.append(f"  {k}[{_q(label)}]")
                arrow = "-->" if cand["rank"] == 1 else "-.->"
                lines.append(f"  {c} {arrow} {k}")
            cur = f"{d}C1"
        o = f"{d}O"
        shape = ("[[", "]]") if kind == "TaskPlaced" else ("[/", "/]")
        lines.append(f"  {o}{shape[0]}{_q(_outcome(kind, p))}{shape[1]}")
        lines.append(f"  {cur} --> {o}")
        prev = o
    return "\n".join(lines) + "\n"


def profile_summary(prof: dict) -> str:
    """One line of a task profile: predicted duration and its source, class, IO, history."""
    pred = prof.get("predicted_duration_s") or 0.0
    return (f"predicted {pred / 3600:.2f} h ({prof.get('duration_class') or 'no class'}), "
            f"io {prof.get('io_intensity', 0.0):.2f}, learnt from {prof.get('history_level') or '?'} "
            f"({int(prof.get('history_runs') or 0)} runs), {prof.get('dims_filled', 0)} dimensions observed")

