"""The 'k8s' connector: Suanli as the scheduler of a Kubernetes cluster (issue 19, part 3).

``python -m suanli.connectors.kubernetes --kubeconfig FILE [--cell k8s] [--name k8s] ...``

It talks to the API server over HTTPS (httpx; a kubeconfig with a bearer token and a CA, or
the in-cluster service account) and maps both ways:

**Discovery (nodes -> NodeRegistered).** Every node (or those matching ``--node-selector``, a
label selector) is a Suanli node of the same name: ``cpu_milli`` and ``memory_mib`` from its
*allocatable* (what pods may use), devices from its extended resources (see
:data:`DEVICE_RESOURCES`: ``nvidia.com/gpu`` is a GPU whose model is the node's
``nvidia.com/gpu.product`` label, as NVIDIA's GPU feature discovery sets it, and whose memory is
``nvidia.com/gpu.memory`` in MiB; other vendors' GPUs, NPUs, FPGAs and ASICs likewise; any other
``vendor/name`` resource is an OTHER device), the zone and region from the well-known topology
labels, and the node's labels. Nodes are watched: one added later is registered then, and only
nodes whose ``Ready`` condition is True get heartbeats (so a NotReady or deleted node goes
SUSPECT then DOWN in the core, on the cell clock). No metrics are sent (the API has none).

**Scheduling (pods -> tasks -> bindings).** A pod with ``spec.schedulerName: suanli`` (the
``--scheduler-name``), no ``nodeName`` and phase Pending becomes a TaskSubmitted on the raw
tasks topic (:func:`pod_task`): task id ``k8s-<pod uid>``, its containers' requests (the sum,
or the largest init container's when larger) as ``cpu_milli``/``memory_mib``, whole GPUs from
``nvidia.com/gpu`` (or another GPU resource), other devices as accelerator requests, the GPU
models it accepts from a ``nvidia.com/gpu.product`` node selector or a required node affinity
``In`` on that key (or the annotation ``suanli.io/gpu-models: A100,H100``), the tenant from
``suanli.io/tenant`` (default: the pod's namespace), the tier from ``suanli.io/qos``
(gold|silver|bronze), the run time estimate from ``suanli.io/run-duration`` (a Go duration;
kwok completes such pods after that long), the priority from ``spec.priority``, and the pod's
labels plus ``k8s.namespace`` / ``k8s.pod``. Its event id is ``k8s/<uid>/submitted``: a
re-list after a restart submits nothing new. Suanli's decision arrives as a DispatchCommand
for this connector; ``execute`` POSTs the pod's ``binding`` to the chosen node (its annotations
``suanli.io/dispatch-id`` and ``suanli.io/gpu-devices``, the allotted GPU indices, land on the
pod), then reports
the pod's phase as the task's status: Running -> RUNNING, Succeeded -> COMPLETED, Failed ->
FAILED (exit code of the first terminated container), deleted -> FAILED. A pod deleted before
it was bound is a TaskCancelled.

**Dispatch of Suanli's own tasks.** A DispatchCommand for a task that is not a pod (submitted
with ``suanli submit`` or the API, placed on one of these nodes) becomes a pod created in
``--namespace`` already bound to that node (``spec.nodeName``), named ``suanli-<task id>``,
running ``--image`` with the task's command and env, requesting its CPU, memory and whole
GPUs, and annotated ``suanli.io/run-duration`` from the task's estimate; its phase is
reported the same way.

**Stop.** A StopCommand deletes the task's pod with the grace as ``gracePeriodSeconds``; the
dispatch reports FAILED "stopped by the scheduler: ...".

**Kafka.** The runner (``kit.py``) does the Kafka I/O of every adapter; the pod intake needs
one more stream, submissions, so this adapter keeps one EventProducer of its own for the raw
tasks and nodes topics (TaskSubmitted, TaskCancelled, NodeRegistered of nodes added later),
started by ``discover()`` on the runner's loop together with the watches, closed by
``aclose()``. Limits: one instance per cluster and connector name (two would submit the same
pods twice, harmlessly, but bind twice: the second binding is refused and reported FAILED);
GPU shares (``gpu_milli < 1000``) cannot be expressed as a Kubernetes request and are refused
at dispatch; a connector stopped while pods run reports them FAILED (the kit's contract) though
their pods run on.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import re
import ssl
import sys
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, AsyncIterator, Sequence

import httpx
import yaml

from suanli.connectors.kit import Adapter, TaskReporter, stopped_message
from suanli.errors import ConnectorError

log = logging.getLogger("suanli.connectors.kubernetes")

SCHEDULER_NAME = "suanli"
TASK_PREFIX = "k8s-"                           # task id of a pod: k8s-<uid>
MANAGED_BY = "suanli"                          # app.kubernetes.io/managed-by of the pods this adapter creates
ANNOTATION_TASK = "suanli.io/task-id"
ANNOTATION_TENANT = "suanli.io/tenant"
ANNOTATION_QOS = "suanli.io/qos"
ANNOTATION_DURATION = "suanli.io/run-duration"
ANNOTATION_GPU_MODELS = "suanli.io/gpu-models"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_MEMORY_LABEL = "nvidia.com/gpu.memory"     # MiB, as GPU feature discovery writes it
ZONE_LABELS = ("topology.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/zone")
REGION_LABELS = ("topology.kubernetes.io/region", "failure-domain.beta.kubernetes.io/region")
IN_CLUSTER = Path("/var/run/secrets/kubernetes.io/serviceaccount")


@dataclass(frozen=True)
class DeviceResource:
    """How one extended resource maps to Suanli devices."""

    kind: str                                  # GPU | NPU | FPGA | ASIC | QPU | OTHER
    model_labels: tuple[str, ...] = ()         # node labels naming the model, first present wins
    memory_label: str | None = None            # node label with the memory per device, MiB
    default_model: str = ""                    # when no label names it


#: Extended resources with a known device kind (exact names). Other ``vendor/name`` resources
#: are OTHER devices modelled by their name (see :func:`device_of`).
DEVICE_RESOURCES: dict[str, DeviceResource] = {
    "nvidia.com/gpu": DeviceResource("GPU", (GPU_PRODUCT_LABEL, "suanli.io/gpu-model"), GPU_MEMORY_LABEL, "nvidia-gpu"),
    "amd.com/gpu": DeviceResource("GPU", ("amd.com/gpu.product-name", "suanli.io/gpu-model"), None, "amd-gpu"),
    "gpu.intel.com/i915": DeviceResource("GPU", ("gpu.intel.com/product", "suanli.io/gpu-model"), None, "intel-gpu"),
    "huawei.com/Ascend910": DeviceResource("NPU", ("suanli.io/npu-model",), None, "Ascend910"),
    "huawei.com/Ascend310": DeviceResource("NPU", ("suanli.io/npu-model",), None, "Ascend310"),
    "habana.ai/gaudi": DeviceResource("NPU", ("habana.ai/device-type", "suanli.io/npu-model"), None, "gaudi"),
    "aws.amazon.com/neuron": DeviceResource("ASIC", ("suanli.io/asic-model",), None, "inferentia"),
    "aws.amazon.com/neuroncore": DeviceResource("ASIC", ("suanli.io/asic-model",), None, "neuroncore"),
    "google.com/tpu": DeviceResource("ASIC", ("cloud.google.com/gke-tpu-accelerator", "suanli.io/asic-model"), None,
                                     "tpu"),
    "intel.com/fpga": DeviceResource("FPGA", ("suanli.io/fpga-model",), None, "intel-fpga"),
}
# A resource whose name starts with one of these is an FPGA of the model after the prefix
# (Xilinx/AMD's device plugin: xilinx.com/fpga-xilinx_u250_gen3x16_xdma_shell_4_1-...).
FPGA_PREFIXES = ("xilinx.com/fpga-", "amd.com/xilinx_")


def device_of(resource: str) -> DeviceResource | None:
    """The device a resource name stands for, or None for a standard resource (cpu, memory,
    ephemeral-storage, pods, hugepages-*, anything under kubernetes.io)."""
    if resource in DEVICE_RESOURCES:
        return DEVICE_RESOURCES[resource]
    if "/" not in resource:
        return None
    domain = resource.split("/", 1)[0]
    if domain == "kubernetes.io" or domain.endswith(".kubernetes.io") or resource.startswith("requests."):
        return None
    for prefix in FPGA_PREFIXES:
        if resource.startswith(prefix):
            return DeviceResource("FPGA", ("suanli.io/fpga-model",), None, resource[len(prefix):])
    return DeviceResource("OTHER", (), None, resource)


# ---- quantities ----------------------------------------------------------------------------
_SUFFIX = {"Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40, "Pi": 2 ** 50, "Ei": 2 ** 60,
           "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": 1,
           "k": 10 ** 3, "M": 10 ** 6, "G": 10 ** 9, "T": 10 ** 12, "P": 10 ** 15, "E": 10 ** 18}
_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:[eE]([+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?)$")


def parse_quantity(value: Any) -> Decimal:
    """A Kubernetes quantity ("500m", "2", "1.5Gi", "1e9", 3) as a Decimal; ConnectorError if malformed."""
    if isinstance(value, (int, float)):
        return Decimal(str(value))
    match = _QUANTITY.match(str(value).strip())
    if match is None:
        raise ConnectorError(f"not a Kubernetes quantity: {value!r}")
    number, exponent, suffix = match.groups()
    try:
        base = Decimal(number)
    except InvalidOperation as exc:
        raise ConnectorError(f"not a Kubernetes quantity: {value!r}") from exc
    if exponent is not None:
        return base * (Decimal(10) ** int(exponent))
    return base * Decimal(_SUFFIX[suffix or ""])


def cpu_milli(value: Any) -> int:
    """CPU quantity -> millicores, rounded up (Kubernetes' own rounding of a request)."""
    return int((parse_quantity(value) * 1000).to_integral_value(rounding="ROUND_CEILING"))


def memory_mib(value: Any, *, round_up: bool = True) -> int:
    """Memory quantity -> MiB: a request rounds up (a task never gets less than it asked), a
    capacity down (a node never promises more than it has)."""
    mib = parse_quantity(value) / (2 ** 20)
    return int(mib.to_integral_value(rounding="ROUND_CEILING" if round_up else "ROUND_FLOOR"))


def go_duration_ms(text: str) -> int:
    """A Go duration ("1h30m", "45s", "250ms", "1.5h") in milliseconds; ConnectorError if malformed."""
    units = {"ns": 1e-6, "us": 1e-3, "µs": 1e-3, "ms": 1.0, "s": 1e3, "m": 6e4, "h": 3.6e6}
    parts = re.findall(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)", text.strip())
    if not parts or "".join(n + u for n, u in parts) != text.strip():
        raise ConnectorError(f"not a Go duration: {text!r}")
    return int(round(sum(float(n) * units[u] for n, u in parts)))


# ---- node -> NodeRegistered ------------------------------------------------------------------
def _ready(node: dict[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (node.get("status") or {}).get("conditions") or [])


def _first_label(labels: dict[str, str], keys: Sequence[str]) -> str | None:
    return next((labels[k] for k in keys if labels.get(k)), None)


ARCH = {"amd64": "x86_64", "x86_64": "x86_64", "arm64": "arm64", "aarch64": "arm64", "riscv64": "riscv64"}


def node_registered(node: dict[str, Any], *, cell: str, connector: str, at: int, site: str = "kubernetes",
                    tier: str = "cloud") -> dict[str, Any]:
    """The NodeRegistered payload of a Kubernetes node (see the module docstring); event id
    ``{connector}/{node}/registered/{resourceVersion}``: a changed node registers again."""
    meta, status = node["metadata"], node.get("status") or {}
    labels = dict(meta.get("labels") or {})
    allocatable = status.get("allocatable") or status.get("capacity") or {}
    accelerators = []
    for resource in sorted(allocatable):
        device = device_of(resource)
        count = int(parse_quantity(allocatable[resource]))
        if device is None or count <= 0:
            continue
        model = _first_label(labels, device.model_labels) or device.default_model
        memory = labels.get(device.memory_label or "", "")
        accelerators.append({"kind": device.kind, "model": model, "count": count,
                             "memory_mib": int(memory) if memory.isdigit() else 0,
                             "attributes": {"resource": resource}})
    zone = _first_label(labels, ZONE_LABELS) or site
    arch = ARCH.get(labels.get("kubernetes.io/arch", "") or (status.get("nodeInfo") or {}).get("architecture", ""),
                    "other")
    return {"event_id": f"{connector}/{meta['name']}/registered/{meta.get('resourceVersion', '0')}",
            "node_id": meta["name"], "cell": cell, "site": site, "region": _first_label(labels, REGION_LABELS) or site,
            "zone": zone, "tier": tier, "arch": arch,
            "cpu_milli": cpu_milli(allocatable.get("cpu", 0)),
            "memory_mib": memory_mib(allocatable.get("memory", 0), round_up=False),
            "accelerators": accelerators, "pricing": "ON_DEMAND", "price_per_hour": 0.0, "pue": 1.0,
            "carbon_g_per_kwh": 0.0, "connector": connector, "labels": {k: str(v) for k, v in labels.items()},
            "registered_at": at}


# ---- pod -> TaskSubmitted --------------------------------------------------------------------
def task_id_of(pod: dict[str, Any]) -> str:
    """The Suanli task id of a pod: its own annotation (pods this adapter created) or ``k8s-<uid>``."""
    meta = pod["metadata"]
    return (meta.get("annotations") or {}).get(ANNOTATION_TASK) or f"{TASK_PREFIX}{meta['uid']}"


_POD_TASK = re.compile(rf"^{TASK_PREFIX}[0-9a-f]{{8}}-[0-9a-f]{{4}}-[0-9a-f]{{4}}-[0-9a-f]{{4}}-[0-9a-f]{{12}}$")


def is_pod_task(task_id: str) -> bool:
    """Whether a task id is a pod's (``k8s-<uid>``, the uid a UUID as the API server makes them)."""
    return _POD_TASK.match(task_id) is not None


def pod_requests(pod: dict[str, Any]) -> dict[str, Decimal]:
    """The pod's effective requests: the sum over its containers, or per resource the largest
    init container's when larger (Kubernetes' rule; overhead added). A container with a limit but
    no request requests its limit (the API server defaults it so)."""
    spec = pod["spec"]

    def of(container: dict[str, Any]) -> dict[str, Decimal]:
        res = container.get("resources") or {}
        merged = {**(res.get("limits") or {}), **(res.get("requests") or {})}
        return {k: parse_quantity(v) for k, v in merged.items()}

    total: dict[str, Decimal] = {}
    for c in spec.get("containers") or []:
        for k, v in of(c).items():
            total[k] = total.get(k, Decimal(0)) + v
    for c in spec.get("initContainers") or []:
        for k, v in of(c).items():
            total[k] = max(total.get(k, Decimal(0)), v)
    for k, v in (spec.get("overhead") or {}).items():
        total[k] = total.get(k, Decimal(0)) + parse_quantity(v)
    return total


def _gpu_models(pod: dict[str, Any]) -> list[str]:
    """GPU models a pod accepts: its annotation, else its node selector, else the values of its
    required node affinity on the GPU product label (union over the terms, which are ORed)."""
    meta, spec = pod["metadata"], pod["spec"]
    listed = (meta.get("annotations") or {}).get(ANNOTATION_GPU_MODELS)
    if listed:
        return sorted({m.strip() for m in listed.split(",") if m.strip()})
    selected = (spec.get("nodeSelector") or {}).get(GPU_PRODUCT_LABEL)
    if selected:
        return [selected]
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    models: set[str] = set()
    for term in required.get("nodeSelectorTerms") or []:
        for expr in term.get("matchExpressions") or []:
            if expr.get("key") == GPU_PRODUCT_LABEL and expr.get("operator") == "In":
                models.update(expr.get("values") or [])
    return sorted(models)


QOS = {"gold": "GOLD", "silver": "SILVER", "bronze": "BRONZE"}


def pod_task(pod: dict[str, Any], *, cell: str) -> dict[str, Any]:
    """The TaskSubmitted payload of a pod Suanli schedules (see the module docstring).

    ConnectorError when the pod cannot be a task (a malformed quantity or annotation, a GPU
    share); the caller records the reason as an event on the pod instead of submitting it."""
    meta, spec = pod["metadata"], pod["spec"]
    annotations = meta.get("annotations") or {}
    requests = pod_requests(pod)
    gpus, accelerators = 0, []
    for resource in sorted(requests):
        device = device_of(resource)
        if device is None or requests[resource] <= 0:
            continue
        count = requests[resource]
        if count != count.to_integral_value():
            raise ConnectorError(f"{resource}: {count} is not a whole number of devices")
        if device.kind == "GPU":
            gpus += int(count)
        else:
            accelerators.append({"kind": device.kind, "model": "", "count": int(count)})
    qos = annotations.get(ANNOTATION_QOS, "silver").lower()
    if qos not in QOS:
        raise ConnectorError(f"annotation {ANNOTATION_QOS}: {qos!r} is not gold, silver or bronze")
    duration = annotations.get(ANNOTATION_DURATION)
    labels = {k: str(v) for k, v in (meta.get("labels") or {}).items()}
    labels.update({"k8s.namespace": meta.get("namespace", "default"), "k8s.pod": meta["name"]})
    priority = max(-(2 ** 31), min(2 ** 31 - 1, int(spec.get("priority") or 0)))
    return {
        "event_id": f"k8s/{meta['uid']}/submitted", "task_id": task_id_of(pod),
        "tenant": annotations.get(ANNOTATION_TENANT) or meta.get("namespace", "default"), "cell": cell,
        "submitted_at": _timestamp_ms(meta.get("creationTimestamp")),
        "resources": {"cpu_milli": cpu_milli(requests.get("cpu", 0)), "memory_mib": memory_mib(requests.get("memory", 0)),
                      "gpu_count": gpus, "gpu_milli": 1000 if gpus else 0,
                      "gpu_models": _gpu_models(pod) if gpus else [], "gpu_memory_mib": 0,
                      "accelerators": accelerators},
        "qos_tier": QOS[qos], "priority": priority, "labels": labels, "deadline": None,
        "duration_estimate_ms": go_duration_ms(duration) if duration else None, "command": None,
    }


def _timestamp_ms(text: str | None) -> int:
    """An RFC 3339 timestamp of the API ("2026-12-01T12:00:00Z") in epoch ms (0 when absent)."""
    if not text:
        return 0
    from datetime import datetime

    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def wants_suanli(pod: dict[str, Any], scheduler_name: str = SCHEDULER_NAME) -> bool:
    """Whether Suanli should place this pod: its scheduler, not bound, Pending, not being
    deleted, and not one of the pods this adapter created (those are bound at creation)."""
    meta, spec = pod["metadata"], pod.get("spec") or {}
    return (spec.get("schedulerName") == scheduler_name and not spec.get("nodeName")
            and (pod.get("status") or {}).get("phase", "Pending") == "Pending"
            and not meta.get("deletionTimestamp")
            and (meta.get("labels") or {}).get("app.kubernetes.io/managed-by") != MANAGED_BY)


def pod_name_for(task_id: str) -> str:
    """A valid pod name (DNS-1123 label, at most 63 characters) for a task Suanli dispatches.

    Ids that rewrite alike get different names. An id that is already a valid name's tail keeps it
    (``train-42`` -> ``suanli-train-42``); any other (upper case, other characters, too long)
    gets 8 hex digits of its hash after what is left of it, since the rewrite alone would give
    ``Train_42`` and ``train-42``, or a gold task's standby copy ``x~standby`` and a task
    ``x-standby``, one pod name."""
    name = re.sub(r"[^a-z0-9-]+", "-", task_id.lower()).strip("-")
    if name != task_id or len(name) > 54:
        import hashlib

        base = name[:45].rstrip("-")
        digest = hashlib.sha256(task_id.encode()).hexdigest()[:8]
        name = f"{base}-{digest}" if base else digest
    return f"suanli-{name}"


def dispatch_pod(command: dict[str, Any], *, namespace: str, image: str,
                 scheduler_name: str = SCHEDULER_NAME) -> dict[str, Any]:
    """The pod that runs a DispatchCommand of a task that is not a pod: bound at creation to the
    command's node, the task's command/env/resources, ``restartPolicy: Never``."""
    gpus = len(command.get("gpu_devices") or [])
    if gpus == 1 and 0 < int(command.get("gpu_milli") or 1000) < 1000:
        raise ConnectorError("a GPU share (gpu_milli < 1000) cannot be requested from Kubernetes; "
                             "ask for whole GPUs for a Kubernetes node")
    requests: dict[str, str] = {"cpu": f"{int(command['cpu_milli'])}m", "memory": f"{int(command['memory_mib'])}Mi"}
    limits: dict[str, str] = {}
    if gpus:
        requests["nvidia.com/gpu"] = limits["nvidia.com/gpu"] = str(gpus)
    annotations = {ANNOTATION_TASK: command["task_id"], "suanli.io/dispatch-id": command["dispatch_id"],
                   "suanli.io/gpu-devices": ",".join(str(d) for d in command.get("gpu_devices") or [])}
    if command.get("duration_estimate_ms"):
        annotations[ANNOTATION_DURATION] = f"{int(command['duration_estimate_ms'])}ms"
    container: dict[str, Any] = {"name": "task", "image": image, "resources": {"requests": requests,
                                                                               **({"limits": limits} if limits else {})},
                                 "env": [{"name": k, "value": v} for k, v in sorted((command.get("env") or {}).items())]
                                 + [{"name": "SUANLI_TASK_ID", "value": command["task_id"]},
                                    {"name": "SUANLI_DISPATCH_ID", "value": command["dispatch_id"]}]}
    if command.get("command"):
        container["command"] = list(command["command"])
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod_name_for(command["task_id"]), "namespace": namespace,
                         "labels": {"app.kubernetes.io/managed-by": MANAGED_BY, "suanli.io/tenant":
                                    re.sub(r"[^A-Za-z0-9_.-]", "-", command.get("tenant", ""))[:63].strip("-_.")},
                         "annotations": annotations},
            "spec": {"schedulerName": scheduler_name, "nodeName": command["node_id"], "restartPolicy": "Never",
                     "containers": [container],
                     # kwok's fake nodes carry this taint in its examples; harmless elsewhere
                     "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}]}}


def terminated_exit_code(pod: dict[str, Any]) -> int | None:
    """The exit code of the first terminated container (non-zero first), or None."""
    codes = [((s.get("state") or {}).get("terminated") or {}).get("exitCode")
             for s in (pod.get("status") or {}).get("containerStatuses") or []]
    codes = [c for c in codes if c is not None]
    return next((c for c in codes if c != 0), codes[0] if codes else None)


# ---- the API client ------------------------------------------------------------------------
@dataclass(frozen=True)
class KubeConfig:
    """Where the API server is and how to authenticate: a bearer token and a CA bundle
    (``verify``: a path, or True for the system's CAs)."""

    server: str
    token: str
    verify: str | bool = True

    @classmethod
    def load(cls, kubeconfig: str | Path | None = None) -> KubeConfig:
        """From a kubeconfig file (its current context; token users only), or, without one,
        ``$KUBECONFIG``, or the in-cluster service account."""
        path = kubeconfig or os.environ.get("KUBECONFIG")
        if not path:
            if (IN_CLUSTER / "token").exists() and os.environ.get("KUBERNETES_SERVICE_HOST"):
                host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ.get("KUBERNETES_SERVICE_PORT", "443")
                return cls(f"https://{host}:{port}", (IN_CLUSTER / "token").read_text().strip(),
                           str(IN_CLUSTER / "ca.crt"))
            raise ConnectorError("kubernetes: no kubeconfig (--kubeconfig or $KUBECONFIG) and not in a cluster")
        try:
            doc = yaml.safe_load(Path(path).read_text())
            ctx_name = doc["current-context"]
            ctx = next(c["context"] for c in doc["contexts"] if c["name"] == ctx_name)
            cluster = next(c["cluster"] for c in doc["clusters"] if c["name"] == ctx["cluster"])
            user = next(u["user"] for u in doc["users"] if u["name"] == ctx["user"])
        except (OSError, KeyError, StopIteration, TypeError, yaml.YAMLError) as exc:
            raise ConnectorError(f"kubernetes: cannot read the kubeconfig {path}: {exc}") from exc
        if "token" not in user:
            raise ConnectorError(f"kubernetes: kubeconfig {path}: only bearer-token users are supported")
        verify: str | bool = True
        if cluster.get("insecure-skip-tls-verify"):
            verify = False
        elif cluster.get("certificate-authority"):
            ca = Path(cluster["certificate-authority"])
            verify = str(ca if ca.is_absolute() else Path(path).parent / ca)
        elif cluster.get("certificate-authority-data"):
            import base64
            import tempfile

            with tempfile.NamedTemporaryFile("wb", suffix=".crt", delete=False) as f:
                f.write(base64.b64decode(cluster["certificate-authority-data"]))
            verify = f.name
        return cls(cluster["server"].rstrip("/"), user["token"], verify)

    def ssl_context(self) -> ssl.SSLContext | bool:
        if self.verify is False:
            return False
        return ssl.create_default_context(cafile=self.verify if isinstance(self.verify, str) else None)


class KubeClient:
    """A small async client of the API server (JSON over HTTPS, one connection pool)."""

    def __init__(self, config: KubeConfig, *, max_connections: int = 32):
        self.config = config
        self._ssl = config.ssl_context()
        self.http = httpx.AsyncClient(base_url=config.server, verify=self._ssl,
                                      headers={"Authorization": f"Bearer {config.token}",
                                               "Accept": "application/json"},
                                      limits=httpx.Limits(max_connections=max_connections,
                                                          max_keepalive_connections=max_connections),
                                      timeout=httpx.Timeout(30.0))

    def sync(self) -> httpx.Client:
        """A blocking client with the same credentials (for ``discover()``, which is synchronous)."""
        return httpx.Client(base_url=self.config.server, verify=self._ssl, timeout=30.0,
                            headers={"Authorization": f"Bearer {self.config.token}", "Accept": "application/json"})

    async def aclose(self) -> None:
        await self.http.aclose()

    async def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        return await self.http.request(method, path, **kwargs)

    async def list_all(self, path: str, params: dict[str, str] | None = None, page: int = 500
                       ) -> tuple[list[dict[str, Any]], str]:
        """Every item of a collection (paged) and the list's resourceVersion (to watch from)."""
        items, token, version = [], None, ""
        while True:
            query = {**(params or {}), "limit": str(page), **({"continue": token} if token else {})}
            r = await self.http.get(path, params=query)
            _check(r, f"list {path}")
            body = r.json()
            items.extend(body.get("items") or [])
            version = body["metadata"].get("resourceVersion", version)
            token = body["metadata"].get("continue")
            if not token:
                return items, version

    async def watch(self, path: str, version: str, params: dict[str, str] | None = None
                    ) -> AsyncIterator[dict[str, Any]]:
        """Watch events (``{"type", "object"}``) of a collection from ``version`` until the server
        ends the watch (``timeoutSeconds``, about 5 minutes); BOOKMARKs included."""
        query = {**(params or {}), "watch": "1", "resourceVersion": version, "allowWatchBookmarks": "true",
                 "timeoutSeconds": "290"}
        async with self.http.stream("GET", path, params=query, timeout=httpx.Timeout(30.0, read=320.0)) as r:
            if r.status_code != 200:
                await r.aread()
                _check(r, f"watch {path}")
            async for line in r.aiter_lines():
                if line.strip():
                    yield json.loads(line)


def _check(r: httpx.Response, what: str) -> None:
    if r.status_code >= 300:
        try:
            message = r.json().get("message", r.text)
        except ValueError:
            message = r.text
        raise ConnectorError(f"kubernetes: {what}: HTTP {r.status_code}: {message}")


class Gone(Exception):
    """A watch's resourceVersion is too old (HTTP 410 / an ERROR event): list again."""


# ---- the adapter -----------------------------------------------------------------------------
@dataclass
class _Tracked:
    """What the adapter knows of one pod Suanli schedules or created."""

    pod: dict[str, Any]
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    deleted: bool = False
    submitted: bool = False
    stop_reason: str | None = None
    following: bool = False                 # a dispatch's execute reports its phase


@dataclass
class KubeStats:
    """Counters, for logs, tests and the benchmark."""

    pods_submitted: int = 0
    pods_cancelled: int = 0
    pods_refused: int = 0
    bindings: int = 0
    binding_conflicts: int = 0
    pods_created: int = 0
    nodes_added: int = 0
    watch_restarts: int = 0


class KubernetesCluster(Adapter):
    """The 'k8s' connector (see the module docstring).

    ``kubeconfig``: the file (None: ``$KUBECONFIG`` or in-cluster). ``namespace``: where pods
    for Suanli's own tasks are created. ``pod_namespace``: the namespace whose pods it
    schedules (None: all). ``node_selector``: a label selector of the nodes it owns (None: all).
    ``bootstrap``, ``registry_url``, ``kafka_namespace``: its submissions' producer (default:
    the settings, as the runner's).
    """

    def __init__(self, *, kubeconfig: str | Path | None = None, cell: str = "k8s", name: str = "k8s",
                 namespace: str = "default", pod_namespace: str | None = None, node_selector: str | None = None,
                 scheduler_name: str = SCHEDULER_NAME, image: str = "busybox:1.36", site: str = "kubernetes",
                 tier: str = "cloud", bootstrap: str | None = None, registry_url: str | None = None,
                 kafka_namespace: str | None = None, config: KubeConfig | None = None,
                 health_file: str | Path | None = None):
        self.name, self.cell = name, cell
        self.config = config or KubeConfig.load(kubeconfig)
        self.namespace, self.pod_namespace = namespace, pod_namespace
        self.node_selector, self.scheduler_name, self.image = node_selector, scheduler_name, image
        self.site, self.tier = site, tier
        self.bootstrap, self.registry_url, self.kafka_namespace = bootstrap, registry_url, kafka_namespace
        self.health_file = Path(health_file) if health_file else None
        self.client = KubeClient(self.config)
        self.stats = KubeStats()
        self.nodes: dict[str, dict[str, Any]] = {}          # node name -> its NodeRegistered payload
        self.ready_nodes: set[str] = set()
        self.tracked: dict[str, _Tracked] = {}              # task id -> pod
        self._background: list[asyncio.Task] = []
        self._producer: Any = None
        self._producer_ready = asyncio.Event()
        self.synced = asyncio.Event()                       # set once the first pod list is handled

    # -- discovery ------------------------------------------------------------------------
    def discover(self) -> list[dict[str, Any]]:
        """LIST the nodes (blocking, once, at the runner's start) and start the background work:
        the submissions producer, the node watch and the pod watch."""
        params = {"labelSelector": self.node_selector} if self.node_selector else None
        with self.client.sync() as http:
            r = http.get("/api/v1/nodes", params=params)
            _check(r, "list nodes")
            body = r.json()
        now = self.now_ms()
        for node in body.get("items") or []:
            self._node_seen(node, now)
        self._start_background(body["metadata"]["resourceVersion"])
        return list(self.nodes.values())

    def _node_seen(self, node: dict[str, Any], at: int) -> dict[str, Any] | None:
        """Record a node; its NodeRegistered payload when it is new or its capacity changed."""
        name = node["metadata"]["name"]
        if _ready(node):
            self.ready_nodes.add(name)
        else:
            self.ready_nodes.discard(name)
        payload = node_registered(node, cell=self.cell, connector=self.name, at=at, site=self.site, tier=self.tier)
        old = self.nodes.get(name)
        if old is not None and all(old[k] == payload[k] for k in ("cpu_milli", "memory_mib", "accelerators", "labels")):
            return None
        self.nodes[name] = payload
        return payload

    def _start_background(self, nodes_version: str) -> None:
        if self._background:
            return
        loop = asyncio.get_running_loop()
        self._background = [loop.create_task(self._run_producer(), name=f"{self.name}-producer"),
                            loop.create_task(self._watch_nodes(nodes_version), name=f"{self.name}-nodes"),
                            loop.create_task(self._watch_pods(), name=f"{self.name}-pods")]

    async def aclose(self) -> None:
        for task in self._background:
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        self._background.clear()
        await self.client.aclose()

    # -- monitoring: heartbeats of the Ready nodes, no metrics ---------------------------------
    def heartbeats(self, at: int, seq: int) -> list[tuple[str, dict[str, Any]]]:
        if self.health_file is not None:        # a liveness signal for a probe (deploy/k8s/60-k8s-connector.yaml)
            self.health_file.touch()
        return [("NodeHeartbeat", {"event_id": f"{self.name}/{n}/hb/{seq}", "node_id": n, "cell": self.cell,
                                   "seq": seq, "at": at}) for n in sorted(self.ready_nodes) if n in self.nodes]

    def monitor(self, at: int, seq: int) -> list[tuple[str, dict[str, Any]]]:
        return self.heartbeats(at, seq)

    def metrics(self, at: int, seq: int, part: int = 0, parts: int = 1) -> list[tuple[str, dict[str, Any]]]:
        return []

    # -- the submissions producer ----------------------------------------------------------------
    async def _run_producer(self) -> None:
        from suanli.config import settings
        from suanli.schemas.codec import Codec
        from suanli.schemas.registry import RegistryClient
        from suanli.streams.kafka_io import EventProducer

        s = settings()
        with RegistryClient(self.registry_url or s.registry_url) as registry:
            codec = Codec(registry)
            await asyncio.to_thread(lambda: [codec.schema_id(k) for k in ("TaskSubmitted", "TaskCancelled",
                                                                          "NodeRegistered")])
            async with EventProducer(self.bootstrap or s.bootstrap_servers, codec,
                                     namespace=self.kafka_namespace or s.namespace) as producer:
                self._producer = producer
                self._producer_ready.set()
                try:
                    await asyncio.Event().wait()        # until cancelled by aclose
                finally:
                    await producer.flush()
                    self._producer = None

    async def _publish(self, kind: str, payload: dict[str, Any]) -> asyncio.Future:
        await self._producer_ready.wait()
        return await self._producer.publish(kind, payload)

    # -- watches -------------------------------------------------------------------------------
    async def _watch_nodes(self, version: str) -> None:
        params = {"labelSelector": self.node_selector} if self.node_selector else {}
        while True:
            try:
                async for event in self.client.watch("/api/v1/nodes", version, params):
                    version = self._on_node_event(event, version)
                    if event["type"] in ("ADDED", "MODIFIED"):
                        payload = self._node_seen(event["object"], self.now_ms())
                        if payload is not None:
                            self.stats.nodes_added += 1
                            await self._publish("NodeRegistered", payload)
            except Gone:
                items, version = await self.client.list_all("/api/v1/nodes", params)
                names = {n["metadata"]["name"] for n in items}
                self.ready_nodes &= names
                for node in items:
                    payload = self._node_seen(node, self.now_ms())
                    if payload is not None:
                        await self._publish("NodeRegistered", payload)
            except (httpx.HTTPError, ConnectorError) as exc:
                self.stats.watch_restarts += 1
                log.warning("kubernetes: node watch ended (%s); watching again", exc)
                await asyncio.sleep(1.0)    # back-off before reconnecting to a failing server

    def _on_node_event(self, event: dict[str, Any], version: str) -> str:
        kind, obj = event["type"], event["object"]
        if kind == "ERROR":
            raise Gone(obj.get("message"))
        if kind == "DELETED":
            self.ready_nodes.discard(obj["metadata"]["name"])     # no more heartbeats: SUSPECT, then DOWN
        return obj["metadata"].get("resourceVersion", version)

    def _pods_path(self) -> str:
        # one namespace when the pods it schedules and the ones it creates share it; else all
        # (filtered in _on_pods): the pods it creates must be watched too, to report their phase
        if self.pod_namespace and self.pod_namespace == self.namespace:
            return f"/api/v1/namespaces/{self.pod_namespace}/pods"
        return "/api/v1/pods"

    def _ours(self, pod: dict[str, Any]) -> bool:
        """Whether a watched pod concerns this connector: one it may schedule (its namespace
        filter) or one it created (its namespace, our label)."""
        meta = pod["metadata"]
        if (meta.get("labels") or {}).get("app.kubernetes.io/managed-by") == MANAGED_BY:
            return meta.get("namespace") == self.namespace
        return self.pod_namespace is None or meta.get("namespace") == self.pod_namespace

    async def _watch_pods(self) -> None:
        params = {"fieldSelector": f"spec.schedulerName={self.scheduler_name}"}
        await self._producer_ready.wait()
        version = None
        while True:
            try:
                if version is None:
                    items, version = await self.client.list_all(self._pods_path(), params)
                    await self._on_pods([("ADDED", p) for p in items])
                    self.synced.set()
                async for event in self.client.watch(self._pods_path(), version, params):
                    if event["type"] == "ERROR":
                        raise Gone(event["object"].get("message"))
                    version = event["object"]["metadata"].get("resourceVersion", version)
                    if event["type"] != "BOOKMARK":
                        await self._on_pods([(event["type"], event["object"])])
            except Gone:
                version = None
            except (httpx.HTTPError, ConnectorError) as exc:
                self.stats.watch_restarts += 1
                log.warning("kubernetes: pod watch ended (%s); watching again", exc)
                await asyncio.sleep(1.0)    # back-off before reconnecting to a failing server

    async def _on_pods(self, events: list[tuple[str, dict[str, Any]]]) -> None:
        """Track pods; submit the new ones Suanli should place, cancel the ones deleted unbound."""
        sends = []
        for kind, pod in events:
            if not self._ours(pod):
                continue
            task_id = task_id_of(pod)
            tracked = self.tracked.get(task_id)
            if tracked is None:
                tracked = self.tracked[task_id] = _Tracked(pod)
            tracked.pod = pod
            if kind == "DELETED":
                tracked.deleted = True
                if not tracked.following:       # forget it (a dispatch following it forgets it when it ends)
                    self.tracked.pop(task_id, None)
                if tracked.submitted and not (pod.get("spec") or {}).get("nodeName"):
                    self.stats.pods_cancelled += 1
                    sends.append(await self._publish("TaskCancelled", {
                        "event_id": f"k8s/{pod['metadata']['uid']}/cancelled", "task_id": task_id,
                        "tenant": (pod["metadata"].get("annotations") or {}).get(ANNOTATION_TENANT)
                        or pod["metadata"].get("namespace", "default"), "cell": self.cell,
                        "reason": "the pod was deleted before it was bound", "at": self.now_ms()}))
            elif not tracked.submitted and wants_suanli(pod, self.scheduler_name):
                try:
                    payload = pod_task(pod, cell=self.cell)
                except ConnectorError as exc:
                    self.stats.pods_refused += 1
                    log.warning("kubernetes: pod %s/%s cannot be a task: %s", pod["metadata"].get("namespace"),
                                pod["metadata"]["name"], exc)
                    tracked.submitted = True    # once: the same pod would fail the same way
                    continue
                tracked.submitted = True
                self.stats.pods_submitted += 1
                sends.append(await self._publish("TaskSubmitted", payload))
            tracked.changed.set()
        if sends:
            await asyncio.gather(*sends)

    # -- dispatch --------------------------------------------------------------------------------
    def admit(self, command: dict[str, Any]) -> str | None:
        if command["node_id"] not in self.nodes:
            return f"node {command['node_id']} is not a node of Kubernetes connector {self.name}"
        tracked = self.tracked.get(command["task_id"])
        if is_pod_task(command["task_id"]) and tracked is None and self.synced.is_set():
            return f"no pod for task {command['task_id']} (deleted)"
        if tracked is not None and tracked.deleted:
            return f"the pod of task {command['task_id']} was deleted"
        gpus = len(command.get("gpu_devices") or [])
        if tracked is None and gpus == 1 and 0 < int(command.get("gpu_milli") or 1000) < 1000:
            return "a GPU share (gpu_milli < 1000) cannot be requested from Kubernetes"
        return None

    async def execute(self, command: dict[str, Any], report: TaskReporter) -> None:
        task_id = command["task_id"]
        if is_pod_task(task_id) and task_id not in self.tracked:
            await asyncio.wait_for(self.synced.wait(), 120)     # a dispatch read before the first pod list
        tracked = self.tracked.get(task_id)
        if tracked is None:
            tracked = self.tracked[task_id] = _Tracked({"metadata": {"name": pod_name_for(task_id),
                                                                     "namespace": self.namespace}})
            if not await self._create(command, tracked, report):
                return
        elif not await self._bind(command, tracked, report):
            return
        await self._follow(command, tracked, report)

    async def _bind(self, command: dict[str, Any], tracked: _Tracked, report: TaskReporter) -> bool:
        meta = tracked.pod["metadata"]
        # the API server copies a binding's annotations onto the pod: which dispatch bound it and
        # which GPU indices Suanli allotted stay readable on the pod (kubectl describe)
        annotations = {"suanli.io/dispatch-id": command["dispatch_id"],
                       "suanli.io/gpu-devices": ",".join(str(d) for d in command.get("gpu_devices") or [])}
        body = {"apiVersion": "v1", "kind": "Binding",
                "metadata": {"name": meta["name"], "namespace": meta["namespace"], "uid": meta.get("uid"),
                             "annotations": annotations},
                "target": {"apiVersion": "v1", "kind": "Node", "name": command["node_id"]}}
        r = await self.client.request("POST", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/binding",
                                      json=body)
        if r.status_code < 300:
            self.stats.bindings += 1
            return True
        if r.status_code == 409:
            self.stats.binding_conflicts += 1
            current = await self.client.request("GET", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}")
            if current.status_code == 200 and current.json()["spec"].get("nodeName") == command["node_id"]:
                return True     # bound there already (a redelivered or recovered dispatch): follow it
            await report.failed(None, f"pod {meta['namespace']}/{meta['name']} is bound elsewhere "
                                      f"({current.json()['spec'].get('nodeName') if current.status_code == 200 else '?'})")
            return False
        await report.failed(None, f"binding pod {meta['namespace']}/{meta['name']} to {command['node_id']} "
                                  f"failed: HTTP {r.status_code}: {_message(r)}")
        return False

    async def _create(self, command: dict[str, Any], tracked: _Tracked, report: TaskReporter) -> bool:
        try:
            pod = dispatch_pod(command, namespace=self.namespace, image=self.image, scheduler_name=self.scheduler_name)
        except ConnectorError as exc:
            await report.failed(None, str(exc))
            return False
        r = await self.client.request("POST", f"/api/v1/namespaces/{self.namespace}/pods", json=pod)
        if r.status_code == 409:    # created before (a redelivered dispatch): follow that pod if it is this task's
            r = await self.client.request("GET", f"/api/v1/namespaces/{self.namespace}/pods/{pod['metadata']['name']}")
            if r.status_code == 200 and (r.json()["metadata"].get("annotations") or {}).get(ANNOTATION_TASK) \
                    != command["task_id"]:
                await report.failed(None, f"pod {pod['metadata']['name']} exists and belongs to another task")
                return False
        if r.status_code >= 300:
            await report.failed(None, f"creating pod {self.namespace}/{pod['metadata']['name']} failed: "
                                      f"HTTP {r.status_code}: {_message(r)}")
            return False
        self.stats.pods_created += 1
        if tracked.pod.get("spec") is None:         # the watch may have delivered it already
            tracked.pod = r.json()
        return True

    async def _follow(self, command: dict[str, Any], tracked: _Tracked, report: TaskReporter) -> None:
        """Report the pod's phase until it ends (or is deleted)."""
        tracked.following = True
        try:
            await self._report_phases(command, tracked, report)
        finally:
            tracked.following = False
            if tracked.deleted:
                self.tracked.pop(command["task_id"], None)

    async def _report_phases(self, command: dict[str, Any], tracked: _Tracked, report: TaskReporter) -> None:
        while True:
            tracked.changed.clear()
            pod, phase = tracked.pod, (tracked.pod.get("status") or {}).get("phase")
            where = f"pod {pod['metadata'].get('namespace')}/{pod['metadata']['name']} on {command['node_id']}"
            if tracked.stop_reason is not None and (tracked.deleted or phase in ("Succeeded", "Failed")):
                await report.failed(terminated_exit_code(pod), f"{stopped_message(tracked.stop_reason)}; {where}")
                return
            if phase in ("Running", "Succeeded", "Failed"):
                await report.running(where)
            if phase == "Succeeded":
                await report.completed(None, f"{where}: Succeeded")
                return
            if phase == "Failed":
                status = pod.get("status") or {}
                await report.failed(terminated_exit_code(pod), f"{where}: Failed"
                                    + (f" ({status.get('reason')}: {status.get('message')})" if status.get("reason") else ""))
                return
            if tracked.deleted:
                await report.failed(terminated_exit_code(pod), f"{where} was deleted")
                return
            await tracked.changed.wait()

    async def stop(self, task_id: str, node_id: str, reason: str, grace_ms: int | None = None) -> bool:
        """Delete the task's pod (``gracePeriodSeconds`` from ``grace_ms``); its dispatch then
        reports FAILED, stopped. False when no pod of that task is known on that node."""
        tracked = self.tracked.get(task_id)
        if tracked is None or (tracked.pod.get("spec") or {}).get("nodeName") not in (node_id, None):
            return False
        tracked.stop_reason = reason
        meta = tracked.pod["metadata"]
        body = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if grace_ms is not None:
            body["gracePeriodSeconds"] = max(0, grace_ms) // 1000
        r = await self.client.request("DELETE", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}", json=body)
        if r.status_code not in (200, 202, 404):
            log.warning("kubernetes: deleting pod %s/%s: HTTP %d: %s", meta["namespace"], meta["name"], r.status_code,
                        _message(r))
        tracked.changed.set()
        return True


def _message(r: httpx.Response) -> str:
    try:
        return str(r.json().get("message", r.text))
    except ValueError:
        return r.text


# ---- command line ------------------------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The adapter's options (for ``python -m suanli.connectors k8s`` and this module's main)."""
    parser.add_argument("--kubeconfig", default=None, help="kubeconfig file (default: $KUBECONFIG, else in-cluster)")
    parser.add_argument("--cell", default="k8s", help="the Suanli cell of the cluster's nodes (default k8s)")
    parser.add_argument("--namespace", default="default",
                        help="namespace of the pods it creates for Suanli's own tasks (default: default)")
    parser.add_argument("--pod-namespace", default=None,
                        help="schedule the pods of this namespace only (default: every namespace)")
    parser.add_argument("--node-selector", default=None, help="label selector of the nodes it owns (default: all)")
    parser.add_argument("--scheduler-name", default=SCHEDULER_NAME,
                        help="spec.schedulerName of the pods it places (default suanli)")
    parser.add_argument("--image", default="busybox:1.36", help="image of the pods it creates for Suanli's own tasks")
    parser.add_argument("--site", default="kubernetes", help="site (and default region and zone) of the nodes")
    parser.add_argument("--tier", default="cloud", choices=("cloud", "edge", "onprem"))
    parser.add_argument("--health-file", default=None,
                        help="touch this file at every heartbeat (a liveness signal for a probe)")


def build_adapter(args: argparse.Namespace) -> KubernetesCluster:
    """The adapter from parsed :func:`add_arguments` options (plus ``--name`` when the parser has it)."""
    return KubernetesCluster(kubeconfig=args.kubeconfig, cell=args.cell, name=getattr(args, "name", None) or "k8s",
                             namespace=args.namespace, pod_namespace=args.pod_namespace,
                             node_selector=args.node_selector, scheduler_name=args.scheduler_name, image=args.image,
                             site=args.site, tier=args.tier, health_file=args.health_file)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m suanli.connectors.kubernetes``: the same as ``python -m suanli.connectors k8s``
    (the common connector options and :func:`add_arguments`'; see ``connectors/launch.py``)."""
    from suanli.connectors.launch import main as launch

    return launch(["k8s", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
