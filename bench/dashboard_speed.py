"""Dashboard speed (issue #17): the cluster page of N nodes in headless Chromium, and how far
its live placed count lags behind a feed of placements.

    python -m suanli.bench.dashboard_speed [--nodes 5000] [--rate 1000] [--seconds 10] [--json FILE]

What runs: a server process with the API's REST app and the dashboard (``/ui``) over a
read model holding ``--nodes`` synthetic nodes (the openb node list repeated, each copy a
new id with the simulator's region/zone/site), about 40 % of their GPUs allocated. The
read model is fed in that process exactly as the API's log follower feeds it
(``ReadModel.apply``), without Kafka: the figures are the dashboard's (render, stream,
script), not the broker's. Debian's Chromium (``/usr/bin/chromium``, driven by Playwright;
no browser is downloaded) then:

1. loads the cluster page ``--loads`` times in a fresh tab and reads the browser's own
   timing (Navigation Timing, Paint Timing, and a mark the page's script sets in the first
   task after the first frame): time to first byte, DOMContentLoaded, load, first
   contentful paint, painted. The check is ``load`` and ``painted`` <= 1 s.
2. keeps one page open, asks the server to place ``--rate`` tasks a second for
   ``--seconds`` (each a TaskSubmitted and a TaskPlaced; the oldest tasks are released so
   allocation keeps moving), and records in the page every change of the placed count
   (a MutationObserver, ``Date.now()``). The server records when its count reached each
   value (``time.time()``, the same clock). Lag of a displayed value = when the page showed
   it - when the server had it; "behind" = the server's count at that moment - the shown one.

Prints the figures and (``--json``) writes them. Not a test: nothing is asserted.
"""
from __future__ import annotations

import argparse
import bisect
import asyncio
import json
import os
import random
import signal
import socket
import statistics
from collections import deque
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from suanli.deploy.processes import stop_child

CHROMIUM = os.environ.get("SUANLI_CHROMIUM", "/usr/bin/chromium")
CELL = "bench"
TENANT = "bench"
TOKEN = "bench-token-0123456789"


# ====================================================================== the server side
def synthetic_nodes(count: int, cell: str = CELL) -> list[dict[str, Any]]:
    """``count`` NodeRegistered payloads: the openb node list repeated with new ids."""
    from suanli.config import load_settings
    from suanli.connectors.simulated import describe_node
    from suanli.replay.openb import read_nodes

    base = read_nodes(load_settings().openb_dir / "openb_node_list_all_node.csv", cell=cell)
    out = []
    for i in range(count):
        node = dict(base[i % len(base)], node_id=f"bench-node-{i:05d}", cell=cell, registered_at=1)
        out.append(describe_node(node))
    return out


class Feeder:
    """Placements into the read model at a rate (on the server's loop), with the times at
    which the count reached each value."""

    def __init__(self, model: Any, nodes: list[dict[str, Any]], seed: int = 7):
        self.model = model
        self.rng = random.Random(seed)
        self.gpu_nodes = [(n["node_id"], sum(a["count"] for a in n["accelerators"]))
                          for n in nodes if n["accelerators"]]
        self.free: dict[tuple[str, int], int] = {(nid, d): 1000 for nid, g in self.gpu_nodes for d in range(g)}
        self.active: deque[tuple[str, str, int, int]] = deque()   # (task, node, device, milli), oldest first
        self.placed = 0
        self.used = 0                                            # GPU milli allocated
        self.seq = 0
        self.series: list[tuple[float, int]] = []
        self.running: asyncio.Task | None = None
        self.offset = 0

    def _apply(self, role: str, kind: str, payload: dict[str, Any]) -> None:
        self.offset += 1
        self.model.apply(role, kind, payload, f"{CELL}.{role}", 0, self.offset)

    def place_one(self, now_ms: int) -> None:
        for _ in range(20):
            node_id, gpus = self.rng.choice(self.gpu_nodes)
            device = self.rng.randrange(gpus)
            milli = self.rng.choice((250, 500, 1000))
            if self.free[(node_id, device)] >= milli:
                break
        else:
            self.release_one(now_ms)
            return self.place_one(now_ms)
        self.seq += 1
        task_id = f"bench-{self.seq:07d}"
        prov = {"input": {"topic": f"{CELL}.cells", "partition": 0, "offset": self.offset},
                "strategy": {"name": "default", "version": "1.2.0", "config_digest": "bench"},
                "candidates": [{"node_id": node_id, "score": 1.0, "rank": 1}], "filtered": [],
                "path": ["filter: 1 feasible", f"score: default top={node_id}", f"bind {node_id}"],
                "decided_at": now_ms, "matched_rule": None}
        self._apply("cell_log", "TaskSubmitted", {
            "event_id": f"sub-{task_id}", "task_id": task_id, "tenant": TENANT, "cell": CELL, "submitted_at": now_ms,
            "priority": 0, "qos_tier": "SILVER",
            "resources": {"cpu_milli": 1000, "memory_mib": 1024, "gpu_count": 1, "gpu_milli": milli}})
        self._apply("decisions", "TaskPlaced", {
            "event_id": f"placed-{task_id}", "decision_id": f"{CELL}/cells/0/{self.offset}/0", "task_id": task_id,
            "tenant": TENANT, "cell": CELL, "node_id": node_id, "gpu_devices": [device], "gpu_milli": milli,
            "cpu_milli": 1000, "memory_mib": 1024, "provenance": prov})
        self.free[(node_id, device)] -= milli
        self.used += milli
        self.active.append((task_id, node_id, device, milli))
        self.placed += 1

    def release_one(self, now_ms: int) -> None:
        task_id, node_id, device, milli = self.active.popleft()
        self._apply("decisions", "TaskReleased", {
            "event_id": f"rel-{task_id}", "decision_id": f"{CELL}/cells/0/{self.offset}/1", "task_id": task_id,
            "tenant": TENANT, "cell": CELL, "node_id": node_id, "cause": "COMPLETED", "gpu_devices": [device],
            "provenance": {"input": {"topic": f"{CELL}.cells", "partition": 0, "offset": self.offset},
                           "strategy": {"name": "default", "version": "1.2.0", "config_digest": "bench"},
                           "candidates": [], "filtered": [], "path": ["completed", f"release {node_id}"],
                           "decided_at": now_ms, "matched_rule": None}})
        self.free[(node_id, device)] += milli
        self.used -= milli

    def fill(self, share: float) -> None:
        """Allocate about ``share`` of all GPU capacity (before the page is loaded)."""
        total = len(self.free) * 1000
        while self.used < share * total:
            self.place_one(int(time.time() * 1000))

    async def run(self, rate: float, seconds: float, keep_share: float = 0.45) -> None:
        total = len(self.free) * 1000
        started = time.monotonic()
        done = 0
        self.series = [(time.time() * 1000, self.placed)]
        while True:
            elapsed = time.monotonic() - started
            if elapsed >= seconds:
                break
            due = int(rate * elapsed) - done
            now_ms = int(time.time() * 1000)
            for _ in range(due):
                self.place_one(now_ms)
                while len(self.active) > 1 and self.used > keep_share * total:
                    self.release_one(now_ms)
            done += max(due, 0)
            if due > 0:
                self.series.append((time.time() * 1000, self.placed))
            await asyncio.sleep(0.005)


def serve(port: int, n_nodes: int, tokens_file: Path) -> None:
    """The server process: API app + dashboard over a synthetic read model, plus two bench
    routes (POST /bench/feed starts a feed; GET /bench/truth returns its series)."""
    import uvicorn
    from fastapi import FastAPI

    from suanli.api.audit import FollowerAuditSource
    from suanli.api.auth import TokenStore
    from suanli.api.models import LogPosition
    from suanli.api.readmodel import ReadModel
    from suanli.api.rest import create_app
    from suanli.api.service import ApiService
    from suanli.api.ui import Dashboard

    class NoSink:
        async def publish(self, kind: str, payload: dict[str, Any]) -> LogPosition:
            return LogPosition(topic="none", partition=0, offset=0)

    async def main() -> None:
        model = ReadModel()
        ui = Dashboard(model)
        nodes = synthetic_nodes(n_nodes)
        for i, n in enumerate(nodes):
            model.apply("cell_log", "NodeRegistered", n, f"{CELL}.cells", 0, i)
        feeder = Feeder(model, nodes)
        feeder.fill(0.4)
        service = ApiService(model, NoSink(), FollowerAuditSource(model), namespace="bench")
        app: FastAPI = create_app(service, TokenStore({TOKEN: TENANT}))
        ui.mount(app)

        @app.post("/bench/feed", include_in_schema=False)
        async def feed(rate: float = 1000.0, seconds: float = 10.0) -> dict[str, Any]:
            feeder.running = asyncio.create_task(feeder.run(rate, seconds))
            return {"started": True, "placed": feeder.placed}

        @app.get("/bench/truth", include_in_schema=False)
        async def truth() -> dict[str, Any]:
            return {"done": feeder.running is not None and feeder.running.done(), "placed": feeder.placed,
                    "series": feeder.series}

        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                               access_log=False, lifespan="off"))
        loop = asyncio.get_running_loop()

        def stop() -> None:
            ui.close()
            server.should_exit = True

        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop)
        server.install_signal_handlers = lambda: None      # older uvicorn
        print(f"ready {len(nodes)} nodes", flush=True)
        await server.serve()

    asyncio.run(main())


# ====================================================================== the browser side
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


PAINTED_JS = """() => new Promise(resolve => {
  const read = () => {
    const nav = performance.getEntriesByType('navigation')[0];
    const fcp = performance.getEntriesByName('first-contentful-paint')[0];
    const mark = performance.getEntriesByName('suanli:painted')[0];
    resolve({ttfb_ms: nav.responseStart, response_end_ms: nav.responseEnd,
             dom_content_loaded_ms: nav.domContentLoadedEventEnd, load_ms: nav.loadEventEnd,
             first_contentful_paint_ms: fcp ? fcp.startTime : null, painted_ms: mark ? mark.startTime : null,
             bytes: nav.decodedBodySize, nodes: document.querySelectorAll('#zones .n').length,
             elements: document.getElementsByTagName('*').length});
  };
  if (performance.getEntriesByName('suanli:painted').length) read(); else setTimeout(read, 500);
})"""

# Every change of the shown count (MutationObserver), and a sample of it every 25 ms.
WATCH_JS = """() => {
  const el = document.querySelector('[data-count="placed"]');
  window.__seen = [[Date.now(), +el.textContent]];
  window.__samples = [];
  new MutationObserver(() => window.__seen.push([Date.now(), +el.textContent]))
    .observe(el, {childList: true, characterData: true, subtree: true});
  window.__sampler = setInterval(() => window.__samples.push([Date.now(), +el.textContent]), 25);
}"""


def measure(nodes: int, rate: float, seconds: float, loads: int, screenshot: Path | None) -> dict[str, Any]:
    import httpx
    from playwright.sync_api import sync_playwright

    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory() as tmp:
        log = open(Path(tmp) / "server.log", "w+")
        proc = subprocess.Popen([sys.executable, "-m", "suanli.bench.dashboard_speed", "--serve", "--port", str(port),
                                 "--nodes", str(nodes)], stdout=subprocess.PIPE, stderr=log, text=True)
        try:
            line = proc.stdout.readline()
            if not line.startswith("ready"):
                log.seek(0)
                raise RuntimeError(f"bench server did not start: {line}{log.read()}")
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
                context = browser.new_context(viewport={"width": 1600, "height": 1000})
                context.add_cookies([{"name": "suanli_ui_token", "value": TOKEN, "url": f"{url}/ui/"}])
                page_url = f"{url}/ui/?cell={CELL}"
                warm = context.new_page()                    # first load: Python imports, caches
                warm.goto(page_url, wait_until="load")
                warm.close()
                renders = []
                for _ in range(loads):
                    page = context.new_page()
                    page.goto(page_url, wait_until="load")
                    renders.append(page.evaluate(PAINTED_JS))
                    page.close()
                page = context.new_page()
                errors: list[str] = []
                page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
                page.goto(page_url, wait_until="load")
                page.wait_for_function("() => window.suanli && window.suanli.connected")
                if screenshot is not None:
                    page.screenshot(path=str(screenshot), full_page=False)
                page.evaluate(WATCH_JS)
                httpx.post(f"{url}/bench/feed", params={"rate": rate, "seconds": seconds}, timeout=10)
                deadline = time.monotonic() + seconds + 30
                truth = None
                while time.monotonic() < deadline:
                    time.sleep(0.5)
                    truth = httpx.get(f"{url}/bench/truth", timeout=10).json()
                    if truth["done"]:
                        break
                final = truth["placed"]
                try:
                    page.wait_for_function("n => +document.querySelector('[data-count=\"placed\"]').textContent >= n",
                                           arg=final, timeout=10_000)
                except Exception:     # noqa: BLE001 - reported below as not caught up
                    pass
                time.sleep(0.3)
                page.evaluate("clearInterval(window.__sampler)")
                seen = page.evaluate("window.__seen")
                samples = page.evaluate("window.__samples")
                stream = page.evaluate("({messages: window.suanli.messages, nodeUpdates: window.suanli.nodeUpdates})")
                browser.close()
        finally:
            stop_child(proc)
            log.close()
    return _figures(nodes, rate, seconds, renders, truth, seen, samples, stream, errors)


def _figures(nodes: int, rate: float, seconds: float, renders: list[dict[str, Any]], truth: dict[str, Any],
             seen: list[list[float]], samples: list[list[float]], stream: dict[str, Any],
             errors: list[str]) -> dict[str, Any]:
    def med(key: str) -> float | None:
        values = [r[key] for r in renders if r.get(key) is not None]
        return round(statistics.median(values), 1) if values else None

    def worst(key: str) -> float | None:
        values = [r[key] for r in renders if r.get(key) is not None]
        return round(max(values), 1) if values else None

    series = truth["series"]
    start_count, final = series[0][1], truth["placed"]
    feed_s = (series[-1][0] - series[0][0]) / 1000 if len(series) > 1 else 0.0
    times = [t for t, _v in series]
    counts = [v for _t, v in series]

    def true_count(t: float) -> int:
        """The server's count at time ``t``."""
        return counts[max(0, bisect.bisect_right(times, t) - 1)]

    def reached(v: float) -> float | None:
        """When the server's count first reached ``v``."""
        i = bisect.bisect_left(counts, v)
        return times[i] if i < len(times) else None

    # Delay of each displayed value: shown at t, the server had it since reached(v).
    lags = [t - r for t, v in seen[1:] if (r := reached(v)) is not None]
    # During the feed, every 25 ms: placements the server had that the page did not show yet,
    # and for how long the page had been out of date (0 when it showed the server's count).
    feed_end = series[-1][0]
    behind, stale = [], []
    for t, v in samples:
        if t < series[0][0] or t > feed_end:
            continue
        behind.append(max(0, true_count(t) - v))
        first_missing = reached(v + 1)
        stale.append(max(0.0, t - first_missing) if first_missing is not None and first_missing <= t else 0.0)
    caught = [t for t, v in seen if v >= final]
    catch_up = (caught[0] - series[-1][0]) if caught else None

    def pct(xs: list[float], q: float) -> float | None:
        if not xs:
            return None
        xs = sorted(xs)
        return round(xs[min(len(xs) - 1, int(q * len(xs)))], 1)

    return {
        "nodes": nodes, "nodes_drawn": renders[0]["nodes"] if renders else None,
        "dom_elements": renders[0]["elements"] if renders else None,
        "page_bytes": renders[0]["bytes"] if renders else None, "loads": len(renders),
        "render": {k: {"median": med(k), "max": worst(k)} for k in
                   ("ttfb_ms", "dom_content_loaded_ms", "load_ms", "first_contentful_paint_ms", "painted_ms")},
        "live": {"rate_asked": rate, "seconds": seconds,
                 "placements": final - start_count,
                 "rate_achieved": round((final - start_count) / feed_s, 1) if feed_s else None,
                 "page_updates": len(seen) - 1, "stream_messages": stream["messages"],
                 "node_updates_applied": stream["nodeUpdates"],
                 "update_delay_ms": {"p50": pct(lags, 0.5), "p95": pct(lags, 0.95), "max": pct(lags, 1.0)},
                 "samples": len(behind),
                 "behind_placements": {"p50": pct(behind, 0.5), "p95": pct(behind, 0.95), "max": pct(behind, 1.0)},
                 "stale_ms": {"p50": pct(stale, 0.5), "p95": pct(stale, 0.95), "max": pct(stale, 1.0)},
                 "caught_up_ms_after_feed_end": None if catch_up is None else round(catch_up, 1),
                 "final_shown": seen[-1][1] if seen else None, "final_true": final},
        "console_errors": errors,
        "load_average": [round(x, 2) for x in os.getloadavg()], "cpus": os.cpu_count(),
    }


def report(f: dict[str, Any]) -> str:
    r, lv = f["render"], f["live"]
    lines = [f"cluster page, {f['nodes_drawn']} nodes drawn ({f['dom_elements']} elements, "
             f"{f['page_bytes'] / 1e6:.2f} MB HTML), "
             f"{f['loads']} loads in headless Chromium (median / max):"]
    for key, label in (("ttfb_ms", "first byte"), ("dom_content_loaded_ms", "DOMContentLoaded"),
                       ("load_ms", "load"), ("first_contentful_paint_ms", "first contentful paint"),
                       ("painted_ms", "painted (first frame done)")):
        lines.append(f"  {label:<28} {r[key]['median']:>8} ms / {r[key]['max']} ms")
    lines.append(f"live count: asked {lv['rate_asked']:g}/s for {lv['seconds']:g}s, achieved {lv['rate_achieved']}/s "
                 f"({lv['placements']} placements); the page's count changed {lv['page_updates']} times "
                 f"({lv['stream_messages']} stream messages, {lv['node_updates_applied']} node updates applied)")
    d, b, st = lv["update_delay_ms"], lv["behind_placements"], lv["stale_ms"]
    lines.append(f"  a new count reaches the page after       p50 {d['p50']} ms, p95 {d['p95']} ms, max {d['max']} ms")
    lines.append(f"  sampled every 25 ms during the feed ({lv['samples']} samples):")
    lines.append(f"    placements not yet shown               p50 {b['p50']}, p95 {b['p95']}, max {b['max']}")
    lines.append(f"    shown count out of date for            p50 {st['p50']} ms, p95 {st['p95']} ms, max {st['max']} ms")
    lines.append(f"  shown the final count {lv['caught_up_ms_after_feed_end']} ms after the feed ended "
                 f"({lv['final_shown']} of {lv['final_true']})")
    lines.append(f"console errors: {len(f['console_errors'])}; load average during the run: {f['load_average']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m suanli.bench.dashboard_speed", description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=5000)
    p.add_argument("--rate", type=float, default=1000.0, help="placements per second during the live part")
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--loads", type=int, default=5, help="page loads to time")
    p.add_argument("--json", type=Path, help="write the figures here")
    p.add_argument("--screenshot", type=Path, help="a PNG of the page before the feed")
    p.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.serve:
        serve(args.port, args.nodes, Path())
        return 0
    figures = measure(args.nodes, args.rate, args.seconds, args.loads, args.screenshot)
    print(report(figures))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
