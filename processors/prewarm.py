"""The prewarm planner: fetch model weights to edge sites before the tasks that need them (#20).

Pure: the core calls :func:`on_submitted` for each submission and :func:`plan` on a
``CellTick`` once every ``period_ms`` of the cell clock (never per event), while the
policy's ``prewarm.enabled`` is on. Its book lives in ``CellState.prewarm`` (plain JSON, in
the snapshot):

* ``demand``: site -> model family -> ``[value, t]``, an exponentially decayed count of the
  submissions of tasks with a model of that family at that site (``value x 2^-(now - t) /
  half_life`` now). A model's family is its ``model_arch`` up to ``@`` (``llama@3`` is a
  version of ``llama``): popularity follows the family, while the tasks ask for its newest
  version. A task's site is its ``user-site`` label, else ``data-site``, else ``*``;
* ``models``: model_arch -> ``[artifact_uri, size_mib]`` as last submitted; ``latest``:
  family -> the version whose first task came last (the newest);
* ``since``: the cell clock of the first counted submission (the estimators' exposure);
* ``versions``: family -> ``[versions seen, first seen at]``: how often families get a new
  version (the expected life of a version, below);
* ``credit``: site -> MiB of origin bandwidth the site may still spend (a token bucket:
  ``bandwidth_mib_s x elapsed`` added each run (one period's worth at the first), capped at
  ``burst_periods`` periods' worth, so a 70 GiB model waits until enough has been saved up);
* ``slack``: the waste ledger, MiB (below);
* ``next_at``, ``last_at``: the cell clock of the next and of the last run.

**Will a prefetch be used?** A prefetch of the newest version of family ``f`` to site ``S``
saves a load from the origin only if a task at ``S`` asks for that version before the
family's next version replaces it (tasks ask for the newest; a superseded version is dead
weight), and within ``horizon_ms`` (what sits unused longer than that counts as waste).
With ``lam`` the site's arrival rate for the family and ``L`` the expected life of a
version (exponential, rate ``mu = 1 / L``), ``P(used) = lam / (lam + mu) x (1 - e^-(lam +
mu) horizon)``. Both are estimated from the stream:

* ``lam``: the site's decayed count ``c`` over its decayed exposure ``E = H / ln 2 x (1 -
  2^-(now - since) / H)`` (``H = half_life_ms``: popularity is long-lived, versions share it),
  shrunk towards the cell's mean per site ``m`` (sites agree on what is popular, not
  exactly) as a gamma posterior mean with ``prior_arrivals`` (``k``) pseudo-arrivals:
  ``(c + k) / (E + k / m)``: a site with little history gets the cell's rate, one with
  much gets its own;
* ``L``: the families' exposure since each was first seen over the new versions seen, each
  family weighted by its demand (a rarely asked-for family skips versions nobody asked for
  and sees the others late), with ``version_life_ms`` as one pseudo-observation.

A task of that model waiting in the queue at ``S`` makes it a certainty (``P = 1``).

**Which ones: expected hits within a waste budget.** A prefetch used saves one origin load
(a hit); one never used wastes its MiB. The planner keeps the expected wasted share of
what it prefetches at most ``max_waste``: a candidate with ``P >= 1 - max_waste`` is
always worth it and adds ``(P - (1 - max_waste)) x size`` to the ledger (``slack``); one
below takes ``((1 - max_waste) - P) x size`` out and is prefetched only while the ledger
covers it, the most expected hits per MiB of ledger first (small models with a fair
chance before large ones with the same chance). Nothing under ``min_use`` is fetched.

**A run.** Candidates: for each site (sorted) of the prewarmed tiers (``tiers``, default
edge only) with at least one READY node with a cache, the newest version of every family
seen that no node of the site holds (nor loads), with its ``P``. They are taken in the
order above (ties by site and name); each goes to the site's READY node with the most free
GPU milli (where the next task is most likely to land), then the most free cache, then the
smallest id, that can take it:

* evicting superseded versions first (a version whose family has a newer one), then the
  least recently used of what the site is not expected to use more (``keep``: never a
  load still in flight, nor the newest version of a family the site wants at least as
  much);
* with the node's prewarmed-but-unused MiB (of newest versions: a superseded one goes
  first) kept within ``cache_share`` of its capacity;
* within the site's bandwidth credit (one that does not fit the credit now stops the site's
  run: the credit is saved for it; one larger than the whole bucket is skipped);

at most ``max_per_run`` per site. The node's cache takes it at once as *loading*, ready when
its load from the origin ends (``ready_at = now + load_ms(size, "origin")``): a task placed
meanwhile waits for the rest, which is what the simulator does too. Each becomes a
:class:`~.model.PrewarmCommand` with its reason; the runner sends it to the node's
connector (a command, not a decision).

Reservations are not read yet (their tasks' models are not known before they claim).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from . import model as m
from .args import arg
from .model_cache import PREWARM, Entry, cache_of, model_of
from .model_loading import load_ms

SITE_LABELS = ("user-site", "data-site")
CELL_WIDE = "*"


@dataclass(frozen=True, slots=True)
class PrewarmArgs:
    """The ``prewarm`` key of a cell's policy (defaults here)."""
    enabled: bool = arg(False, "run the prewarm planner (and keep its arrival history)")
    period_ms: int = arg(30_000, "on the cell clock, the planner runs this often (on a CellTick)", ge=1000)
    bandwidth_mib_s: float = arg(80.0, "origin bandwidth a site's prewarms may use on average, MiB/s", ge=0)
    burst_periods: int = arg(60, "unused bandwidth carries over for up to this many periods", ge=1)
    cache_share: float = arg(0.7, "share of a node's cache that prewarmed models nobody used yet may fill",
                             gt=0, le=1)
    half_life_ms: int = arg(21_600_000, "half-life of the decayed arrival counts (a family's popularity)",
                            ge=1000)
    prior_arrivals: float = arg(2.0, "pseudo-arrivals at the cell's mean rate per site a site's own rate "
                                "starts from", gt=0)
    version_life_ms: int = arg(10_800_000, "prior of a version's expected life (one pseudo-observation; the "
                               "versions seen refine it)", ge=1000)
    horizon_ms: int = arg(7_200_000, "a prefetch counts as used only if a task uses it within this long",
                          ge=1000)
    max_waste: float = arg(0.1, "expected share of the prefetched MiB no task uses, at most", ge=0, lt=1)
    min_use: float = arg(0.3, "chance of being used for a prefetch at all", ge=0, le=1)
    max_per_run: int = arg(4, "prewarms per site per run at most", ge=1)
    tiers: tuple[str, ...] = arg(("edge",), "node tiers whose sites are prewarmed")


def site_of(task: m.Task) -> str:
    """The site a task asks to be near (``user-site``, else ``data-site``), else ``*``."""
    for key in SITE_LABELS:
        v = task.labels.get(key)
        if v:
            return v
    return CELL_WIDE


def _decayed(v: list, now: int, half_life: int) -> float:
    value, t = v
    return value * math.pow(0.5, (now - t) / half_life) if now > t else value


def family(model_arch: str) -> str:
    """``llama@3`` -> ``llama``: versions of one model share its demand."""
    return model_arch.split("@", 1)[0]


def on_submitted(s: Any, task: m.Task, args: PrewarmArgs) -> None:
    """Count a submission in the site's decayed demand for its model's family (only while
    enabled; a task without a model costs one attribute read)."""
    model = model_of(task)
    if model is None or not args.enabled:
        return
    book = s.prewarm
    book.setdefault("since", s.now)
    site = site_of(task)
    fam = family(model.model_arch)
    per = book.setdefault("demand", {}).setdefault(site, {})
    v = per.get(fam)
    per[fam] = [(_decayed(v, s.now, args.half_life_ms) if v else 0.0) + 1.0, s.now]
    models = book.setdefault("models", {})
    if model.model_arch not in models:           # a version first seen now is the family's newest
        book.setdefault("latest", {})[fam] = model.model_arch
        seen = book.setdefault("versions", {})
        if fam in seen:
            seen[fam][0] += 1
        else:
            seen[fam] = [1, s.now]
    models[model.model_arch] = [model.artifact_uri, int(model.size_mib)]


def version_life_ms(s: Any, args: PrewarmArgs) -> float:
    """The expected life of a version: the families' exposure since first seen over the new
    versions seen, each family weighted by its demand in the cell (a rarely asked-for family
    skips versions nobody asked for, and sees the others late: its count says little), plus
    the prior as one pseudo-observation of a family of average demand."""
    book = s.prewarm
    seen = book.get("versions", {})
    if not seen:
        return float(args.version_life_ms)
    demand = book.get("demand", {})
    weight: dict[str, float] = {}
    for site in sorted(demand):
        for fam, v in sorted(demand[site].items()):
            weight[fam] = weight.get(fam, 0.0) + _decayed(v, s.now, args.half_life_ms)
    mean = sum(weight.values()) / max(1, len(seen))
    exposure = new = 0.0
    for fam in sorted(seen):
        n, t = seen[fam]
        w = weight.get(fam, 0.0)
        exposure += w * max(0, s.now - t)
        new += w * (n - 1)
    return (exposure + mean * args.version_life_ms) / (new + mean) if mean > 0 else float(args.version_life_ms)


def rates(s: Any, args: PrewarmArgs, sites: list[str]) -> dict[str, dict[str, float]]:
    """site -> family -> estimated arrivals per ms (see the module docstring)."""
    now, hl = s.now, args.half_life_ms
    demand = s.prewarm.get("demand", {})
    since = int(s.prewarm.get("since", now))
    exposure = hl / math.log(2) * (1.0 - math.pow(0.5, max(0, now - since) / hl))
    if exposure <= 0:
        return {site: {} for site in sites}
    counts: dict[str, dict[str, float]] = {}
    cell: dict[str, float] = {}
    for site in sorted(demand):
        for fam in sorted(demand[site]):
            c = _decayed(demand[site][fam], now, hl)
            cell[fam] = cell.get(fam, 0.0) + c
            counts.setdefault(site, {})[fam] = c
    n = max(1, len(sites))
    k = args.prior_arrivals
    out: dict[str, dict[str, float]] = {}
    for site in sites:
        mine = counts.get(site, {})
        row = {}
        for fam in sorted(cell):
            mean = cell[fam] / n / exposure            # the cell's rate per site
            row[fam] = (mine.get(fam, 0.0) + k) / (exposure + k / mean)
        out[site] = row
    return out


def chances(s: Any, args: PrewarmArgs, sites: list[str]) -> dict[str, dict[str, float]]:
    """site -> model (the newest version of each family) -> the chance that a task at the
    site asks for it before its family's next version (1 for a model a task waits for)."""
    life = version_life_ms(s, args)
    latest = s.prewarm.get("latest", {})
    out: dict[str, dict[str, float]] = {}
    for site, row in rates(s, args, sites).items():
        out[site] = {latest.get(fam, fam): _p_used(lam, life, args.horizon_ms) for fam, lam in row.items()}
    for item in s.queue:                   # tasks waiting now: each is one arrival for sure
        t = s.tasks[item[-1]]
        if t.status == "PENDING":
            model = model_of(t.task)
            site = site_of(t.task)
            if model is not None and site in out:
                out[site][model.model_arch] = 1.0
    return out


def _p_used(lam: float, life: float, horizon: float) -> float:
    """The chance that the first arrival (rate ``lam``) comes before the version's end
    (exponential, mean ``life``) and within ``horizon``."""
    mu = 1.0 / life
    return lam / (lam + mu) * (1.0 - math.exp(-(lam + mu) * horizon))


def _prune(s: Any, args: PrewarmArgs) -> None:
    """Forget counts decayed below 0.001 (keeps the book, and the snapshot, bounded)."""
    demand = s.prewarm.get("demand", {})
    for site in list(demand):
        for arch in list(demand[site]):
            if _decayed(demand[site][arch], s.now, args.half_life_ms) < 1e-3:
                del demand[site][arch]
        if not demand[site]:
            del demand[site]


def plan(s: Any, args: PrewarmArgs, pos: tuple[str, int, int]) -> list[m.PrewarmCommand]:
    """One run of the planner at ``s.now`` (see the module docstring): updates the caches and
    the book, returns the PrewarmCommands. The caller runs it on a CellTick when
    ``s.now >= s.prewarm["next_at"]``."""
    book = s.prewarm
    now = s.now
    last = int(book.get("last_at", now - args.period_ms))     # a first run has earned one period
    book["last_at"] = now
    book["next_at"] = now + args.period_ms
    _prune(s, args)
    models = book.get("models", {})
    # the prewarmed sites and their READY nodes with a cache
    by_site: dict[str, list[int]] = {}
    for row, nid in enumerate(s.node_ids):
        node = s.nodes[nid]
        if node.tier in args.tiers and node.site and node.model_cache_mib > 0:
            by_site.setdefault(node.site, []).append(row)
    sites = sorted(by_site)
    if not sites or not models:
        return []
    cap = args.bandwidth_mib_s * args.period_ms / 1000.0 * args.burst_periods
    credit = book.setdefault("credit", {})
    for site in sites:
        c0 = float(credit.get(site, 0.0))
        credit[site] = min(cap, c0 + args.bandwidth_mib_s * max(0, now - last) / 1000.0)
    p_use = chances(s, args, sites)
    latest = book.get("latest", {})
    newest = set(latest.values())
    thr = 1.0 - args.max_waste
    # candidates: (group, order, site, arch, P); group 0 pays into the ledger, 1 draws on it
    cands = []
    for site in sites:
        at_site: set[str] = set()
        for r in by_site[site]:
            c = s.model_caches.get(s.node_ids[r])
            if c is not None:
                at_site.update(c.entries)
        for arch, p in p_use[site].items():
            if p < args.min_use or arch in at_site or arch not in models:
                continue
            size = models[arch][1]
            if p >= thr:
                cands.append((0, -p, size, site, arch, p))
            else:
                cands.append((1, -p / ((thr - p) * max(1, size)), size, site, arch, p))
    cands.sort()
    slack = float(book.get("slack", 0.0))
    out: list[m.PrewarmCommand] = []
    done: dict[str, int] = {}
    saving: set[str] = set()
    t, p_, o = pos
    for group, _, size, site, arch, p in cands:
        if site in saving or done.get(site, 0) >= args.max_per_run:
            continue
        rows = [r for r in by_site[site] if s.ready[r]]
        if not rows:
            continue
        if size > cap:
            continue                           # never fits the bucket: not for prewarming
        if group == 1 and (thr - p) * size > slack:
            continue                           # the ledger does not cover its expected waste
        if size > credit[site]:
            saving.add(site)                   # save the credit up for it
            continue
        want = p_use[site]
        keep = (lambda a, e, p=p, want=want: e.ready_at > now or (a in newest and want.get(a, 0.0) >= p))
        order = (lambda a, e: (a in newest, e.last_used, a))
        ranked = sorted(rows, key=lambda r: (-int(s.gpu_free_total[r]), -cache_of(s, s.node_ids[r]).free_mib,
                                             s.node_ids[r]))
        for r in ranked:
            nid = s.node_ids[r]
            c = cache_of(s, nid)
            unused = sum(e.size_mib for name, e in c.entries.items()
                         if e.via == PREWARM and not e.used and name in newest)
            if unused + size > args.cache_share * c.capacity_mib:
                continue
            ready = now + load_ms(size, "origin")
            evicted = c.insert(arch, size, now, ready, PREWARM, keep, order)
            if evicted is None:
                continue
            credit[site] -= size
            slack += (p - thr) * size
            done[site] = done.get(site, 0) + 1
            uri = models[arch][0]
            why = (f"prewarm {arch} ({size} MiB) to {nid} at site {site}: a task there asks for it before its "
                   f"next version with chance ~{p:.2f}, none of the site's nodes holds it; ready in "
                   f"~{(ready - now) / 1000:.0f} s (origin)")
            if evicted:
                why += "; evicts " + ", ".join(ev.model_arch for ev in evicted) + \
                    " (superseded versions first, then least recently used)"
            out.append(m.PrewarmCommand(event_id=f"{s.cell}/{t}/{p_}/{o}/prewarm/{len(out)}", node_id=nid,
                                        cell=s.cell, model_arch=arch, artifact_uri=uri, size_mib=size, at=now,
                                        reason=why))
            break
    book["slack"] = slack
    return out


__all__ = ["PrewarmArgs", "on_submitted", "plan", "rates", "chances", "version_life_ms", "site_of", "family",
           "Entry"]
