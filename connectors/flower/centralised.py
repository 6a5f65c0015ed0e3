#!/usr/bin/env python3
"""The centralised baseline: the federated app's model trained in ONE process on the pooled
training data (the union of all partitions), evaluated on the same held-out test set.

Run with the Flower venv's python (it needs scikit-learn; it does not need Flower)::

    centralised.py [--epochs 10] [--batch-size 32] [--lr 0.5]

Prints one JSON line per epoch, ``{"epoch", "accuracy", "loss", "wall_ms"}``, where
``wall_ms`` is the time since the start of training (data loading excluded), so that
"wall time to target accuracy" can be compared with the federated report's rounds.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "app"))    # the fldigits package

from fldigits.task import evaluate, init_params, load_data, train  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.5)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    data = load_data()
    params = init_params()
    t0 = time.perf_counter()
    for epoch in range(1, args.epochs + 1):
        params = train(params, data.x_train, data.y_train, epochs=1, batch_size=args.batch_size,
                       lr=args.lr, seed=args.seed + epoch)
        loss, acc = evaluate(params, data.x_test, data.y_test)
        print(json.dumps({"epoch": epoch, "accuracy": round(acc, 4), "loss": round(loss, 4),
                          "wall_ms": round((time.perf_counter() - t0) * 1000, 1)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
