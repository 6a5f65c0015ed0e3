"""API abuse: a flood of garbage and oversized requests against ``suanli api serve`` while a
well-behaved client keeps making valid ones (issue 18).

One run: a fresh namespace on the running stack, ``suanli api serve`` in a subprocess with
its default limits (1 MiB bodies, 200 requests a second per tenant), and the Go load
generator of ``bench/flood`` (built into the cache on first use) offering ``--rate``
garbage requests a second for ``--duration`` seconds from ``--workers`` connections. The
garbage: random bytes without a token, JSON that is no task with made-up tokens, bodies
declared 2 MiB long, and malformed JSON with a real token of another tenant. The valid
client (20 a second: task lists and small submissions) is timed.

Printed and written (``--json``): the garbage sent and the achieved rate, answers by status
(and transport errors: the server closes a connection after a 413 without reading the
body), the 5xx counts, the valid requests' p50/p99/max, the API's resident memory
sampled every 0.5 s (before, highest, after), and whether it still answered afterwards.

    python -m suanli.bench.api_abuse --rate 10000 --duration 30 --json bench/api-abuse.json
"""
from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import subprocess
import threading
import uuid
from pathlib import Path
from typing import Any

import httpx

from suanli.bench.api_process import bench_api
from suanli.config import Settings, load_settings
from suanli.deploy.processes import rss_mib
from suanli.errors import StackError

REPO = Path(__file__).resolve().parents[1]
FLOOD_SRC = REPO / "bench" / "flood"
GO_FALLBACK = "/usr/local/go/bin/go"


def build_flood(settings: Settings) -> Path:
    """The Go load generator, built into the cache (rebuilt when its source is newer)."""
    out = settings.home / "cache" / "flood" / "flood"
    src = FLOOD_SRC / "main.go"
    if out.exists() and out.stat().st_mtime >= src.stat().st_mtime:
        return out
    go = shutil.which("go") or GO_FALLBACK
    out.parent.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([go, "build", "-o", str(out), "."], cwd=FLOOD_SRC, capture_output=True, text=True,
                          timeout=600, env={**os.environ, "GOFLAGS": "-mod=mod"})
    if done.returncode != 0:
        raise StackError(f"building bench/flood failed: {done.stderr.strip()[-500:]}")
    return out


def run_once(rate: float, duration: float, workers: int = 64, valid_rate: float = 20.0,
             log_dir: Path | None = None) -> dict[str, Any]:
    """One flood against a fresh API (see the module); the figures as a dict."""
    settings = load_settings(namespace=f"b{uuid.uuid4().hex[:10]}")
    flood = build_flood(settings)
    valid_token, garbage_token = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
    log_dir = log_dir or settings.home / "logs"
    with bench_api(settings, log_dir, {valid_token: "valid", garbage_token: "noisy"}) as served:
        api, url, log_path = served.proc, served.url, served.log_path
        before = rss_mib(api.pid)
        samples: list[float] = []
        done = threading.Event()

        def sample() -> None:
            while not done.wait(0.5):
                rss = rss_mib(api.pid)
                if rss is not None:
                    samples.append(rss)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            out = subprocess.run([str(flood), "-url", url, "-valid-token", valid_token, "-garbage-token",
                                  garbage_token, "-rate", str(rate), "-duration", f"{duration}s", "-workers",
                                  str(workers), "-valid-rate", str(valid_rate)],
                                 capture_output=True, text=True, timeout=duration + 120)
        finally:
            done.set()
            sampler.join()
        if out.returncode != 0:
            raise StackError(f"bench/flood failed: {out.stderr.strip()[-500:]}")
        figures = json.loads(out.stdout)
        alive = api.poll() is None and httpx.get(f"{url}/healthz", timeout=5).status_code == 200
        figures["api"] = {"alive_after": alive, "rss_mib_before": round(before or 0, 1),
                          "rss_mib_max": round(max(samples, default=0), 1),
                          "rss_mib_after": round(rss_mib(api.pid) or 0, 1), "log": str(log_path)}
        return figures


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m suanli.bench.api_abuse", description=__doc__.split("\n\n")[0])
    p.add_argument("--rate", type=float, default=10000, help="garbage requests offered per second (default 10000)")
    p.add_argument("--duration", type=float, default=30, help="seconds of flood (default 30)")
    p.add_argument("--workers", type=int, default=64, help="garbage connections (default 64)")
    p.add_argument("--json", metavar="FILE", help="also write the figures to FILE")
    args = p.parse_args(argv)
    figures = run_once(args.rate, args.duration, args.workers)
    figures["command"] = ("python -m suanli.bench.api_abuse --rate "
                          f"{args.rate:g} --duration {args.duration:g} --workers {args.workers}")
    text = json.dumps(figures, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
