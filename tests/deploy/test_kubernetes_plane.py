"""Suanli as the scheduler of a real Kubernetes API server (issue 19, part 3), end to end.

The loopback control plane of deploy/kubernetes.py (etcd, kube-apiserver built from the Go
module proxy, kwok; the test fails, never skips, when the binaries are missing), 200 kwok nodes
with 8 GPUs each of three models, a Suanli plane of the test's own (intake and scheduler workers
in a fresh namespace) and the Kubernetes connector as a subprocess. 1,000 pods with
``schedulerName: suanli`` are created through the API; the harness (bench/k8s_binding.py) waits
on a watch until every one is bound, then checks from fresh LISTs of the API server that each
GPU pod sits on a node of a model it accepts, that no node's bound pods request more than its
allocatable (cpu, memory, nvidia.com/gpu, pods), and that every pod's phase came back to Suanli
as its task's status. A task submitted to Suanli directly becomes a pod bound to a node of the
model it asked for, and completes. The pods/s bound and the API server's own create/bind rate
are printed.
"""
from __future__ import annotations

import json
import uuid

import pytest

from suanli.bench.k8s_binding import KubeBench, run_with_plane
from suanli.config import load_settings

pytestmark = pytest.mark.stack

PODS, NODES = 1000, 200


def test_a_thousand_pods_on_two_hundred_kwok_nodes_are_bound_by_suanli(apiserver, capsys):
    settings = load_settings(namespace=f"t{uuid.uuid4().hex[:10]}", partitions=2)
    bench = KubeBench(settings, nodes=NODES, pods=PODS, log=lambda _m: None)
    out = run_with_plane(bench)
    with capsys.disabled():
        print("\nk8s binding:", json.dumps({k: out[k] for k in ("suanli", "api_server")}), flush=True)

    checks = out["checks"]
    assert checks["pods_listed"] == PODS
    assert checks["unbound"] == [], checks["unbound"][:5]
    assert checks["on_foreign_nodes"] == []
    assert checks["binding_annotations_missing"] == [], checks["binding_annotations_missing"][:5]
    assert checks["wrong_model"] == [], checks["wrong_model"][:5]
    assert checks["overcommitted"] == [], checks["overcommitted"][:5]
    assert 0 < checks["max_use_of_allocatable"]["nvidia.com/gpu"] <= 1
    assert checks["gpus_requested"] > PODS // 2           # the mix really asks for GPUs
    statuses = out["suanli_statuses"]
    assert statuses.get("RUNNING", 0) + statuses.get("COMPLETED", 0) == PODS, statuses
    # kwok ended the pods with a run duration: Succeeded in Kubernetes, COMPLETED in Suanli
    assert statuses.get("COMPLETED", 0) == out["pods_with_run_duration"] == out["phases_then"]["Succeeded"], out
    direct = out["direct_task"]
    assert direct["status"] == "COMPLETED", direct
    assert direct["pod_node"] == direct["suanli_node"] and direct["pod_node_model"] == "T4", direct
    assert direct["pod_phase"] == "Succeeded" and direct["pod_command"][0] == "python", direct
    assert out["suanli"]["pods_per_s"] > 0 and out["api_server"]["bind_per_s"] > 0
