"""What-if output: a terminal table, PNG plots (matplotlib, Agg backend) and one
self-contained HTML report (PNGs embedded as base64, no external asset).

Input is the result dict of ``whatif.py`` (``protocol`` = ``fgd``, ``timed`` or ``log``).
"""
from __future__ import annotations

import base64
import html
import json
from pathlib import Path
from typing import Any

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"]


# --------------------------------------------------------------------------- table
def _fmt(v: Any, nd: int = 2) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.{nd}f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def rows(result: dict[str, Any]) -> list[tuple[str, list[str]]]:
    """(metric, [value per policy]) rows for the table and the HTML."""
    pols = result["policies"]
    if result["protocol"] == "fgd":
        def ms(p: dict, k: str) -> str:
            return f"{p[k]['mean']:.2f} ± {p[k]['sd']:.2f}"
        return [("unallocated GPU % at arrived 100% (mean ± sd)", [ms(p, "unallocated_gpu_pct") for p in pols.values()]),
                ("fragmentation GPU % (mean ± sd)", [ms(p, "frag_gpu_pct") for p in pols.values()]),
                ("seeds", [str(len(p["unallocated_gpu_pct"]["per_seed"])) for p in pols.values()]),
                ("wall seconds", [_fmt(p["seconds"]) for p in pols.values()])]
    out: list[tuple[str, list[str]]] = []

    def add(name: str, fn) -> None:
        out.append((name, [fn(p) for p in pols.values()]))

    add("tasks submitted", lambda p: _fmt(p["tasks"]["submitted"]))
    add("placed (success %)", lambda p: f"{p['tasks']['placed']:,} ({_fmt(p['placement_success_pct'])}%)")
    add("  placed on arrival", lambda p: _fmt(p["tasks"]["placed_immediately"]))
    add("  placed after waiting", lambda p: _fmt(p["tasks"]["placed_after_wait"]))
    add("abandoned (left while pending)", lambda p: _fmt(p["tasks"]["abandoned"]))
    add("unschedulable", lambda p: _fmt(p["tasks"]["unschedulable"]))
    add("pending at end", lambda p: _fmt(p["tasks"]["pending_at_end"]))
    for q in ("mean", "p50", "p95", "p99", "max"):
        add(f"queueing s, all placed: {q}", lambda p, q=q: _fmt(p["queueing_s"][q]))
    for q in ("p50", "p95", "p99"):
        add(f"queueing s, waiters only: {q}", lambda p, q=q: _fmt(p["queueing_waited_s"][q]))
    add("GPU allocation % (time mean)", lambda p: _fmt(p["gpu_allocation_pct"]["time_mean"]))
    add("GPU allocation % (peak)", lambda p: _fmt(p["gpu_allocation_pct"]["peak"]))
    add("GPU demand % (peak)", lambda p: _fmt(p["gpu_demand_pct"]["peak"]))
    add("fragmentation GPU % (time mean)", lambda p: _fmt(p["frag_gpu_pct"]["time_mean"]))
    add("fragmentation GPU % (max)", lambda p: _fmt(p["frag_gpu_pct"]["max"]))
    for tier in ("GOLD", "SILVER", "BRONZE"):
        if any(tier in p["qos"] for p in pols.values()):
            add(f"{tier}: success % / p95 wait s", lambda p, t=tier: (
                f"{_fmt(p['qos'][t]['success_pct'])} / {_fmt(p['qos'][t]['queueing_s']['p95'])}" if t in p["qos"] else "-"))
    add("wall seconds (events/s)", lambda p: f"{_fmt(p['seconds'])} ({_fmt(p.get('events_per_s'))})")
    return out


def table(result: dict[str, Any]) -> str:
    names = list(result["policies"])
    body = rows(result)
    w0 = max(len(r[0]) for r in body)
    widths = [max(len(n), *(len(r[1][i]) for r in body)) for i, n in enumerate(names)]
    line = lambda cells: "  ".join([cells[0].ljust(w0)] + [c.rjust(w) for c, w in zip(cells[1:], widths)])  # noqa: E731
    out = [line(["", *names]), line(["-" * w0, *("-" * w for w in widths)])]
    out += [line([name, *vals]) for name, vals in body]
    reasons = _reasons(result)
    if reasons:
        out.append("")
        out.append("rejections by reason (tasks):")
        out += [line([f"  {k}", *v]) for k, v in reasons]
    return "\n".join(out)


def _reasons(result: dict[str, Any]) -> list[tuple[str, list[str]]]:
    if result["protocol"] == "fgd":
        return []
    pols = list(result["policies"].values())
    out = []
    for group, label in (("unschedulable", "unschedulable"), ("first_pending_reason", "had to wait")):
        keys = sorted({k for p in pols for k in p["rejections"][group]})
        out += [(f"{label}: {k}", [_fmt(p["rejections"][group].get(k, 0)) for p in pols]) for k in keys]
    return out


# --------------------------------------------------------------------------- plots
def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"figure.dpi": 110, "font.size": 9, "axes.grid": True, "grid.alpha": 0.3,
                         "axes.spines.top": False, "axes.spines.right": False})
    return plt


def _time_axis(series: dict[str, dict]) -> tuple[float, str]:
    span = max((s["t_s"][-1] for s in series.values() if s.get("t_s")), default=0.0)
    for div, unit in ((86400.0, "days"), (3600.0, "hours"), (60.0, "minutes")):
        if span >= 3 * div:
            return div, unit
    return 1.0, "seconds"


ACTIVE = 0.02          # plots start where demand first reaches 2 % of its peak
ACTIVE_NOTE = "; from when demand first reached 2% of its peak"


def _active_start(series: dict[str, dict]) -> float:
    """Seconds where the time plots start: a sparse prefix of arrivals would fill the plot."""
    starts = []
    for s in series.values():
        d = s.get("demand_pct") or []
        if d:
            peak = max(d)
            first = next((t for t, v in zip(s["t_s"], d) if v >= ACTIVE * peak), 0.0)
            span = s["t_s"][-1] - first
            starts.append(max(0.0, first - 0.02 * span))
    return min(starts) if starts else 0.0


def _end(series: dict[str, dict]) -> float | None:
    ends = [s["t_s"][-1] for s in series.values() if s.get("t_s")]
    return max(ends) if ends else None


def plots(result: dict[str, Any], out_dir: Path) -> dict[str, Path]:
    """Write the PNGs; returns ``{name: path}``."""
    plt = _plt()
    out_dir.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    series = result.get("series") or {}
    names = list(result["policies"])

    if result["protocol"] == "fgd":
        if series:
            fig, ax = plt.subplots(figsize=(7, 4.2))
            for i, name in enumerate(names):
                pts = series.get(name, {}).get("curve") or []
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], color=COLORS[i % len(COLORS)], lw=1.4,
                            label=f"{name} (seed {series[name]['seed']})")
            ax.plot([0, 130], [0, 130], color="#999", lw=0.8, ls=":", label="allocation = arrived")
            ax.axvline(100, color="#555", lw=0.8, ls="--")
            ax.set_xlim(0, 130)
            ax.set_ylim(0, 105)
            ax.set_xlabel("arrived GPU demand, % of cluster GPUs")
            ax.set_ylabel("allocated GPUs, % of cluster")
            ax.set_title(f"Allocation vs arrived demand: {result['workload']} (FGD protocol)")
            ax.legend(loc="lower right", frameon=False)
            paths["allocation"] = _save(fig, out_dir / "allocation_vs_arrived.png", plt)
        fig, ax = plt.subplots(figsize=(7, 3.6))
        x = range(len(names))
        pols = result["policies"]
        ax.bar([i - 0.2 for i in x], [pols[n]["unallocated_gpu_pct"]["mean"] for n in names], 0.4,
               yerr=[pols[n]["unallocated_gpu_pct"]["sd"] for n in names], color="#1f77b4", capsize=3,
               label="unallocated GPU % at arrived 100%")
        ax.bar([i + 0.2 for i in x], [pols[n]["frag_gpu_pct"]["mean"] for n in names], 0.4,
               yerr=[pols[n]["frag_gpu_pct"]["sd"] for n in names], color="#ff7f0e", capsize=3,
               label="fragmentation GPU %")
        ax.set_xticks(list(x), names)
        ax.set_ylabel("% of cluster GPUs (mean ± sd over seeds)")
        ax.legend(frameon=False)
        ax.set_title("Unallocated and fragmented GPUs")
        paths["summary"] = _save(fig, out_dir / "unallocated.png", plt)
        return paths

    div, unit = _time_axis(series)
    x0 = _active_start(series) / div
    x1 = (_end(series) or 0) / div or None
    fig, ax = plt.subplots(figsize=(8, 4.2))
    for i, name in enumerate(names):
        s = series.get(name) or {}
        if not s.get("t_s"):
            continue
        t = [x / div for x in s["t_s"]]
        if i == 0:
            ax.step(t, s["demand_pct"], where="post", color="#333", lw=1.0, ls="--",
                    label="arrived demand (placed + waiting)")
        ax.step(t, s["alloc_pct"], where="post", color=COLORS[i % len(COLORS)], lw=1.2, label=f"allocated: {name}")
    ax.set_xlim(x0, x1)
    ax.set_xlabel(f"time since first arrival ({unit}){ACTIVE_NOTE if x0 > 0 else ''}")
    ax.set_ylabel("GPU milli, % of cluster capacity")
    ax.set_ylim(bottom=0)
    ax.set_title("GPU allocation vs arrived demand")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=3, frameon=False)
    paths["allocation"] = _save(fig, out_dir / "allocation_vs_demand.png", plt)

    any_wait = any((series.get(n) or {}).get("waited_s_sorted") for n in names)
    fig, ax = plt.subplots(figsize=(8, 4.2 if any_wait else 1.4))
    drawn = False
    for i, name in enumerate(names):
        s = series.get(name) or {}
        waits = s.get("waited_s_sorted") or []
        if not waits:
            continue
        n = len(waits)
        tasks = result["policies"][name]["tasks"]
        ax.step(waits, [(k + 1) / n * 100 for k in range(n)], where="post", color=COLORS[i % len(COLORS)], lw=1.4,
                label=f"{name}: {s.get('waited_n', n):,} of {tasks['placed']:,} placed tasks waited")
        drawn = True
    if drawn:
        ax.set_xscale("log")
        ax.set_xlabel("queueing time, seconds (placement decision - submission; log scale)")
        ax.set_ylabel("% of the tasks that waited")
        ax.set_ylim(0, 101)
        ax.legend(loc="upper left", frameon=False)
    else:
        ax.text(0.5, 0.5, "no task had to wait under any policy", ha="center", va="center",
                transform=ax.transAxes, fontsize=12, color="#555")
        ax.axis("off")
    ax.set_title("Queueing-time distribution (CDF over tasks that waited)")
    paths["queueing"] = _save(fig, out_dir / "queueing_cdf.png", plt)

    fig, ax = plt.subplots(figsize=(8, 3.4))
    for i, name in enumerate(names):
        s = series.get(name) or {}
        if s.get("frag_t_s"):
            ax.plot([x / div for x in s["frag_t_s"]], s["frag_pct"], color=COLORS[i % len(COLORS)], lw=1.2, label=name)
    ax.set_xlim(x0, x1)
    ax.set_xlabel(f"time since first arrival ({unit}){ACTIVE_NOTE if x0 > 0 else ''}")
    ax.set_ylabel("fragmented GPU, % of capacity")
    ax.set_ylim(bottom=0)
    ax.set_title("Fragmentation (FGD definition, w.r.t. the typical tasks)")
    ax.legend(frameon=False)
    paths["frag"] = _save(fig, out_dir / "fragmentation.png", plt)
    return paths


def _save(fig, path: Path, plt) -> Path:
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


# --------------------------------------------------------------------------- html
CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px auto;max-width:1040px;color:#222;padding:0 16px}
h1{font-size:22px;margin-bottom:4px} h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ddd;padding-bottom:4px}
.sub{color:#666;margin-top:0} table{border-collapse:collapse;font-size:13px;margin:8px 0}
th,td{border-bottom:1px solid #eee;padding:4px 10px;text-align:right} th:first-child,td:first-child{text-align:left}
th{background:#f6f6f6} dl{display:grid;grid-template-columns:max-content 1fr;gap:4px 14px;font-size:13px}
dt{color:#666} dd{margin:0} img{max-width:100%;border:1px solid #eee;margin:6px 0}
code{background:#f3f3f3;padding:1px 4px;border-radius:3px;font-size:12px}
"""


def _table_html(header: list[str], body: list[tuple[str, list[str]]]) -> str:
    h = "".join(f"<th>{html.escape(c)}</th>" for c in header)
    rows_ = "".join("<tr><td>" + html.escape(n) + "</td>" + "".join(f"<td>{html.escape(v)}</td>" for v in vals) + "</tr>"
                    for n, vals in body)
    return f"<table><thead><tr>{h}</tr></thead><tbody>{rows_}</tbody></table>"


def html_report(result: dict[str, Any], images: dict[str, Path], path: Path) -> Path:
    """One HTML file with everything inlined."""
    names = list(result["policies"])
    proto = result["protocol"]
    title = {"fgd": "FGD protocol", "timed": "Timed what-if", "log": "Log what-if"}[proto]
    setup = [(k, v) for k, v in (result.get("setup") or {}).items()]
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>Suanli what-if: {html.escape(result['workload'])}</title>",
             f"<style>{CSS}</style></head><body>",
             f"<h1>{title}: {html.escape(result['workload'])}</h1>",
             f"<p class='sub'>policies: {html.escape(', '.join(names))}</p>",
             "<h2>Set-up</h2><dl>"]
    parts += [f"<dt>{html.escape(str(k))}</dt><dd>{html.escape(v if isinstance(v, str) else json.dumps(v))}</dd>"
              for k, v in setup]
    parts.append("</dl><h2>Results</h2>")
    parts.append(_table_html(["metric", *names], rows(result)))
    reasons = _reasons(result)
    if reasons:
        parts.append("<h2>Rejections by reason</h2>")
        parts.append(_table_html(["reason (tasks)", *names], reasons))
    captions = {"allocation": "GPU allocation vs arrived demand", "queueing": "Queueing-time distribution",
                "frag": "Fragmentation over time", "summary": "Unallocated and fragmented GPUs"}
    parts.append("<h2>Plots</h2>")
    for key, img in images.items():
        data = base64.b64encode(Path(img).read_bytes()).decode()
        parts.append(f"<figure><img alt='{html.escape(captions.get(key, key))}' src='data:image/png;base64,{data}'>"
                     f"<figcaption class='sub'>{html.escape(captions.get(key, key))}</figcaption></figure>")
    if result.get("definitions"):
        parts.append("<h2>Definitions</h2><ul>")
        parts += [f"<li>{html.escape(d)}</li>" for d in result["definitions"]]
        parts.append("</ul>")
    parts.append("</body></html>")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(parts))
    return path
