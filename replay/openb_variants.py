"""Held-out stress variants of the openb default task list, to check a strategy beyond the
five workloads it was developed on.

The trace's own variants (``cpu050``, ``gpushare40``, ...) were "sampled from the default
one, emphasizing certain types of workloads"; the exact sampling is not published, so
these are ours, made the same way in spirit, each from ``openb_pod_list_default.csv`` with a
seeded RNG (``random.Random("<kind><level>/<seed>")``):

* ``gpushare<P>``: CPU-only tasks kept; the GPU tasks redrawn (same number) from the
  default list's shared-GPU and other GPU tasks so that shared tasks carry P % of the GPU
  demand (default: 28 %; the trace's gpushare40: 40 %).
* ``multigpu<P>``: every task kept, multi-GPU tasks drawn and appended until they carry
  P % of the GPU demand (the trace's multigpu20 is built that way: 8,152 + 172 tasks).
* ``cpu<R>``: GPU tasks kept; CPU-only tasks redrawn so that their CPU demand is R % of
  the GPU tasks' CPU demand (default: 29 %; the trace's cpu050: 10 %).
* ``gpuspec<P>``: P % of the GPU tasks (a seeded sample) get a ``gpu_spec``, drawn from the
  specs of the trace's gpuspec10 (kept in ``SPECS``, by frequency).

Rows keep the trace's columns; names are ``openb-pod-NNNN`` in list order, as in the trace.
``python -m suanli.replay.openb_variants OUT_DIR`` writes the standard set.
"""
from __future__ import annotations

import argparse
import csv
import random
from pathlib import Path
from typing import Any

from suanli.errors import ReplayError

# gpuspec10's GPU-model requirements and how often each occurs there
SPECS: tuple[tuple[str, int], ...] = (
    ("T4", 355), ("G2", 120), ("P100", 100), ("V100M16|V100M32", 55),
    ("P100|V100M16|V100M32", 26), ("G2|P100|T4|V100M16|V100M32", 20))

STANDARD = ("gpushare60", "gpushare80", "multigpu30", "multigpu50", "cpu50", "cpu100",
            "gpuspec20", "gpuspec33")
KINDS = ("gpushare", "multigpu", "cpu", "gpuspec")


def _gpu(r: dict[str, str]) -> int:
    return int(r["num_gpu"]) * int(r["gpu_milli"])


def _is_shared(r: dict[str, str]) -> bool:
    return int(r["num_gpu"]) == 1 and int(r["gpu_milli"]) < 1000


def _cpu_only(r: dict[str, str]) -> bool:
    return int(r["num_gpu"]) == 0


def parse_name(name: str) -> tuple[str, int]:
    """``"gpushare60"`` -> ``("gpushare", 60)``."""
    for k in KINDS:
        if name.startswith(k) and name[len(k):].isdigit():
            return k, int(name[len(k):])
    raise ReplayError(f"unknown variant {name!r}: use <kind><level> with kind one of {', '.join(KINDS)}")


def make_variant(rows: list[dict[str, str]], name: str, seed: int = 0) -> list[dict[str, str]]:
    """The variant ``name`` of the default task list ``rows`` (see the module doc)."""
    kind, level = parse_name(name)
    if not 0 <= level <= (1000 if kind == "cpu" else 100):
        raise ReplayError(f"variant {name!r}: level {level} out of range")
    rnd = random.Random(f"{name}/{seed}")
    cpu = [r for r in rows if _cpu_only(r)]
    gpu = [r for r in rows if not _cpu_only(r)]
    if kind == "gpushare":
        shared = [r for r in gpu if _is_shared(r)]
        other = [r for r in gpu if not _is_shared(r)]
        # expected GPU demand per drawn task of each pool -> the share of shared draws
        ms = sum(map(_gpu, shared)) / len(shared)
        mo = sum(map(_gpu, other)) / len(other)
        p = level / 100
        q = (p * mo) / (ms * (1 - p) + p * mo) if p < 1 else 1.0
        out = cpu + [rnd.choice(shared) if rnd.random() < q else rnd.choice(other) for _ in gpu]
    elif kind == "multigpu":
        multi = [r for r in gpu if int(r["num_gpu"]) > 1]
        out = list(rows)
        total = sum(map(_gpu, out))
        m = sum(_gpu(r) for r in out if int(r["num_gpu"]) > 1)
        while m < level / 100 * total:
            r = rnd.choice(multi)
            out.append(r)
            m += _gpu(r)
            total += _gpu(r)
    elif kind == "cpu":
        target = level / 100 * sum(int(r["cpu_milli"]) for r in gpu)
        drawn: list[dict[str, str]] = []
        have = 0
        while have < target:
            r = rnd.choice(cpu)
            drawn.append(r)
            have += int(r["cpu_milli"])
        out = gpu + drawn
        rnd.shuffle(out)
    else:  # gpuspec
        specs = [s for s, _ in SPECS]
        weights = [w for _, w in SPECS]
        pick = set(rnd.sample(range(len(gpu)), round(level / 100 * len(gpu))))
        gi = 0
        out = []
        for r in rows:
            if not _cpu_only(r):
                if gi in pick:
                    r = {**r, "gpu_spec": rnd.choices(specs, weights)[0]}
                gi += 1
            out.append(r)
    return [{**r, "name": f"openb-pod-{i:04d}"} for i, r in enumerate(out)]


def write_variants(default_csv: str | Path, out_dir: str | Path, names: tuple[str, ...] = STANDARD,
                   seed: int = 0) -> list[Path]:
    with open(default_csv, newline="") as f:
        reader = csv.DictReader(f)
        fields = list(reader.fieldnames or [])
        rows = list(reader)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in names:
        p = out / f"openb_pod_list_{name}.csv"
        with open(p, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=fields)
            w.writeheader()
            w.writerows(make_variant(rows, name, seed))
        paths.append(p)
    return paths


def main(argv: list[str] | None = None) -> int:
    from suanli.config import load_settings
    ap = argparse.ArgumentParser(prog="python -m suanli.replay.openb_variants", description=__doc__.split("\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--default", default=str(load_settings().openb_dir / "openb_pod_list_default.csv"))
    ap.add_argument("--variants", default=",".join(STANDARD))
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    for p in write_variants(a.default, a.out_dir, tuple(v for v in a.variants.split(",") if v), a.seed):
        print(p)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
