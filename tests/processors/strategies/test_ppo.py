"""The ``ppo`` strategy (processors/strategies/ppo.py, plugins/ppo.py, ppo_policy.py) on the
production core: it chooses among default's candidates, a policy with no learned term
chooses exactly what default chooses, decisions are deterministic and name the policy."""
from __future__ import annotations

import numpy as np
import pytest

from suanli.config import load_settings
from suanli.errors import StrategyConfigError
from suanli.processors import CellState, decide
from suanli.processors import model as m
from suanli.processors import ppo_policy
from suanli.processors.plugins.ppo import acting
from suanli.processors.strategies import _CACHE
from suanli.replay import timed
from suanli.replay.fgd_protocol import policy_config

DATA = load_settings().openb_dir


@pytest.fixture(scope="module")
def workload(tmp_path_factory):
    d = tmp_path_factory.mktemp("openb")
    nodes = (DATA / "openb_node_list_gpu_node.csv").read_text().splitlines()
    pods = (DATA / "openb_pod_list_default.csv").read_text().splitlines()
    (d / "n.csv").write_text("\n".join(nodes[:1] + nodes[1::25]) + "\n")
    (d / "p.csv").write_text("\n".join(pods[:1] + pods[1:1200:3]) + "\n")
    return timed.build(d / "n.csv", d / "p.csv", load=50)


def _placements(w, strategy: str, config: dict | None = None) -> list[tuple[str, str, tuple[str, ...]]]:
    """(task, node, path) of every TaskPlaced, feeding arrivals only (no departures: the
    cluster fills up, so choices matter)."""
    _CACHE.clear()
    state, off, out = CellState("openb"), 0, []
    for node in w.cluster.nodes:
        state, _ = decide(state, m.from_avro(m.NodeRegistered, node), ("t", 0, off))
        off += 1
    cfg = {**policy_config(strategy, 7, w.typical), **(config or {})}
    state, _ = decide(state, m.PolicyChanged.of("openb", strategy, cfg), ("t", 0, off))
    for _at, arrival, i in w.events:
        if not arrival:
            continue
        off += 1
        state, outs = decide(state, m.from_avro(m.TaskSubmitted, w.tasks[i]), ("t", 0, off))
        out += [(o.task_id, o.node_id, o.provenance.path) for o in outs if isinstance(o, m.TaskPlaced)]
    return out


def _policy_file(tmp_path, learned: float) -> str:
    base = ppo_policy.initial(hidden=8, prior=4.0, seed=1, version="test")
    arrays = {k: np.array(v) for k, v in base.arrays.items()}
    arrays["w2"] = arrays["w2"] * 0 + learned
    path = tmp_path / f"p{learned}.npz"
    ppo_policy.Policy(arrays, 4.0, "test").save(path)
    return str(path)


def test_a_policy_without_a_learned_term_places_every_task_where_default_does(workload, tmp_path):
    ref = _placements(workload, "default")
    got = _placements(workload, "ppo", {"policy_file": _policy_file(tmp_path, 0.0)})
    assert len(ref) > 100
    assert [(t, n) for t, n, _ in got] == [(t, n) for t, n, _ in ref]


def test_a_learned_term_changes_choices_and_every_decision_names_the_policy(workload, tmp_path):
    ref = _placements(workload, "default")
    path = _policy_file(tmp_path, 3.0)          # hidden units push hard against the rank prior
    got = _placements(workload, "ppo", {"policy_file": path})
    again = _placements(workload, "ppo", {"policy_file": path})
    assert got == again                          # deterministic: same inputs, same decisions
    assert [(t, n) for t, n, _ in got] != [(t, n) for t, n, _ in ref]
    digest = ppo_policy.Policy.load(path).digest
    scored = [p for _t, _n, p in got if any(line.startswith("score:") for line in p)]   # not preemptions
    assert len(scored) > 100
    assert all(any(line.startswith(f"score: PPO[test sha256:{digest[:16]}]") for line in p) for p in scored)


def test_an_agent_chooses_inside_acting_and_only_there(workload, tmp_path):
    seen = []

    def last(obs):
        seen.append(obs)
        return obs.rows.size - 1                 # the worst of default's candidates

    path = _policy_file(tmp_path, 0.0)
    with acting(last):
        got = _placements(workload, "ppo", {"policy_file": path})
    assert seen and all(o.feats.shape == (o.rows.size, len(ppo_policy.FEATURES)) for o in seen)
    assert {(o.task_id, o.rows[-1]) for o in seen[:5]}
    ref = _placements(workload, "default")
    assert [(t, n) for t, n, _ in got] != [(t, n) for t, n, _ in ref]
    assert [(t, n) for t, n, _ in _placements(workload, "ppo", {"policy_file": path})] == [(t, n) for t, n, _ in ref]


def test_a_bad_policy_file_is_a_config_error_that_names_it(tmp_path):
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a policy")
    with pytest.raises(StrategyConfigError, match="bad.npz"):
        ppo_policy.Policy.load(bad)
    p = ppo_policy.initial(version="v")
    p.save(tmp_path / "ok.npz")
    q = ppo_policy.Policy.load(tmp_path / "ok.npz")
    assert q.digest == p.digest and q.version == "v"


@pytest.fixture()
def sandboxed():
    from suanli.processors import strategies as S
    from suanli.processors.strategies import ppo
    if "ppo-sandboxed" not in S.MODULES:
        S.register(ppo.Sandboxed, external="suanli.processors.strategies.ppo:Sandboxed")
    yield "ppo-sandboxed"


def _gpu_cell(strategy: str, config: dict):
    from kit import Cell
    c = Cell(strategy, config)
    for i, (gpus, cpu) in enumerate([(8, 96000), (4, 64000), (8, 96000), (2, 32000), (1, 16000)]):
        c.node(f"n{i}", cpu=cpu, gpus=gpus)
    return c


def test_ppo_runs_in_the_sandbox_as_in_process_and_falls_back_to_default_when_it_fails(sandboxed, tmp_path):
    path = _policy_file(tmp_path, 3.0)
    cells = {name: _gpu_cell(name, {"policy_file": path, "sandbox": {"cpu_seconds": 5, "wall_seconds": 30}}
                             if name == sandboxed else {"policy_file": path})
             for name in ("ppo", sandboxed)}
    for i in range(4):
        for c in cells.values():
            c.task(f"t{i}", cpu=4000, gpus=1, milli=1000 if i % 2 else 500)
    inproc, boxed = cells["ppo"], cells[sandboxed]
    assert [boxed.node_of(f"t{i}") for i in range(4)] == [inproc.node_of(f"t{i}") for i in range(4)]
    assert boxed.placed("t0")["provenance"]["strategy"]["name"] == sandboxed
    # a policy file the subprocess cannot read: the cell's fallback decides, and says why
    broken = _gpu_cell(sandboxed, {"policy_file": str(tmp_path / "missing.npz"),
                                   "sandbox": {"cpu_seconds": 5, "wall_seconds": 30}})
    broken.task("t", cpu=4000, gpus=1, milli=1000)
    prov = broken.placed("t")["provenance"]
    assert prov["strategy"]["name"] == "default"
    assert prov["matched_rule"].startswith(f"fallback: {sandboxed} failed in the sandbox (strategy crashed")
