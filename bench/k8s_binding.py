"""Suanli as a Kubernetes scheduler: pods bound per second, against the API server's own rate.

``python -m suanli.bench.k8s_binding [--pods 1000] [--nodes 200] [--json bench/k8s-binding.json]``
(with the stack up, and the Kubernetes binaries built by ``.ci/setup.d/80-kubernetes.sh``).

It starts (or finds) the loopback Kubernetes control plane (``deploy/kubernetes.py``: etcd,
kube-apiserver, kwok), creates ``--nodes`` kwok nodes with 8 GPUs each of three models (A100,
V100, T4, in turn), starts a Suanli plane of its own (intake and scheduler workers in a fresh
namespace) and the Kubernetes connector (``python -m suanli.connectors.kubernetes``) for those
nodes, waits until Suanli has registered them, then creates ``--pods`` pods with
``schedulerName: suanli`` (a fixed mix: a quarter CPU-only, the rest 1, 2 or 4 GPUs, of one
model, of two, or of any) as fast as the API server takes them, and waits, on a watch, until
every one is bound. The figures:

* ``suanli.pods_per_s``: pods bound per second, from the first pod created to the last bound;
  ``suanli.bind_window_s`` the time from the first binding to the last;
* ``api_server.create_per_s`` / ``bind_per_s`` / ``create_and_bind_per_s``: the same API server,
  same client, same concurrency, creating pods and POSTing their bindings itself, with no
  scheduler in between (what a scheduler could reach at most on this machine);
* the checks of the acceptance test: every pod bound, the GPU model and count each asked for
  honoured, no node over-committed (requests of the non-terminated pods bound to each node,
  from a fresh LIST, against its allocatable), every pod's phase come back to Suanli as its task's
  status.

The harness (:class:`KubeBench`) is also what ``tests/deploy/test_kubernetes_plane.py`` runs.
It measures and reports; the test asserts.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import secrets
import signal
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from suanli.config import Settings, load_settings, to_env
from suanli.connectors.kubernetes import (GPU_MEMORY_LABEL, GPU_PRODUCT_LABEL, KubeClient, KubeConfig,
                                          pod_requests, task_id_of)
from suanli.deploy import kubernetes as kube
from suanli.deploy.processes import ServiceProcess
from suanli.errors import StackError

MODELS = (("A100", 40960), ("V100", 32768), ("T4", 16384))
GPUS_PER_NODE = 8
CONCURRENCY = 16            # requests in flight: the harness's pod creations, and the direct baseline's
RUN_LABEL = "suanli.io/bench-run"


def node_manifest(name: str, run: str, model: str, memory_mib: int) -> dict[str, Any]:
    """A kwok node: 32 CPUs, 256 GiB, 8 GPUs of ``model``, 110 pods; annotated for kwok."""
    capacity = {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": str(GPUS_PER_NODE), "pods": "110"}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": {kube.KWOK_NODE_ANNOTATION: "fake"},
                         "labels": {RUN_LABEL: run, "type": "kwok", "kubernetes.io/arch": "amd64",
                                    "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                    GPU_PRODUCT_LABEL: model, GPU_MEMORY_LABEL: str(memory_mib)}},
            "spec": {},
            "status": {"capacity": capacity, "allocatable": capacity,
                       "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux", "kubeletVersion": "fake"}}}


def pod_mix(count: int, namespace: str, scheduler: str, seed: int = 7) -> list[dict[str, Any]]:
    """``count`` pods: 25 % CPU-only; the rest 1 (60 %), 2 (30 %) or 4 (10 %) GPUs, accepting
    A100 only (30 %), V100 only (20 %), T4 only (20 %), A100 or V100 by node affinity (15 %), or
    any model (15 %); 10 % carry ``suanli.io/run-duration: 5s`` (kwok completes them)."""
    rng = random.Random(seed)
    pods = []
    for i in range(count):
        requests: dict[str, str] = {"cpu": f"{rng.choice((250, 500, 1000, 2000))}m",
                                    "memory": f"{rng.choice((256, 512, 1024, 4096))}Mi"}
        limits: dict[str, str] = {}
        spec: dict[str, Any] = {"schedulerName": scheduler, "restartPolicy": "Never",
                                "terminationGracePeriodSeconds": 0}
        annotations: dict[str, str] = {}
        if rng.random() >= 0.25:
            gpus = rng.choices((1, 2, 4), weights=(60, 30, 10))[0]
            limits["nvidia.com/gpu"] = str(gpus)
            which = rng.choices(("A100", "V100", "T4", "A100|V100", "any"), weights=(30, 20, 20, 15, 15))[0]
            if which == "A100|V100":
                spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [
                        {"key": GPU_PRODUCT_LABEL, "operator": "In", "values": ["A100", "V100"]}]}]}}}
            elif which != "any":
                spec["nodeSelector"] = {GPU_PRODUCT_LABEL: which}
        if rng.random() < 0.10:
            annotations["suanli.io/run-duration"] = "5s"
        spec["containers"] = [{"name": "main", "image": "busybox:1.36",
                               "resources": {"requests": requests, **({"limits": limits} if limits else {})}}]
        pods.append({"apiVersion": "v1", "kind": "Pod",
                     "metadata": {"name": f"p-{i:05d}", "namespace": namespace, "annotations": annotations,
                                  "labels": {"bench": "k8s-binding"}},
                     "spec": spec})
    return pods


def accepted_models(pod: dict[str, Any]) -> set[str] | None:
    """The GPU models a pod of :func:`pod_mix` accepts (None: any)."""
    spec = pod["spec"]
    if GPU_PRODUCT_LABEL in (spec.get("nodeSelector") or {}):
        return {spec["nodeSelector"][GPU_PRODUCT_LABEL]}
    terms = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
             .get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or []
    values = {v for t in terms for e in t.get("matchExpressions") or [] if e.get("key") == GPU_PRODUCT_LABEL
              for v in e.get("values") or []}
    return values or None


def overcommitted(nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> tuple[list[str], dict[str, Any]]:
    """Nodes whose bound, non-terminated pods request more than their allocatable (cpu, memory,
    nvidia.com/gpu, pod count): ``(problems, summary)``. The API server's view: both lists are
    fresh LISTs."""
    used: dict[str, dict[str, Decimal]] = defaultdict(lambda: defaultdict(Decimal))
    for pod in pods:
        node = pod["spec"].get("nodeName")
        if not node or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        for resource, amount in pod_requests(pod).items():
            used[node][resource] += amount
        used[node]["pods"] += 1
    from suanli.connectors.kubernetes import parse_quantity

    problems, peak = [], {"cpu": 0.0, "memory": 0.0, "nvidia.com/gpu": 0.0, "pods": 0.0}
    for node in nodes:
        name, alloc = node["metadata"]["name"], node["status"]["allocatable"]
        for resource in peak:
            have = parse_quantity(alloc.get(resource, 0))
            want = used[name].get(resource, Decimal(0))
            if have > 0:
                peak[resource] = max(peak[resource], float(want / have))
            if want > have:
                problems.append(f"{name}: {resource} requested {want} > allocatable {have}")
    return problems, {"max_use_of_allocatable": {k: round(v, 3) for k, v in peak.items()},
                      "nodes_with_pods": sum(1 for n in nodes if used[n["metadata"]["name"]]["pods"] > 0)}


@dataclass
class KubeBench:
    """One run: a Kubernetes cell of kwok nodes, a Suanli plane of its own, the connector."""

    settings: Settings                      # the Suanli plane's (its own namespace)
    nodes: int = 200
    pods: int = 1000
    run: str = field(default_factory=lambda: secrets.token_hex(3))
    # True: the pods exist before the connector starts (Suanli's own rate on a backlog, not
    # bounded by how fast this harness creates pods on the same two CPUs)
    backlog: bool = False
    log: Any = print
    figures: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.cell = f"k8s-{self.run}"
        self.pod_ns = f"bench-{self.run}"
        self.direct_ns = f"direct-{self.run}"
        self.node_names = [f"kwok-{self.run}-{i:03d}" for i in range(self.nodes)]
        self.services: list[tuple[ServiceProcess, list[str]]] = []
        self.view: Any = None
        self._watcher: asyncio.Task | None = None
        self.bound_at: dict[str, float] = {}
        self.bound_to: dict[str, str] = {}

    # -- the Kubernetes side ---------------------------------------------------------------------
    def client(self) -> KubeClient:
        a = kube.access(self.settings)
        return KubeClient(KubeConfig(a.server, a.token, str(a.ca_file)), max_connections=CONCURRENCY * 2)

    async def make_cluster(self, http: KubeClient) -> None:
        """The two namespaces and the kwok nodes; waits until kwok has made every node Ready."""
        for ns in (self.pod_ns, self.direct_ns):
            r = await http.request("POST", "/api/v1/namespaces", json={"metadata": {"name": ns}})
            if r.status_code not in (201, 409):
                raise StackError(f"creating namespace {ns}: HTTP {r.status_code}: {r.text}")
        manifests = [node_manifest(name, self.run, *MODELS[i % len(MODELS)]) for i, name in enumerate(self.node_names)]
        await _post_all(http, "/api/v1/nodes", manifests)
        selector = {"labelSelector": f"{RUN_LABEL}={self.run}"}
        deadline = time.monotonic() + 120
        while True:     # kwok's node-initialize stage: Ready (a condition, polled at a short interval)
            items, _ = await http.list_all("/api/v1/nodes", selector)
            ready = sum(1 for n in items if any(c["type"] == "Ready" and c["status"] == "True"
                                                 for c in n["status"].get("conditions") or []))
            if ready == self.nodes:
                return
            if time.monotonic() > deadline:
                raise StackError(f"only {ready} of {self.nodes} kwok nodes Ready after 120 s (is kwok running?)")
            await asyncio.sleep(0.2)

    async def cleanup(self, http: KubeClient) -> None:
        """Delete the run's pods (at once) and nodes; the namespaces stay (no namespace controller runs)."""
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0}
        for ns in (self.pod_ns, self.direct_ns, "default"):
            await http.request("DELETE", f"/api/v1/namespaces/{ns}/pods", json=body,
                               params={"labelSelector": "bench=k8s-binding"} if ns == "default" else None)
        await http.request("DELETE", "/api/v1/nodes", params={"labelSelector": f"{RUN_LABEL}={self.run}"}, json=body)

    # -- the Suanli side ---------------------------------------------------------------------------
    def start_plane(self) -> None:
        """Topics, the intake and scheduler workers, and the Kubernetes connector (subprocesses)."""
        from suanli.deploy.plane import worker_processes
        from suanli.streams.kafka_io import ensure_topics
        from suanli.streams.topics import core_topics

        s = self.settings
        asyncio.run(ensure_topics(s.bootstrap_servers, core_topics(s.partitions, s.namespace, connectors=("k8s",))))
        env = to_env(s)
        workers = worker_processes(s)
        marker = f"suanli-k8s-bench={s.namespace}"
        a = kube.access(s)
        connector = (ServiceProcess("k8s", s.home / "run" / f"{s.namespace}-k8s.pid",
                                    s.home / "logs" / f"{s.namespace}-k8s.log", marker),
                     [sys.executable, "-X", marker, "-m", "suanli.connectors.kubernetes", "--kubeconfig",
                      str(a.kubeconfig), "--cell", self.cell, "--namespace", self.pod_ns,
                      "--pod-namespace", self.pod_ns, "--node-selector", f"{RUN_LABEL}={self.run}",
                      "--log-level", "WARNING"])
        self._connector, self._env = connector, env
        for service, argv in (workers["intake"], workers["scheduler"], *(() if self.backlog else (connector,))):
            service.start(argv, env=env)
            self.services.append((service, argv))

    def start_connector(self) -> None:
        """The connector, when :meth:`start_plane` left it out (``backlog``)."""
        service, argv = self._connector
        service.start(argv, env=self._env)
        self.services.append((service, argv))

    def stop_plane(self) -> None:
        for service, _argv in reversed(self.services):
            service.stop()
        self.services.clear()

    def check_alive(self) -> None:
        for service, _argv in self.services:
            if service.pid() is None:
                raise StackError(f"{service.name} exited; last lines of {service.log_file}:\n{service.log_tail()}")

    async def follow_suanli(self) -> None:
        """Fold the plane's cell log, decisions and dead letters into a LifecycleView (background)."""
        from suanli.projections.lifecycle import LifecycleView
        from suanli.schemas.codec import Codec
        from suanli.schemas.registry import RegistryClient
        from suanli.streams.kafka_io import EventConsumer
        from suanli.streams.topics import TopicNames

        names = TopicNames(self.settings.namespace)
        self.view = LifecycleView()
        with RegistryClient(self.settings.registry_url) as registry:
            async with EventConsumer(self.settings.bootstrap_servers, Codec(registry),
                                     [names.cell_log, names.decisions, names.dead_letters]) as consumer:
                async for batch in consumer.batches(timeout_ms=250):
                    for r in batch:
                        if r.kind is not None and (r.kind == "DeadLetter" or r.payload.get("cell") == self.cell):
                            self.view.apply(r.kind, r.payload)

    async def until(self, what: str, condition: Any, timeout: float) -> None:
        """Wait until ``condition()`` holds (checked every 100 ms), the plane alive; StackError after ``timeout``."""
        deadline = time.monotonic() + timeout
        while not condition():
            self.check_alive()
            if self._watcher is not None and self._watcher.done():
                self._watcher.result()
            if time.monotonic() > deadline:
                raise StackError(f"timed out after {timeout:.0f} s waiting for {what}")
            await asyncio.sleep(0.1)

    def registered(self) -> int:
        return sum(1 for (cell, _n) in self.view.nodes if cell == self.cell) if self.view is not None else 0

    # -- the run -------------------------------------------------------------------------------------
    async def watch_bindings(self, http: KubeClient, version: str) -> None:
        """Record when each pod of the run's namespace is first seen bound, and where."""
        path = f"/api/v1/namespaces/{self.pod_ns}/pods"
        while True:
            async for event in http.watch(path, version):
                obj = event["object"]
                version = obj["metadata"].get("resourceVersion", version)
                node = (obj.get("spec") or {}).get("nodeName")
                if node and obj["metadata"]["name"] not in self.bound_at:
                    self.bound_at[obj["metadata"]["name"]] = time.monotonic()
                    self.bound_to[obj["metadata"]["name"]] = node

    async def schedule_pods(self, http: KubeClient, timeout: float = 600) -> dict[str, Any]:
        """Create the pods (scheduler suanli), wait until all are bound; the timing figures.

        Live (the default): the connector runs and Suanli has the nodes; times count from the
        first pod created. ``backlog``: the pods are created first, then the connector starts;
        times count from its start (its submissions of the whole backlog included)."""
        _, version = await http.list_all(f"/api/v1/namespaces/{self.pod_ns}/pods")
        watcher = asyncio.create_task(self.watch_bindings(http, version))
        try:
            manifests = pod_mix(self.pods, self.pod_ns, "suanli")
            began = time.monotonic()
            await _post_all(http, f"/api/v1/namespaces/{self.pod_ns}/pods", manifests)
            created = time.monotonic()
            self.log(f"k8s bench: {self.pods} pods created in {created - began:.1f} s; waiting for Suanli's bindings")
            if self.backlog:
                began = time.monotonic()
                self.start_connector()
                await self.until(f"{self.nodes} nodes registered in Suanli",
                                 lambda: self.registered() >= self.nodes, 180)
                registered = time.monotonic() - began
            deadline = time.monotonic() + timeout
            while len(self.bound_at) < self.pods:
                self.check_alive()
                if watcher.done():
                    watcher.result()
                if time.monotonic() > deadline:
                    pending = [t for t in self.view.tasks.values() if t.status in ("PENDING", "UNSCHEDULABLE")]
                    raise StackError(f"only {len(self.bound_at)} of {self.pods} pods bound after {timeout:.0f} s; "
                                     f"Suanli: {self.view.counts()}; e.g. {[(t.task_id, t.reasons[:1]) for t in pending[:3]]}")
                await asyncio.sleep(0.1)
        finally:
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)
        first, last = min(self.bound_at.values()), max(self.bound_at.values())
        if self.backlog:
            return {"pods": self.pods, "nodes": self.nodes, "mode": "backlog: pods created before the connector",
                    "nodes_registered_after_s": round(registered, 2),
                    "first_bound_after_s": round(first - began, 2), "all_bound_after_s": round(last - began, 2),
                    "bind_window_s": round(last - first, 2), "pods_per_s": round(self.pods / (last - began), 1),
                    "bindings_per_s_in_window": round(self.pods / max(last - first, 1e-3), 1)}
        return {"pods": self.pods, "nodes": self.nodes, "mode": "live: pods created while Suanli runs",
                "create_s": round(created - began, 2),
                "first_bound_after_s": round(first - began, 2), "all_bound_after_s": round(last - began, 2),
                "bind_window_s": round(last - first, 2), "pods_per_s": round(self.pods / (last - began), 1),
                "bindings_per_s_in_window": round(self.pods / max(last - first, 1e-3), 1)}

    async def verify(self, http: KubeClient) -> dict[str, Any]:
        """The acceptance checks, from fresh LISTs of the API server."""
        pods, _ = await http.list_all(f"/api/v1/namespaces/{self.pod_ns}/pods", {"labelSelector": "bench=k8s-binding"})
        nodes, _ = await http.list_all("/api/v1/nodes", {"labelSelector": f"{RUN_LABEL}={self.run}"})
        model_of = {n["metadata"]["name"]: n["metadata"]["labels"][GPU_PRODUCT_LABEL] for n in nodes}
        unbound = [p["metadata"]["name"] for p in pods if not p["spec"].get("nodeName")]
        wrong_model, gpus_asked = [], 0
        for p in pods:
            node = p["spec"].get("nodeName")
            models = accepted_models(p)
            gpus_asked += int(pod_requests(p).get("nvidia.com/gpu", 0))
            if node and models is not None and pod_requests(p).get("nvidia.com/gpu", 0) > 0 \
                    and model_of.get(node) not in models:
                wrong_model.append(f"{p['metadata']['name']} wants {sorted(models)}, on {node} ({model_of.get(node)})")
        foreign = [p["metadata"]["name"] for p in pods if p["spec"].get("nodeName") not in (None, *model_of)]
        # the binding's annotations: which dispatch bound the pod, and GPU indices as many as it asked
        unannotated = [p["metadata"]["name"] for p in pods
                       if not (p["metadata"].get("annotations") or {}).get("suanli.io/dispatch-id")
                       or len([d for d in p["metadata"]["annotations"].get("suanli.io/gpu-devices", "").split(",") if d])
                       != int(pod_requests(p).get("nvidia.com/gpu", 0))]
        problems, summary = overcommitted(nodes, pods)
        phases: dict[str, int] = defaultdict(int)
        for p in pods:
            phases[(p.get("status") or {}).get("phase", "?")] += 1
        return {"pods_listed": len(pods), "unbound": unbound, "wrong_model": wrong_model, "on_foreign_nodes": foreign,
                "binding_annotations_missing": unannotated,
                "overcommitted": problems, "gpus_requested": gpus_asked,
                "gpus_allocatable": len(nodes) * GPUS_PER_NODE, "phases": dict(phases), **summary}

    def suanli_statuses(self) -> dict[str, int]:
        """Statuses, in Suanli's view, of the tasks of the run's pods."""
        out: dict[str, int] = defaultdict(int)
        for t in self.view.tasks.values():
            if t.task_id.startswith("k8s-"):
                out[t.status] += 1
        return dict(out)

    async def direct_task(self, http: KubeClient, timeout: float = 120) -> dict[str, Any]:
        """A task submitted to Suanli (not a pod) for a T4 GPU: becomes a pod bound to a T4 node
        and completes (kwok ends it after its duration estimate)."""
        from suanli.schemas.codec import Codec
        from suanli.schemas.registry import RegistryClient
        from suanli.streams.kafka_io import EventProducer

        task_id = f"direct-{self.run}"
        task = {"event_id": f"{task_id}/submit", "task_id": task_id, "tenant": "bench", "cell": self.cell,
                "submitted_at": int(time.time() * 1000),
                "resources": {"cpu_milli": 1000, "memory_mib": 1024, "gpu_count": 1, "gpu_milli": 1000,
                              "gpu_models": ["T4"], "gpu_memory_mib": 0, "accelerators": []},
                "qos_tier": "SILVER", "priority": 0, "labels": {}, "deadline": None, "duration_estimate_ms": 2000,
                "command": ["python", "-c", "print('hello from suanli')"], "env": {"GREETING": "hi"}}
        with RegistryClient(self.settings.registry_url) as registry:
            async with EventProducer(self.settings.bootstrap_servers, Codec(registry),
                                     namespace=self.settings.namespace) as producer:
                await (await producer.publish("TaskSubmitted", task))
        await self.until(f"task {task_id} COMPLETED",
                         lambda: (t := self.view.tasks.get(task_id)) is not None and t.status in ("COMPLETED", "FAILED"),
                         timeout)
        view = self.view.tasks[task_id]
        r = await http.request("GET", f"/api/v1/namespaces/{self.pod_ns}/pods",
                               params={"labelSelector": "app.kubernetes.io/managed-by=suanli"})
        pods = [p for p in r.json()["items"] if task_id_of(p) == task_id]
        pod = pods[0] if pods else {}
        node = (pod.get("spec") or {}).get("nodeName")
        models = {n: m for n, m in ((name, MODELS[i % len(MODELS)][0]) for i, name in enumerate(self.node_names))}
        return {"task_id": task_id, "status": view.status, "message": view.message, "suanli_node": view.node_id,
                "pod": (pod.get("metadata") or {}).get("name"), "pod_node": node, "pod_node_model": models.get(node),
                "pod_phase": (pod.get("status") or {}).get("phase"),
                "pod_command": ((pod.get("spec") or {}).get("containers") or [{}])[0].get("command")}

    async def direct_baseline(self, http: KubeClient) -> dict[str, Any]:
        """The API server without Suanli: create the same number of pods (a scheduler name nobody
        serves) and POST each one's binding, ``CONCURRENCY`` requests in flight."""
        manifests = pod_mix(self.pods, self.direct_ns, "nobody")
        began = time.monotonic()
        await _post_all(http, f"/api/v1/namespaces/{self.direct_ns}/pods", manifests)
        created = time.monotonic()
        bindings = [{"apiVersion": "v1", "kind": "Binding", "metadata": {"name": m["metadata"]["name"]},
                     "target": {"apiVersion": "v1", "kind": "Node", "name": self.node_names[i % self.nodes]}}
                    for i, m in enumerate(manifests)]
        await _post_all(http, None, bindings, path_of=lambda b: f"/api/v1/namespaces/{self.direct_ns}/pods/"
                                                                 f"{b['metadata']['name']}/binding")
        bound = time.monotonic()
        return {"pods": self.pods, "concurrency": CONCURRENCY, "create_s": round(created - began, 2),
                "bind_s": round(bound - created, 2), "create_per_s": round(self.pods / (created - began), 1),
                "bind_per_s": round(self.pods / (bound - created), 1),
                "create_and_bind_per_s": round(self.pods / (bound - began), 1)}


async def _post_all(http: KubeClient, path: str | None, bodies: list[dict[str, Any]], *,
                    path_of: Any = None, concurrency: int = CONCURRENCY) -> None:
    """POST every body, ``concurrency`` at a time; StackError on the first refusal."""
    queue: asyncio.Queue = asyncio.Queue()
    for body in bodies:
        queue.put_nowait(body)

    async def worker() -> None:
        while not queue.empty():
            body = queue.get_nowait()
            r = await http.request("POST", path_of(body) if path_of else path, json=body)
            if r.status_code >= 300:
                raise StackError(f"POST {path_of(body) if path_of else path}: HTTP {r.status_code}: {r.text[:300]}")

    await asyncio.gather(*(worker() for _ in range(concurrency)))


def run_with_plane(bench: KubeBench, **options: Any) -> dict[str, Any]:
    """:func:`run_bench` with ``bench``'s plane started first, then stopped and the run's
    nodes and pods deleted, whatever happens (the Kubernetes services must be up)."""
    bench.start_plane()
    try:
        return asyncio.run(run_bench(bench, **options))
    finally:
        bench.stop_plane()

        async def clean() -> None:
            async with _client(bench) as http:
                await bench.cleanup(http)
        asyncio.run(clean())


async def run_bench(bench: KubeBench, *, direct_baseline: bool = True, direct_task: bool = True) -> dict[str, Any]:
    """The whole run (the Kubernetes services and the plane must be started; see :func:`main`)."""
    async with _client(bench) as http:
        await bench.make_cluster(http)
        bench.log(f"k8s bench: {bench.nodes} kwok nodes Ready")
        follower = bench._watcher = asyncio.create_task(bench.follow_suanli())
        try:
            if not bench.backlog:
                await bench.until(f"{bench.nodes} nodes registered in Suanli",
                                  lambda: bench.registered() >= bench.nodes, 180)
            out: dict[str, Any] = {"suanli": await bench.schedule_pods(http)}
            bench.log(f"k8s bench: all bound: {out['suanli']}")
            out["checks"] = await bench.verify(http)
            # every pod's phase comes back: RUNNING, and COMPLETED for the ones kwok ends (a run duration)
            ending = sum(1 for p in pod_mix(bench.pods, bench.pod_ns, "suanli")
                         if "suanli.io/run-duration" in p["metadata"]["annotations"])

            def reported() -> bool:
                st = bench.suanli_statuses()
                return st.get("COMPLETED", 0) >= ending and st.get("RUNNING", 0) + st.get("COMPLETED", 0) >= bench.pods

            await bench.until("every pod's phase reported to Suanli", reported, 120)
            out["suanli_statuses"] = bench.suanli_statuses()
            out["pods_with_run_duration"] = ending
            pods, _ = await http.list_all(f"/api/v1/namespaces/{bench.pod_ns}/pods",
                                          {"labelSelector": "bench=k8s-binding"})
            out["phases_then"] = {ph: sum(1 for p in pods if p["status"].get("phase") == ph)
                                  for ph in sorted({p["status"].get("phase") for p in pods})}
            if direct_task:
                out["direct_task"] = await bench.direct_task(http)
        finally:
            follower.cancel()
            await asyncio.gather(follower, return_exceptions=True)
        if direct_baseline:
            out["api_server"] = await bench.direct_baseline(http)
        return out


class _client:
    def __init__(self, bench: KubeBench):
        self.http = bench.client()

    async def __aenter__(self) -> KubeClient:
        return self.http

    async def __aexit__(self, *exc: object) -> None:
        await self.http.aclose()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m suanli.bench.k8s_binding", description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    parser.add_argument("--mode", choices=("live", "backlog", "both"), default="both",
                        help="live: pods created while Suanli runs; backlog: created before the connector starts")
    args = parser.parse_args(argv)

    def terminate(signum: int, _frame: Any) -> None:
        raise SystemExit(128 + signum)      # SIGTERM (e.g. `timeout`): unwind, so the plane and pods are cleaned up

    signal.signal(signal.SIGTERM, terminate)
    base = load_settings()
    say = lambda m: print(m, file=sys.stderr)  # noqa: E731
    started = kube.up(base, log=say)
    figures: dict[str, Any] = {}
    try:
        for mode in ("live", "backlog") if args.mode == "both" else (args.mode,):
            settings = load_settings(namespace=f"kb{secrets.token_hex(4)}", partitions=2)
            bench = KubeBench(settings, nodes=args.nodes, pods=args.pods, log=say, backlog=mode == "backlog")
            # the direct baseline and task once, in the first run
            out = run_with_plane(bench, direct_baseline=not figures, direct_task=not figures)
            out["checks"] = {k: (v if not isinstance(v, list) else {"count": len(v), "first": v[:5]})
                             for k, v in out["checks"].items()}
            for key in ("api_server", "direct_task"):
                if key in out:
                    figures[key] = out.pop(key)
            figures[mode] = out
    finally:
        if any(started["started"].values()):
            kube.down(base, log=say)
    figures["machine"] = {"cpus": os.cpu_count(), "kubernetes": kube.versions()}
    text = json.dumps(figures, indent=2)
    print(text)
    if args.json is not None:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
