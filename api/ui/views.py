"""The dashboard's HTML: pages rendered on the server from the read model (no build step).

Every value is escaped here; the script (``static/dashboard.js``) only sets text and
classes. Pages render complete (the first paint needs no script); the script then keeps
them current from the event stream.
"""
from __future__ import annotations

import json
import time
from functools import cache
from html import escape
from pathlib import Path
from string import Template
from typing import Any, Iterable
from urllib.parse import quote

from suanli.api.redact import OTHER_TENANT  # noqa: F401  (the pages' wording)
from suanli.api.redact import Redactor as _BaseRedactor
from suanli.api.ui import tree
from suanli.api.ui.state import ACTIVE, DashboardState

HERE = Path(__file__).parent
TIERS = ("GOLD", "SILVER", "BRONZE")
STATUS_ORDER = ("SUBMITTED", "PENDING", "PLACED", "DISPATCHED", "RUNNING", "PREEMPTED", "COMPLETED", "FAILED",
                "CANCELLED", "UNSCHEDULABLE")
# Decisions whose tree is worth drawing first (a release or a loss has no candidates).
SCHEDULING = ("TaskPlaced", "TaskMigrated", "TaskPending", "TaskUnschedulable")
LOST_BADGE = ' <span class="badge lost">lost before</span>'
PREEMPTED_BADGE = ' <span class="badge pre">preempted before</span>'


@cache
def template(name: str) -> Template:
    return Template((HERE / "templates" / name).read_text())


def e(value: Any) -> str:
    return escape(str(value), quote=True)


def fmt_time(ms: int | float | None) -> str:
    if not ms:
        return "–"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ms / 1000)) + f".{int(ms) % 1000:03d} UTC"


def fmt_age(ms: float) -> str:
    s = max(0, int(ms / 1000))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    return f"{s // 3600}h {s % 3600 // 60:02d}m"


def bucket(milli_used: int, milli_total: int = 1000) -> int:
    """The heat-map class 0..10 of an allocation (0: nothing; 10: over 90 %). The script's
    ``bucket`` is the same function."""
    if milli_used <= 0 or milli_total <= 0:
        return 0
    return min(10, max(1, -(-milli_used * 10 // milli_total)))


def _on(flag: bool) -> str:
    return ' class="on"' if flag else ""


def page(title: str, page_name: str, tenant: str, body: str, *, stream: str = "", fragment: str = "") -> str:
    nav = "".join(f'<a href="{href}"{_on(page_name == key)}>{label}</a>'
                  for key, href, label in (("cluster", "/ui/", "Cluster"), ("queues", "/ui/queues", "Queues"),
                                           ("tasks", "/ui/tasks", "Tasks"),
                                           ("reservations", "/ui/reservations", "Reservations"),
                                           ("whatif", "/ui/whatif", "What-if")))
    return template("layout.html").substitute(title=e(title), page=e(page_name), tenant=e(tenant), nav=nav,
                                              body=body, stream=e(stream), fragment=e(fragment))


def login(next_path: str = "/ui/", error: str = "") -> str:
    return template("login.html").substitute(next=e(next_path),
                                             error=f'<p class="error" role="alert">{e(error)}</p>' if error else "")


def not_found(tenant: str, what: str) -> str:
    return page("Not found", "tasks", tenant,
                f'<section class="card"><h1>Not found</h1><p>{e(what)}</p>'
                f'<p><a href="/ui/tasks">Your tasks</a></p></section>', stream="/ui/events?page=none")


# ====================================================================== other tenants
# A page never shows the id of another tenant's task (api/redact.py says why and how).
class Redactor(_BaseRedactor):
    """:class:`~suanli.api.redact.Redactor` over the dashboard's read model."""

    def __init__(self, state: DashboardState, tenant: str):
        super().__init__(state.model.lifecycle.tasks, state.model.submissions, tenant,
                         getattr(state.model, "reservations", None))


# ====================================================================== the cluster
def node_entry(state: DashboardState, key: tuple[str, str], node: Any) -> list[Any]:
    """What the stream sends about one node: [index, health, status, condition, GPU milli
    used per device, CPU used, CPU capacity, zone, site, node id]."""
    place = state.place(key)
    return [state.index.get(key, -1), node.health, node.status, state.condition(key), list(node.gpu_used),
            node.cpu_used, node.cpu_milli, place.zone, place.site, node.node_id]


MAX_SLOTS = 8                 # GPU squares drawn per node (the details list every GPU)


def node_classes(health: str, status: str, condition: str, gpu_used: list[int], cpu_used: int,
                 cpu_milli: int) -> str:
    """The node's class list (the script's ``nodeClasses`` is the same function): health,
    status and condition, then its GPUs (kN, and aI-B for each GPU I in heat bucket B > 0)
    or, for a CPU-only node, ``cpu uB``."""
    cls = ["n"]
    if health == "SUSPECT":
        cls.append("hs")
    elif health == "DOWN" or status == "DOWN":
        cls.append("hd")
    if status in ("CORDONED", "DRAINING"):
        cls.append("sc")
    if condition in ("HOT", "CONGESTED", "DEGRADED"):
        cls.append("c" + condition[0])
    if gpu_used:
        cls.append(f"k{min(len(gpu_used), MAX_SLOTS)}")
        cls.extend(f"a{i}-{b}" for i, u in enumerate(gpu_used[:MAX_SLOTS]) if (b := bucket(u)))
    else:
        cls.append("cpu")
        b = bucket(cpu_used, cpu_milli)
        if b:
            cls.append(f"u{b}")
    return " ".join(cls)


def node_html(state: DashboardState, key: tuple[str, str], node: Any) -> str:
    cls = node_classes(node.health, node.status, state.condition(key), node.gpu_used, node.cpu_used, node.cpu_milli)
    return f'<b id="n{state.index.get(key, -1)}" class="{cls}"></b>'


def cluster_stats(state: DashboardState, cell: str) -> dict[str, Any]:
    """Per-cell figures of the summary cards and zone headers (shared by all tenants)."""
    health = {"READY": 0, "SUSPECT": 0, "DOWN": 0}
    conditions = {"HOT": 0, "CONGESTED": 0, "DEGRADED": 0}
    draining = cordoned = gpus = used = cpu = cpu_used = 0
    zones: dict[str, list[int]] = {}
    for key, n in state.model.lifecycle.nodes.items():
        if key[0] != cell:
            continue
        health[n.health] = health.get(n.health, 0) + 1
        cond = state.condition(key)
        if cond in conditions:
            conditions[cond] += 1
        draining += n.status == "DRAINING"
        cordoned += n.status == "CORDONED"
        g = sum(n.gpu_used)
        gpus += n.gpus
        used += g
        cpu += n.cpu_milli
        cpu_used += n.cpu_used
        z = zones.setdefault(state.place(key).zone, [0, 0])
        z[0] += g
        z[1] += n.gpus * 1000
    return {"nodes": sum(health.values()), "health": health, "conditions": conditions, "draining": draining,
            "cordoned": cordoned, "gpus": gpus, "gpu_pct": round(100 * used / (gpus * 1000), 1) if gpus else 0.0,
            "cpu_pct": round(100 * cpu_used / cpu, 1) if cpu else 0.0,
            "zones": {zone: round(100 * u / t, 1) if t else 0.0 for zone, (u, t) in zones.items()}}


def _hint(hint: str, key: str) -> str:
    return f'<span class="hint" data-count="{e(key)}_hint">{e(hint)}</span>' if hint else ""


def _card(label: str, value: Any, key: str, hint: str = "", cls: str = "") -> str:
    return (f'<div class="stat {cls}"><span class="v" data-count="{e(key)}">{e(value)}</span>'
            f'<span class="k">{e(label)}</span>{_hint(hint, key)}</div>')


def cluster(state: DashboardState, tenant: str, cell: str | None) -> tuple[str, str]:
    """The cluster page's body and the cell shown."""
    cells = state.cells()
    cell = cell if cell in cells else (cells[0] if cells else "")
    counts = state.tenant_counts(tenant)
    stats = cluster_stats(state, cell) if cell else cluster_stats(state, "\0")
    tabs = "".join(f'<a href="/ui/?cell={e(c)}"{_on(c == cell)}>{e(c)}</a>' for c in cells)
    out = [f'<section class="cells" id="cells"><span class="k">cell</span>'
           f'{tabs or "<em>no node has registered yet: the map fills in as nodes register</em>"}</section>',
           '<section class="stats">',
           '<div class="group"><h2>Your tasks <small>tenant ' + e(tenant) + '</small></h2><div class="row">',
           _card("placed", counts["placed"], "placed", "ever placed", "big"),
           _card("pending", counts["pending"], "pending", "", "warn" if counts["pending"] else ""),
           _card("running", counts["running"], "running", "placed, dispatched, running"),
           _card("completed", counts["completed"], "completed"),
           _card("failed · unschedulable", f'{counts["failed"]} · {counts["unschedulable"]}', "failed_unschedulable"),
           '</div></div>',
           f'<div class="group"><h2>Cell <span data-cell-name>{e(cell) or "–"}</span> <small>shared by every tenant'
           f'</small></h2><div class="row">',
           _card("nodes", stats["nodes"], "c_nodes", f'{stats["gpus"]} GPUs'),
           _card("GPU allocated", f'{stats["gpu_pct"]:.1f} %', "c_gpu_pct", f'CPU {stats["cpu_pct"]:.1f} %'),
           _card("ready · suspect · down",
                 f'{stats["health"]["READY"]} · {stats["health"]["SUSPECT"]} · {stats["health"]["DOWN"]}', "c_health",
                 f'{stats["draining"]} draining, {stats["cordoned"]} cordoned'),
           _card("hot · congested · degraded",
                 f'{stats["conditions"]["HOT"]} · {stats["conditions"]["CONGESTED"]} · {stats["conditions"]["DEGRADED"]}',
                 "c_conditions"),
           '</div></div></section>', _legend()]
    groups: dict[str, dict[str, list[tuple[tuple[str, str], Any]]]] = {}
    for key, n in state.model.lifecycle.nodes.items():
        if key[0] == cell:
            p = state.place(key)
            groups.setdefault(p.zone, {}).setdefault(p.site, []).append((key, n))
    out.append('<section class="zones" id="zones">')
    for zone in sorted(groups):
        sites = groups[zone]
        n_nodes = sum(len(v) for v in sites.values())
        n_gpus = sum(n.gpus for v in sites.values() for _k, n in v)
        out.append(f'<div class="zone" data-zone="{e(zone)}"><h3><span class="zn">zone {e(zone or "(not given)")}</span>'
                   f'<span class="zs">{len(sites)} site{"s" if len(sites) != 1 else ""} · {n_nodes} nodes · {n_gpus} GPUs · '
                   f'<span data-zone-pct="{e(zone)}">{stats["zones"].get(zone, 0.0):.1f}</span> % allocated</span></h3>')
        for site in sorted(sites):
            rows = sorted(sites[site], key=lambda kn: kn[0][1])
            out.append(f'<div class="site"><h4>{e(site or "(site not given)")} <small>{len(rows)} nodes</small></h4>'
                       f'<div class="grid" data-site="{e(zone)}|{e(site)}">')
            out.append("".join(node_html(state, key, n) for key, n in rows))
            out.append("</div></div>")
        out.append("</div>")
    out.append('</section><aside class="inspect" id="inspect" hidden></aside>')
    return "".join(out), cell


def _legend() -> str:
    scale = "".join(f'<i class="g{b}"></i>' for b in range(11))
    return ('<section class="legend"><span class="k">GPU allocated</span><span class="scale">'
            f'<span>0 %</span>{scale}<span>100 %</span></span>'
            '<span class="k">a box is a node, each square in it one of its GPUs; a round cell is a CPU-only node '
            '(its CPU allocated)</span>'
            '<span class="keys"><b class="n hs"></b> suspect '
            '<b class="n hd"></b> down '
            '<b class="n sc"></b> cordoned/draining '
            '<b class="n cH"></b> hot '
            '<b class="n cC"></b> congested '
            '<b class="n cD"></b> degraded</span>'
            '<span class="k">hover a node for its details</span></section>')


def node_detail(state: DashboardState, key: tuple[str, str], node: Any) -> dict[str, Any]:
    p = state.place(key)
    return {"node_id": node.node_id, "cell": node.cell, "gpu_model": node.gpu_model, "gpus": node.gpus,
            "gpu_used": list(node.gpu_used), "cpu_milli": node.cpu_milli, "cpu_used": node.cpu_used,
            "memory_mib": node.memory_mib, "memory_used": node.memory_used, "health": node.health,
            "status": node.status, "condition": state.condition(key), "region": p.region, "zone": p.zone,
            "site": p.site, "connector": node.connector}


# ====================================================================== queues
def queues(state: DashboardState, tenant: str) -> str:
    lifecycle = state.model.lifecycle
    now = time.time() * 1000
    cells = sorted({t.cell for t in lifecycle.open_tasks() if t.tenant == tenant and t.status in ("PENDING", "PREEMPTED")})
    hide = Redactor(state, tenant)
    out = ['<section class="card"><h1>Queues <small>your pending tasks, by cell, QoS tier and position</small></h1>'
           '<p class="note">Positions are in the cell\'s whole queue, as the scheduler orders it: urgent before '
           'normal before batch, gold before silver before bronze, then priority aged by waiting time, '
           'lost or preempted work first, then arrival. Other tenants\' tasks are counted, never shown.</p></section>']
    if not cells:
        out.append('<section class="card empty"><p>None of your tasks is waiting.</p></section>')
    for cell in cells:
        queue = lifecycle.pending(cell)
        mine = [t for t in queue if t.tenant == tenant]
        policy = lifecycle.policy(cell)
        rule = (f'{e(policy.strategy)}, one priority point per {policy.aging_ms / 1000:g} s waiting' if policy.set
                else 'default policy')
        out.append(f'<section class="card queue" data-cell="{e(cell)}"><h2>cell {e(cell)} '
                   f'<small>{len(queue)} waiting in all · {len(mine)} yours · '
                   f'<span class="policy">{rule}</span></small></h2>')
        by_tier: dict[str, list[Any]] = {}
        for t in mine:
            by_tier.setdefault((t.qos_tier or "SILVER").upper(), []).append(t)
        tiers = [*TIERS, *sorted(set(by_tier) - set(TIERS))]
        out.append('<div class="tiers">')
        tiers = [t for t in tiers if by_tier.get(t)] + [t for t in tiers if not by_tier.get(t)]   # empty ones last
        for tier in tiers:
            rows = by_tier.get(tier, [])
            out.append(f'<div class="tier tier-{e(tier.lower())}{"" if rows else " none"}"><h3>'
                       f'<span class="badge q-{e(tier.lower())}">{e(tier)}</span> {len(rows)} waiting</h3>')
            if rows:
                out.append('<table><thead><tr><th class="num">position</th><th>task</th><th>lane</th>'
                           '<th class="num">priority</th><th>waiting</th><th>why it waits</th></tr></thead><tbody>')
                for t in rows:
                    reasons = "".join(f'<li>{e(hide.text(r["reason"]))} <span class="dim">({e(r["nodes"])} nodes)'
                                      f'</span></li>' for r in t.reasons) or '<li class="dim">not decided yet</li>'
                    flags = (LOST_BADGE if t.lost else "") + (PREEMPTED_BADGE if t.preempted else "")
                    out.append(f'<tr data-task="{e(t.task_id)}"><td class="num pos">{t.queue_position}</td>'
                               f'<td><a href="/ui/tasks/{e(t.task_id)}">{e(t.task_id)}</a>{flags}</td>'
                               f'<td>{e(t.scheduling or "normal")}</td><td class="num">{t.priority}</td>'
                               f'<td>{fmt_age(now - t.submitted_at) if t.submitted_at else "–"}</td>'
                               f'<td><ul class="reasons">{reasons}</ul></td></tr>')
                out.append("</tbody></table>")
            out.append("</div>")
        out.append("</div>")
        grace = [t for t in lifecycle.preempted_waiting(cell) if t.tenant == tenant]
        if grace:
            out.append('<h3>Preempted, in their grace</h3><table><thead><tr><th>task</th><th>by</th>'
                       '<th>queued again at</th></tr></thead><tbody>')
            for t in grace:
                by = hide.text(t.preempted_by)
                out.append(f'<tr><td><a href="/ui/tasks/{e(t.task_id)}">{e(t.task_id)}</a></td>'
                           f'<td>{e(by)}</td><td>{fmt_time(t.requeue_at)}</td></tr>')
            out.append("</tbody></table>")
        out.append("</section>")
    return "".join(out)


# ====================================================================== tasks
def _hidden_status(status: str | None) -> str:
    return f'<input type="hidden" name="status" value="{e(status)}">' if status else ""


def tasks(state: DashboardState, tenant: str, status: str | None, query: str, limit: int = 300,
          job: str = "") -> str:
    """The tenant's tasks; ``job``: only the member tasks of that job (issue 22)."""
    lifecycle = state.model.lifecycle
    rows: list[Any] = lifecycle.tenant_tasks(tenant)
    rows += [s for s in state.model.submissions.values() if s.tenant == tenant and s.task_id not in lifecycle.tasks]
    if job:
        rows = [t for t in rows if getattr(t, "job_id", "") == job]
    keep = f"&job={e(quote(job, safe=''))}" if job else ""
    counts: dict[str, int] = {}
    for t in rows:
        st = getattr(t, "status", "SUBMITTED")
        counts[st] = counts.get(st, 0) + 1
    chips = [f'<a href="/ui/tasks{"?" + keep[1:] if keep else ""}"{_on(not status)}>all <span>{len(rows)}</span></a>']
    for st in STATUS_ORDER:
        if counts.get(st):
            chips.append(f'<a href="/ui/tasks?status={st}{keep}"{_on(status == st)}>'
                         f'{st.lower()} <span>{counts[st]}</span></a>')
    if status:
        rows = [t for t in rows if getattr(t, "status", "SUBMITTED") == status]
    if query:
        rows = [t for t in rows if query.lower() in t.task_id.lower()]
    rows.sort(key=lambda t: (-(t.submitted_at or 0), t.task_id))
    shown = rows[:limit]
    out = [f'<section class="card"><h1>Your tasks <small>tenant {e(tenant)}</small></h1>'
           f'<form class="search" method="get" action="/ui/tasks">'
           f'{_hidden_status(status)}'
           f'<input name="q" value="{e(query)}" placeholder="find a task id" aria-label="task id">'
           f'<input name="job" value="{e(job)}" placeholder="job id" aria-label="job id" id="job-filter">'
           # (with two fields, a form submits on Enter only if it has a submit button)
           f'<button type="submit">find</button></form>'
           + (f'<p class="dim" id="job-shown">the member tasks of job <b>{e(job)}</b> · '
              f'<a href="/ui/tasks">all tasks</a></p>' if job else "")
           + f'<nav class="chips">{"".join(chips)}</nav>']
    if not shown:
        out.append('<p class="empty">No task here.</p>')
    else:
        out.append('<table class="tasks"><thead><tr><th>task</th><th>status</th><th>cell</th><th>tier</th>'
                   '<th>node</th><th>job</th><th>submitted</th></tr></thead><tbody>')
        for t in shown:
            st = getattr(t, "status", "SUBMITTED")
            tj = getattr(t, "job_id", "")
            job_cell = f'<a href="/ui/tasks?job={e(quote(tj, safe=""))}" class="job">{e(tj)}</a>' if tj else ""
            out.append(f'<tr><td><a href="/ui/tasks/{e(t.task_id)}">{e(t.task_id)}</a></td>'
                       f'<td><span class="st st-{e(st.lower())}">{e(st)}</span></td><td>{e(t.cell)}</td>'
                       f'<td>{e((t.qos_tier or "").upper())}</td><td>{e(getattr(t, "node_id", ""))}</td>'
                       f'<td>{job_cell}</td><td>{fmt_time(t.submitted_at)}</td></tr>')
        out.append("</tbody></table>")
        if len(rows) > len(shown):
            out.append(f'<p class="dim">{len(rows) - len(shown)} older tasks not shown: find one by its id.</p>')
    out.append("</section>")
    return "".join(out)


# ====================================================================== reservations
TOKEN_STATUSES = ("GRANTED", "CLAIMED", "EXPIRED", "ENDED", "RELEASED")


def _price(value: float | None) -> str:
    return "–" if value is None else f"{value:g}"


def reservations(state: DashboardState, tenant: str, status: str | None, limit: int = 300) -> str:
    """Your bids and what became of them, then every reservation token (another tenant's
    shown by capacity, window and price only: its ids, tenant and claimants are hidden)."""
    from suanli.api.redact import OTHER_RESERVATION, OTHER_TENANT_NAME

    view = getattr(state.model, "reservations", None)
    bids = view.bids_of(tenant) if view is not None else []
    tokens = view.tokens_of() if view is not None else []
    hide = Redactor(state, tenant)
    out = ['<section class="card"><h1>Your bids <small>advance capacity: whole GPUs for a window, cleared by '
           'the cell\'s auction</small></h1>']
    if not bids:
        out.append('<p class="empty">You have no bids. Bid with <code>suanli reserve -f bid.yaml</code> or '
                   '<code>POST /v1/bids</code>.</p>')
    else:
        out.append('<table class="bids"><thead><tr><th>bid</th><th>cell</th><th>GPUs</th><th>earliest start</th>'
                   '<th>latest start</th><th>hours</th><th>price</th><th>status</th><th>outcome</th></tr></thead><tbody>')
        for b in sorted(bids, key=lambda b: (-b.at, b.bid_id))[:limit]:
            token = view.tokens.get(b.reservation_id) if b.reservation_id else None
            if b.status == "GRANTED" and token is not None:
                outcome = (f'{e(token.reservation_id)} on {e(token.node_id)} GPU {e(list(token.gpu_devices))} at '
                           f'{_price(token.clearing_price)} ({e(token.status.lower())})')
            elif b.status == "LOST":
                need = (f"; {_price(b.needed_price)} per GPU-hour would have won" if b.needed_price is not None
                        else "; no capacity in the window")
                outcome = e(hide.text(b.reason or "refused")) + e(need)
            else:
                outcome = "not cleared yet"
            out.append(f'<tr><td>{e(b.bid_id)}</td><td>{e(b.cell)}</td><td>{b.gpus}{"" if b.gang else " or fewer"}</td>'
                       f'<td>{fmt_time(b.start_at)}</td><td>{fmt_time(b.latest_start_at or b.start_at)}</td>'
                       f'<td>{b.duration_ms / 3_600_000:g}</td><td>{_price(b.price)}</td>'
                       f'<td><span class="st st-{e(b.status.lower())}">{e(b.status)}</span></td><td>{outcome}</td></tr>')
        out.append("</tbody></table>")
    out.append("</section>")
    counts: dict[str, int] = {}
    for t in tokens:
        counts[t.status] = counts.get(t.status, 0) + 1
    chips = [f'<a href="/ui/reservations"{_on(not status)}>all <span>{len(tokens)}</span></a>']
    chips += [f'<a href="/ui/reservations?status={st}"{_on(status == st)}>{st.lower()} <span>{counts[st]}</span></a>'
              for st in TOKEN_STATUSES if counts.get(st)]
    shown = [t for t in tokens if status in (None, t.status)]
    out.append('<section class="card"><h1>Reservation tokens <small>every tenant\'s: they hold capacity; '
               'others\' ids are hidden</small></h1>'
               f'<nav class="chips">{"".join(chips)}</nav>')
    if not shown:
        out.append('<p class="empty">No token here.</p>')
    else:
        out.append('<table class="tokens"><thead><tr><th>token</th><th>owner</th><th>cell</th><th>node</th>'
                   '<th>GPUs</th><th>window</th><th>clearing price</th><th>status</th><th>claimed by</th>'
                   '<th>use</th></tr></thead><tbody>')
        for t in shown[:limit]:
            mine = t.tenant == tenant
            claimed = ", ".join(hide.text(c) for c in t.claimed_by) if mine else \
                ("(another tenant's task)" if t.claimed_by else "")
            use = f"{len(t.used_devices)}/{t.gpus}" + (f", {t.gpus_released} given back" if t.gpus_released else "")
            out.append(f'<tr class="{"mine" if mine else "other"}"><td>{e(t.reservation_id if mine else OTHER_RESERVATION)}</td>'
                       f'<td>{e(t.tenant if mine else OTHER_TENANT_NAME)}</td><td>{e(t.cell)}</td><td>{e(t.node_id)}</td>'
                       f'<td>{e(",".join(str(d) for d in t.gpu_devices))}</td>'
                       f'<td>{fmt_time(t.start_at)} – {fmt_time(t.end_at)}</td><td>{_price(t.clearing_price)}</td>'
                       f'<td><span class="st st-{e(t.status.lower())}">{e(t.status)}</span></td>'
                       f'<td>{e(claimed) or "–"}</td><td>{e(use)}</td></tr>')
        out.append("</tbody></table>")
        if len(shown) > limit:
            out.append(f'<p class="dim">{len(shown) - limit} more tokens not shown.</p>')
    out.append("</section>")
    return "".join(out)


def _summary(kind: str, p: dict[str, Any]) -> str:
    text = tree.outcome(kind, p)
    if kind in ("TaskPending", "TaskUnschedulable"):
        reasons = "; ".join(f"{r.get('reason')} ({r.get('nodes')} nodes)" for r in p.get("reasons") or [])
        text += f": {reasons}" if reasons else ""
    return text


def task(state: DashboardState, view: Any, records: list[Any], selected: int | None) -> str:
    """The task page: header, lifecycle, the decision tree of one decision, audit links."""
    status = getattr(view, "status", "SUBMITTED")
    task_id = view.task_id
    facts = [("status", f'<span class="st st-{e(status.lower())}" id="task-status">{e(status)}</span>'),
             ("cell", e(view.cell)), ("tenant", e(view.tenant)), ("QoS tier", e((view.qos_tier or "").upper() or "–")),
             ("priority", e(view.priority)), ("submitted", fmt_time(view.submitted_at))]
    if getattr(view, "job_id", ""):
        facts.append(("job", f'<a href="/ui/tasks?job={e(quote(view.job_id, safe=""))}" id="task-job">'
                             f'{e(view.job_id)}</a>'))
    if status in ACTIVE:
        gpus = getattr(view, "gpu_devices", [])
        facts.append(("node", f'{e(view.node_id)}' + (f' · GPU {e(",".join(map(str, gpus)))} × {view.gpu_milli} milli'
                                                      if gpus else "")))
    if status == "PENDING":
        facts.append(("queue position", e(view.queue_position)))
    if getattr(view, "exit_code", None) is not None:
        facts.append(("exit code", e(view.exit_code)))
    if getattr(view, "message", ""):
        facts.append(("message", e(Redactor(state, view.tenant).text(view.message))))
    out = [f'<section class="card task-head"><h1>task <span class="tid">{e(task_id)}</span></h1><dl class="facts">',
           "".join(f"<div><dt>{k}</dt><dd>{v}</dd></div>" for k, v in facts), "</dl></section>"]

    # lifecycle
    out.append('<section class="card"><h2>Lifecycle <small>every decision about it, in log order</small></h2>'
               '<ol class="timeline">')
    out.append(f'<li class="ev ev-submitted"><span class="when">{fmt_time(view.submitted_at)}</span>'
               f'<span class="what">submitted</span><span class="detail">{e((view.qos_tier or "").upper())} '
               f'priority {e(view.priority)}</span></li>')
    for n, r in enumerate(records):
        p = r.payload
        prov = p.get("provenance") or {}
        inp = prov.get("input") or {}
        on = " on" if n == selected else ""
        tree_link = (f'<a class="show{on}" href="/ui/tasks/{e(task_id)}?d={n}#tree">decision tree</a>'
                     if prov.get("candidates") or prov.get("filtered") or r.kind in SCHEDULING else "")
        out.append(f'<li class="ev ev-{e(r.kind.lower())}{on}"><span class="when">{fmt_time(prov.get("decided_at"))}</span>'
                   f'<span class="what">{e(r.kind)}</span><span class="detail">{e(_summary(r.kind, p))}</span>'
                   f'<span class="links"><a class="audit" href="/ui/tasks/{e(task_id)}/audit/{n}" '
                   f'title="the audit record">{e(r.topic)}/{r.partition}@{r.offset}</a>'
                   f'<span class="dim"> from input {e(inp.get("topic", "?"))}/{e(inp.get("partition", "?"))}'
                   f'@{e(inp.get("offset", "?"))}</span> {tree_link}</span></li>')
    now_line = {"RUNNING": "running", "DISPATCHED": "dispatched to its node", "COMPLETED": "completed",
                "FAILED": "failed", "CANCELLED": "cancelled"}.get(status)
    if now_line:
        out.append(f'<li class="ev ev-now"><span class="when">now</span><span class="what">{e(status)}</span>'
                   f'<span class="detail">{e(now_line)} (reported by its connector)</span></li>')
    out.append("</ol></section>")

    # the tree
    out.append('<section class="card" id="tree"><h2>Decision tree')
    if selected is not None and records:
        r = records[selected]
        out.append(f' <small>decision {selected + 1} of {len(records)}: {e(r.kind)} · '
                   f'<a href="/ui/tasks/{e(task_id)}/audit/{selected}">audit record {e(r.topic)}/{r.partition}'
                   f'@{r.offset}</a></small></h2>')
        pick = tree.chosen_node(r.kind, r.payload)
        if pick:
            out.append(f'<p class="chosen-note">chosen node: <b class="chosen-node">{e(pick)}</b> '
                       f'<span class="dim">(highlighted in green; the other candidates ranked by score)</span></p>')
        out.append('<div class="tree-wrap">' + tree.svg(task_id, r.kind, r.payload) + "</div>")
        path = (r.payload.get("provenance") or {}).get("path") or []
        if path:
            out.append('<details><summary>decision path as text</summary><ol class="path">'
                       + "".join(f"<li>{e(s)}</li>" for s in path) + "</ol></details>")
    else:
        out.append('</h2><p class="empty">No decision yet: the scheduler has not seen this task.</p>')
    out.append("</section>")
    return "".join(out)


def default_decision(records: list[Any]) -> int | None:
    """The latest scheduling decision (placement, move, pending, unschedulable), else the latest."""
    for n in range(len(records) - 1, -1, -1):
        if records[n].kind in SCHEDULING:
            return n
    return len(records) - 1 if records else None


def audit_record(task_id: str, n: int, record: Any) -> str:
    body = {"kind": record.kind, "position": {"topic": record.topic, "partition": record.partition,
                                              "offset": record.offset}, "payload": record.payload}
    return (f'<section class="card"><h1>Audit record <small>{e(record.topic)}/{record.partition}@{record.offset}'
            f'</small></h1><p><a href="/ui/tasks/{e(task_id)}?d={n}#tree">← task {e(task_id)}</a> · '
            f'<a href="/ui/tasks/{e(task_id)}/audit.json">all of its records as JSON</a></p>'
            f'<pre class="json">{e(json.dumps(body, indent=2, sort_keys=True, default=str))}</pre></section>')


def ids(values: Iterable[str]) -> str:
    return ",".join(values)


# ====================================================================== what-if
def whatif_form(dirs: list[str], root: str, policies: str = "recorded,bestfit", error: str = "") -> str:
    opts = "".join(f'<option value="{e(d)}">{e(d)}</option>' for d in dirs)
    err = f'<p class="error" role="alert">{e(error)}</p>' if error else ""
    none = "" if dirs else f'<p>No recorded log directory under <code>{e(root)}</code> (write one with <code>suanli export --out DIR</code>).</p>'
    return (f'<section class="card"><h1>What-if</h1>{err}{none}'
            f'<form method="post" action="/ui/whatif" class="whatif">'
            f'<label>Log directory <select name="logdir" required>{opts}</select></label> '
            f'<label>Policies <input name="policies" value="{e(policies)}" size="40" '
            f'placeholder="recorded,bestfit,default" required></label> '
            f'<button type="submit">Run</button></form>'
            f'<p class="hint">Root: <code>{e(root)}</code></p></section>')


def whatif_run(run: Any) -> str:
    st = run.status()
    state = st["state"]
    head = (f'<section class="card" id="whatif-run" data-status="/ui/whatif/runs/{e(run.id)}/status" '
            f'data-state="{e(state)}"><h1>What-if run {e(run.id)}</h1>'
            f'<p>{e(run.logdir)} · policies <code>{e(run.policies)}</code></p>'
            f'<p>State: <b id="whatif-state">{e(state)}</b> · <span id="whatif-elapsed">{e(st["elapsed_s"])}</span> s</p>')
    if state == "failed":
        head += f'<pre id="whatif-error">{e(st.get("error", ""))}</pre>'
    if state == "done":
        try:
            names, rows = run.figures()
        except (OSError, ValueError, KeyError, TypeError) as exc:
            names, rows = [], [("figures unreadable", [str(exc)])]
        imgs = "".join(f'<figure><img src="/ui/whatif/runs/{e(run.id)}/files/{e(p)}" alt="{e(p)}">'
                       f'<figcaption>{e(p)}</figcaption></figure>' for p in st["plots"])
        head += f'<div class="plots" style="display:flex;flex-wrap:wrap;gap:1em">{imgs}</div>'
        th = "".join(f"<th>{e(n)}</th>" for n in names)
        trs = "".join(f"<tr><th>{e(k)}</th>" + "".join(f"<td>{e(v)}</td>" for v in vals) + "</tr>"
                      for k, vals in rows)
        head += f'<table class="figures"><thead><tr><th></th>{th}</tr></thead><tbody>{trs}</tbody></table>'
    return head + '<p><a href="/ui/whatif">New run</a></p></section>'
