"""The Kubernetes adapter's pure mapping (connectors/kubernetes.py): quantities, node ->
NodeRegistered, pod -> TaskSubmitted, a Suanli task -> a bound pod. No API server here: the
end-to-end run against a real one is tests/deploy/test_kubernetes_plane.py."""
from __future__ import annotations

import hashlib
import re
from decimal import Decimal

import pytest

from suanli.connectors import kubernetes as k
from suanli.errors import ConnectorError
from suanli.schemas.models import validate_event


@pytest.mark.parametrize("text, want", [
    ("500m", Decimal("0.5")), ("2", Decimal(2)), ("1.5", Decimal("1.5")), ("1Gi", Decimal(2 ** 30)),
    ("512Mi", Decimal(2 ** 29)), ("1G", Decimal(10 ** 9)), ("1e3", Decimal(1000)), ("100k", Decimal(100_000)),
    (3, Decimal(3)), ("250u", Decimal("0.00025")),
])
def test_quantities_parse_as_the_api_writes_them(text, want):
    assert k.parse_quantity(text) == want


@pytest.mark.parametrize("bad", ["", "1.2.3", "5 Gi", "Gi", "1Gb", "abc"])
def test_a_malformed_quantity_is_refused_by_name(bad):
    with pytest.raises(ConnectorError, match="quantity"):
        k.parse_quantity(bad)


def test_requests_round_up_and_capacities_round_down():
    assert k.cpu_milli("1.0005") == 1001
    assert k.cpu_milli("250m") == 250
    assert k.memory_mib("1500Ki") == 2                    # 1.46 MiB asked: 2 MiB reserved
    assert k.memory_mib("1500Ki", round_up=False) == 1    # 1.46 MiB on a node: 1 MiB promised
    assert k.memory_mib("64Gi", round_up=False) == 65536


def test_go_durations():
    assert k.go_duration_ms("1h30m") == 5_400_000
    assert k.go_duration_ms("250ms") == 250
    assert k.go_duration_ms("1.5s") == 1500
    with pytest.raises(ConnectorError):
        k.go_duration_ms("5 minutes")


def node(name="gpu-1", **extra_alloc):
    return {"metadata": {"name": name, "resourceVersion": "42",
                         "labels": {"nvidia.com/gpu.product": "A100", "nvidia.com/gpu.memory": "40960",
                                    "topology.kubernetes.io/zone": "z1", "topology.kubernetes.io/region": "r1",
                                    "kubernetes.io/arch": "amd64"}},
            "status": {"capacity": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8", "pods": "110"},
                       "allocatable": {"cpu": "63500m", "memory": "500Gi", "nvidia.com/gpu": "8", "pods": "110",
                                       "ephemeral-storage": "100Gi", "hugepages-2Mi": "0", **extra_alloc},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def test_a_node_registers_its_allocatable_and_devices():
    n = node(**{"xilinx.com/fpga-xilinx_u250_gen3x16": "2", "example.com/widget": "3"})
    reg = k.node_registered(n, cell="k8s", connector="k8s", at=1000)
    assert validate_event("NodeRegistered", reg) is None
    assert (reg["node_id"], reg["cpu_milli"], reg["memory_mib"]) == ("gpu-1", 63500, 500 * 1024)
    assert (reg["zone"], reg["region"], reg["arch"], reg["connector"]) == ("z1", "r1", "x86_64", "k8s")
    devices = {(a["kind"], a["model"], a["count"], a["memory_mib"]) for a in reg["accelerators"]}
    assert devices == {("GPU", "A100", 8, 40960), ("FPGA", "xilinx_u250_gen3x16", 2, 0),
                       ("OTHER", "example.com/widget", 3, 0)}
    assert reg["event_id"] == "k8s/gpu-1/registered/42"
    assert reg["labels"]["nvidia.com/gpu.product"] == "A100"


def test_standard_resources_are_not_devices():
    for name in ("cpu", "memory", "pods", "ephemeral-storage", "hugepages-1Gi", "kubernetes.io/batch-cpu",
                 "node.kubernetes.io/foo"):
        assert k.device_of(name) is None, name
    assert k.device_of("huawei.com/Ascend910").kind == "NPU"
    assert k.device_of("google.com/tpu").kind == "ASIC"


def pod(name="train", **spec_extra):
    return {"metadata": {"name": name, "namespace": "ml", "uid": "u-1", "creationTimestamp": "2026-12-01T12:00:00Z",
                         "labels": {"team": "vision"}, "annotations": {}},
            "spec": {"schedulerName": "suanli",
                     "containers": [{"name": "a", "resources": {"requests": {"cpu": "1500m", "memory": "2Gi"},
                                                                "limits": {"nvidia.com/gpu": "2"}}},
                                    {"name": "b", "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}}}],
                     "initContainers": [{"name": "init", "resources": {"requests": {"cpu": "4", "memory": "1Gi"}}}],
                     **spec_extra},
            "status": {"phase": "Pending"}}


def test_a_pod_becomes_a_task_with_its_effective_requests():
    p = pod(nodeSelector={"nvidia.com/gpu.product": "H100"}, priority=100)
    task = k.pod_task(p, cell="k8s")
    assert validate_event("TaskSubmitted", task) is None
    assert task["task_id"] == "k8s-u-1" and task["event_id"] == "k8s/u-1/submitted"
    r = task["resources"]
    # cpu: the init container's 4 cores exceed the containers' 2; memory: containers' 2.5 GiB
    assert (r["cpu_milli"], r["memory_mib"]) == (4000, 2560)
    assert (r["gpu_count"], r["gpu_milli"], r["gpu_models"]) == (2, 1000, ["H100"])
    assert (task["tenant"], task["qos_tier"], task["priority"]) == ("ml", "SILVER", 100)
    assert task["labels"] == {"team": "vision", "k8s.namespace": "ml", "k8s.pod": "train"}
    assert task["submitted_at"] == 1796126400000


def test_gpu_models_from_affinity_or_annotation():
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In", "values": ["V100", "A100"]}]},
        {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In", "values": ["T4"]}]}]}}}
    assert k.pod_task(pod(affinity=affinity), cell="c")["resources"]["gpu_models"] == ["A100", "T4", "V100"]
    p = pod()
    p["metadata"]["annotations"] = {"suanli.io/gpu-models": "L4, A10", "suanli.io/qos": "gold",
                                    "suanli.io/tenant": "vision", "suanli.io/run-duration": "2m"}
    task = k.pod_task(p, cell="c")
    assert task["resources"]["gpu_models"] == ["A10", "L4"]
    assert (task["qos_tier"], task["tenant"], task["duration_estimate_ms"]) == ("GOLD", "vision", 120_000)


def test_a_cpu_pod_asks_no_gpu_and_other_devices_become_accelerator_requests():
    p = pod()
    p["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1", "memory": "1Gi", "intel.com/fpga": "1"},
                                               "limits": {"intel.com/fpga": "1"}}
    r = k.pod_task(p, cell="c")["resources"]
    assert (r["gpu_count"], r["gpu_milli"], r["gpu_models"]) == (0, 0, [])
    assert r["accelerators"] == [{"kind": "FPGA", "model": "", "count": 1}]


def test_a_bad_pod_is_refused_with_its_reason():
    p = pod()
    p["metadata"]["annotations"] = {"suanli.io/qos": "platinum"}
    with pytest.raises(ConnectorError, match="platinum"):
        k.pod_task(p, cell="c")


def test_which_pods_suanli_places():
    assert k.wants_suanli(pod())
    assert not k.wants_suanli(pod(schedulerName="default-scheduler"))
    assert not k.wants_suanli(pod(nodeName="n1"))
    deleting = pod()
    deleting["metadata"]["deletionTimestamp"] = "2026-12-01T12:00:00Z"
    assert not k.wants_suanli(deleting)
    ours = pod()
    ours["metadata"]["labels"]["app.kubernetes.io/managed-by"] = "suanli"
    assert not k.wants_suanli(ours)


def command(**extra):
    return {"dispatch_id": "d-1", "task_id": "Train_42/x", "tenant": "vision team", "cell": "k8s", "node_id": "gpu-1",
            "connector": "k8s", "gpu_devices": [0, 1], "gpu_milli": 1000, "cpu_milli": 2000, "memory_mib": 4096,
            "command": ["python", "train.py"], "env": {"EPOCHS": "3"}, "duration_estimate_ms": 60000, **extra}


def test_a_suanli_task_becomes_a_pod_bound_to_its_node():
    p = k.dispatch_pod(command(), namespace="jobs", image="busybox:1.36")
    assert p["spec"]["nodeName"] == "gpu-1" and p["metadata"]["namespace"] == "jobs"
    assert p["metadata"]["name"] == f"suanli-train-42-x-{hashlib.sha256(b'Train_42/x').hexdigest()[:8]}"
    c = p["spec"]["containers"][0]
    assert c["resources"] == {"requests": {"cpu": "2000m", "memory": "4096Mi", "nvidia.com/gpu": "2"},
                              "limits": {"nvidia.com/gpu": "2"}}
    assert c["command"] == ["python", "train.py"]
    assert {"name": "EPOCHS", "value": "3"} in c["env"]
    assert p["metadata"]["annotations"]["suanli.io/run-duration"] == "60000ms"
    assert p["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "suanli", "suanli.io/tenant": "vision-team"}
    assert k.task_id_of(p) == "Train_42/x"
    assert not k.wants_suanli({**p, "spec": {**p["spec"], "nodeName": None}})   # never submitted back


def test_a_gpu_share_cannot_be_a_pod():
    with pytest.raises(ConnectorError, match="share"):
        k.dispatch_pod(command(gpu_devices=[0], gpu_milli=500), namespace="d", image="i")


def test_long_task_ids_make_valid_unique_pod_names():
    a, b = k.pod_name_for("x" * 100 + "a"), k.pod_name_for("x" * 100 + "b")
    assert a != b and len(a) <= 63 and len(b) <= 63


def test_task_ids_that_rewrite_alike_make_distinct_pod_names():
    assert k.pod_name_for("train-42") == "suanli-train-42"          # already a valid name: kept
    names = [k.pod_name_for(t) for t in ("train-42", "Train-42", "train_42", "train~42", "x~standby", "x-standby",
                                         "~~~", "___")]
    assert len(set(names)) == len(names)
    assert all(re.fullmatch(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?", n) and len(n) <= 63 for n in names)


def test_exit_codes_of_terminated_containers():
    status = {"status": {"containerStatuses": [{"state": {"terminated": {"exitCode": 0}}},
                                               {"state": {"terminated": {"exitCode": 3}}}]}}
    assert k.terminated_exit_code(status) == 3
    assert k.terminated_exit_code({"status": {}}) is None


def test_kubeconfig_with_a_token_and_a_relative_ca(tmp_path):
    (tmp_path / "ca.crt").write_text("x")
    (tmp_path / "config").write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: k\n  cluster:\n"
        "    server: https://127.0.0.1:6443/\n    certificate-authority: ca.crt\nusers:\n- name: u\n  user:\n"
        "    token: t0k\ncontexts:\n- name: c\n  context: {cluster: k, user: u}\n")
    cfg = k.KubeConfig.load(tmp_path / "config")
    assert (cfg.server, cfg.token, cfg.verify) == ("https://127.0.0.1:6443", "t0k", str(tmp_path / "ca.crt"))
    (tmp_path / "bad").write_text("current-context: nope\n")
    with pytest.raises(ConnectorError, match="kubeconfig"):
        k.KubeConfig.load(tmp_path / "bad")


def test_heartbeats_only_for_ready_nodes_and_the_health_file(tmp_path):
    health = tmp_path / "healthy"
    adapter = k.KubernetesCluster(config=k.KubeConfig("https://127.0.0.1:1", "t", False), cell="c",
                                  health_file=health)
    ready, not_ready = node("a"), node("b")
    not_ready["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    assert adapter._node_seen(ready, 1) is not None and adapter._node_seen(not_ready, 1) is not None
    assert adapter._node_seen(ready, 2) is None            # unchanged: no second registration
    beats = adapter.heartbeats(5000, 7)
    assert [p["node_id"] for _kind, p in beats] == ["a"]
    assert beats[0][1]["event_id"] == "k8s/a/hb/7" and health.exists()
    assert adapter.metrics(5000, 7) == []
    assert adapter.admit({"node_id": "zz", "task_id": "t"}).startswith("node zz is not a node")
    assert adapter.admit({"node_id": "a", "task_id": "t", "gpu_devices": [0], "gpu_milli": 500}).startswith("a GPU share")
    assert adapter.admit({"node_id": "a", "task_id": "t", "gpu_devices": [0], "gpu_milli": 1000}) is None


def test_pod_task_ids_are_told_from_suanlis_own():
    assert k.is_pod_task("k8s-0f8fad5b-d9cb-469f-a165-70867728950e")
    assert not k.is_pod_task("k8s-my-training-job")
    assert not k.is_pod_task("train-42")
