"""What node_exporter and NVIDIA's dcgm-exporter would report for a simulated node.

The simulated cluster (``connectors/simulated.py``) calls :meth:`TelemetryGenerator.node_metrics`
for every node at every monitor tick (15 s in ``suanli up``): one ``NodeMetrics`` payload whose
``extended`` map holds the series a real GPU host exposes, under the exporters' own names and
keyed the way ``connectors/prometheus_source.py`` keys a real Prometheus series (labels sorted,
identity labels dropped, DCGM series indexed by ``gpu`` only)::

    DCGM_FI_DEV_GPU_TEMP{gpu="3"}                      node_load1
    node_cpu_seconds_total{cpu="0",mode="idle"}        node_memory_MemAvailable_bytes
    node_network_receive_bytes_total{device="eth0"}    node_disk_io_time_seconds_total{device="nvme1n1"}

**Which series.** Per GPU, the fields enabled in dcgm-exporter's ``etc/default-counters.csv``
(clocks, temperatures, power and energy, PCIe, utilisation, last XID, framebuffer, NVLink
bandwidth, vGPU licence, remapped rows) plus its default DCP profiling fields
(``DCGM_FI_PROF_*``): :data:`DCGM_FIELDS`, 26 per GPU. Per node, node_exporter's default
collectors: load, memory (``/proc/meminfo``), vmstat, stat, pressure, netstat, sockstat,
conntrack, hwmon, filefd, entropy, two NICs, two NVMe disks, two filesystems
(:data:`NODE_GAUGES` and friends, 130 series), and ``node_cpu_seconds_total`` (8 modes) with
``node_cpu_scaling_frequency_hertz`` for the first :attr:`TelemetryGenerator.per_cpu` CPUs
(16 by default: a site keeps a few per-CPU series the way a ``metric_relabel_configs`` rule
would; 96 CPUs x 9 series per host would be 864 series of little use to a scheduler). Every
openb node type reaches at least 200 series: a CPU-only 32-core node 274, a 96-core 8-GPU
node 482 (:func:`series_count`).

**Values follow the node's work.** The inputs are the node's description (NodeRegistered
payload: CPUs, memory, GPU model and count) and the dispatch commands running on it (their
``cpu_milli``, ``memory_mib``, ``gpu_devices``, ``gpu_milli``). A GPU's allocated share drives its
utilisation, framebuffer, power, temperature, clocks, PCIe and NVLink traffic; the CPU share
drives the per-CPU mode counters, load, pressure and context switches; the allocated memory
drives ``MemAvailable``; the number of GPUs and CPUs in use drive network and disk traffic.
Noise comes from a generator seeded by ``(seed, node, seq)``: the same node, sample sequence
number and running work always give the same gauges.

**Counters** (``*_total``, energy, PCIe and NVLink bytes) are real counters: they start at a
value that fits the node's uptime (boot time from a hash of the node id) and grow by rate x
elapsed time between samples, so ``rate()`` over two samples gives the current rate, as
Prometheus would compute it. That state lives in the generator; a second call with the same
``at`` adds nothing (elapsed time 0), so a repeated sample is identical.

**Faults** (:class:`Fault`, :meth:`TelemetryGenerator.set_fault`) override what a node's
metrics say: a temperature (``temp_c``: every GPU and CPU package at about that many degrees),
NIC or disk saturation (``net_util``, ``disk_util``), an XID error on GPU 0. This is how tests
and benches make nodes HOT, CONGESTED or DEGRADED *through their metrics*.

Pure apart from that counter state: numpy and the standard library, no clock, no I/O.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Iterable, Mapping

import numpy as np

__all__ = ["DCGM_FIELDS", "Fault", "GpuSpec", "GPU_SPECS", "TelemetryGenerator", "series_count"]

# --------------------------------------------------------------------------- the exporters' names
DCGM_FIELDS: tuple[str, ...] = (
    # dcgm-exporter etc/default-counters.csv (the enabled lines, in file order)
    "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK",
    "DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "DCGM_FI_DEV_PCIE_TX_THROUGHPUT", "DCGM_FI_DEV_PCIE_RX_THROUGHPUT", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_ENC_UTIL", "DCGM_FI_DEV_DEC_UTIL",
    "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
    "DCGM_FI_DEV_VGPU_LICENSE_STATUS",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    # the DCP (profiling) fields dcgm-exporter enables by default where the GPU supports them
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE",
    "DCGM_FI_PROF_PCIE_TX_BYTES", "DCGM_FI_PROF_PCIE_RX_BYTES",
)
_D = {name: i for i, name in enumerate(DCGM_FIELDS)}
_WHOLE = np.array([_D[f] for f in ("DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_GPU_TEMP",
                                    "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_FB_FREE",
                                    "DCGM_FI_DEV_FB_USED", "DCGM_FI_PROF_PCIE_TX_BYTES", "DCGM_FI_PROF_PCIE_RX_BYTES")])
_DCGM_COUNTERS = ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_PCIE_TX_THROUGHPUT",
                  "DCGM_FI_DEV_PCIE_RX_THROUGHPUT", "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL")

MEMINFO = ("MemTotal", "MemFree", "MemAvailable", "Buffers", "Cached", "SwapCached", "SwapTotal", "SwapFree",
           "Active", "Inactive", "Active_anon", "Inactive_anon", "Active_file", "Inactive_file", "Dirty",
           "Writeback", "AnonPages", "Mapped", "Shmem", "Slab", "SReclaimable", "SUnreclaim", "KernelStack",
           "PageTables", "Committed_AS", "CommitLimit", "VmallocUsed", "HugePages_Total", "HugePages_Free",
           "Hugepagesize")
NODE_GAUGES = (
    "node_load1", "node_load5", "node_load15", "node_procs_running", "node_procs_blocked",
    "node_boot_time_seconds", "node_time_seconds", "node_entropy_available_bits",
    "node_filefd_allocated", "node_filefd_maximum",
    "node_netstat_Tcp_CurrEstab", "node_sockstat_sockets_used", "node_sockstat_TCP_inuse", "node_sockstat_TCP_tw",
    "node_sockstat_UDP_inuse", "node_nf_conntrack_entries", "node_nf_conntrack_entries_limit",
)
NODE_COUNTERS = (
    "node_context_switches_total", "node_intr_total", "node_forks_total",
    "node_vmstat_pgpgin", "node_vmstat_pgpgout", "node_vmstat_pswpin", "node_vmstat_pswpout",
    "node_vmstat_pgfault", "node_vmstat_pgmajfault", "node_vmstat_oom_kill",
    "node_pressure_cpu_waiting_seconds_total", "node_pressure_memory_waiting_seconds_total",
    "node_pressure_memory_stalled_seconds_total", "node_pressure_io_waiting_seconds_total",
    "node_pressure_io_stalled_seconds_total",
    "node_netstat_Tcp_ActiveOpens", "node_netstat_Tcp_PassiveOpens", "node_netstat_Tcp_RetransSegs",
    "node_netstat_Tcp_InSegs", "node_netstat_Tcp_OutSegs", "node_netstat_TcpExt_ListenDrops",
    "node_netstat_Udp_InDatagrams", "node_netstat_Udp_OutDatagrams",
)
HWMON = (("platform_coretemp_0", "temp1"), ("platform_coretemp_1", "temp1"))
NICS = (("eth0", 25e9 / 8), ("eth1", 10e9 / 8))            # device, node_network_speed_bytes
NIC_COUNTERS = ("receive_bytes_total", "transmit_bytes_total", "receive_packets_total", "transmit_packets_total",
                "receive_errs_total", "transmit_errs_total", "receive_drop_total", "transmit_drop_total",
                "receive_multicast_total")
NIC_GAUGES = ("speed_bytes", "up", "mtu_bytes")
DISKS = ("nvme0n1", "nvme1n1")                              # root disk, data disk
DISK_COUNTERS = ("reads_completed_total", "writes_completed_total", "read_bytes_total", "written_bytes_total",
                 "read_time_seconds_total", "write_time_seconds_total", "io_time_seconds_total",
                 "io_time_weighted_seconds_total", "reads_merged_total", "writes_merged_total")
FILESYSTEMS = (("/dev/nvme0n1p1", "ext4", "/", 0.45e12), ("/dev/nvme1n1", "xfs", "/data", 3.84e12))
FS_GAUGES = ("size_bytes", "avail_bytes", "free_bytes", "files", "files_free", "readonly")
CPU_MODES = ("idle", "iowait", "irq", "nice", "softirq", "steal", "system", "user")


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """What the simulator needs to know about a GPU model."""
    tdp_w: float
    idle_w: float
    sm_max_mhz: float
    mem_mhz: float
    hbm: bool                  # HBM keeps its memory clock at idle; GDDR drops to 405 MHz
    nvlink_bytes_s: float      # 0: no NVLink
    fb_mib: int


GPU_SPECS: dict[str, GpuSpec] = {
    "A100": GpuSpec(400, 55, 1410, 1215, True, 300e9, 40960),
    "A10": GpuSpec(150, 20, 1695, 6251, False, 0, 24576),
    "V100M16": GpuSpec(300, 40, 1530, 877, True, 150e9, 16384),
    "V100M32": GpuSpec(300, 40, 1530, 877, True, 150e9, 32768),
    "P100": GpuSpec(250, 30, 1480, 715, True, 0, 16384),
    "T4": GpuSpec(70, 10, 1590, 5001, False, 0, 16384),
    # the trace's unpublished models: a generic data-centre GPU
    "G2": GpuSpec(300, 35, 1500, 1215, True, 0, 32768),
    "G3": GpuSpec(350, 45, 1600, 1593, True, 200e9, 32768),
}
GENERIC_GPU = GpuSpec(250, 30, 1500, 1215, True, 0, 16384)


@dataclass(frozen=True, slots=True)
class Fault:
    """What a node's metrics say regardless of its work (None / 0 = no override)."""
    temp_c: float | None = None        # every GPU (and its memory, +4) and CPU package at about this
    net_util: float | None = None      # eth0 receive at this share of its link speed
    disk_util: float | None = None     # nvme1n1 busy (io_time rate) at this share
    xid: int = 0                       # DCGM_FI_DEV_XID_ERRORS of GPU 0: the last XID seen (79: fell off the bus)


_MASK = 0x7FFF_FFFF_FFFF_FFFF


# --------------------------------------------------------------------------- per-node profile
def _h(*parts: object) -> int:
    return int.from_bytes(hashlib.blake2b(":".join(map(str, parts)).encode(), digest_size=8).digest(), "big")


def _u(*parts: object) -> float:
    return _h(*parts) / 2 ** 64


def _series(name: str, **labels: object) -> str:
    if not labels:
        return name
    return name + "{" + ",".join(f'{k}="{labels[k]}"' for k in sorted(labels)) + "}"


@lru_cache(maxsize=None)
def _layout(per_cpu: int, gpus: int) -> tuple[tuple[str, ...], np.ndarray, dict[str, int]]:
    """The series of a node with ``per_cpu`` reported CPUs and ``gpus`` GPUs, in output order;
    the indices of the counters among them; counter series -> index into the rates array."""
    names: list[str] = []
    counters: list[int] = []

    def add(name: str, counter: bool = False, **labels: object) -> None:
        if counter:
            counters.append(len(names))
        names.append(_series(name, **labels))

    for n in NODE_GAUGES:
        add(n)
    for mem in MEMINFO:
        add(f"node_memory_{mem}_bytes")
    for n in NODE_COUNTERS:
        add(n, counter=True)
    for chip, sensor in HWMON:
        add("node_hwmon_temp_celsius", chip=chip, sensor=sensor)
    for dev, _speed in NICS:
        for c in NIC_COUNTERS:
            add(f"node_network_{c}", counter=True, device=dev)
        for g in NIC_GAUGES:
            add(f"node_network_{g}", device=dev)
    for dev in DISKS:
        for c in DISK_COUNTERS:
            add(f"node_disk_{c}", counter=True, device=dev)
        add("node_disk_io_now", device=dev)
    for device, fstype, mount, _size in FILESYSTEMS:
        for g in FS_GAUGES:
            add(f"node_filesystem_{g}", device=device, fstype=fstype, mountpoint=mount)
    for cpu in range(per_cpu):
        for mode in CPU_MODES:
            add("node_cpu_seconds_total", counter=True, cpu=cpu, mode=mode)
        add("node_cpu_scaling_frequency_hertz", cpu=cpu)
    for g in range(gpus):
        for f in DCGM_FIELDS:
            add(f, counter=f in _DCGM_COUNTERS, gpu=g)
    idx = np.array(counters, dtype=np.int64)
    idx.flags.writeable = False
    return tuple(names), idx, {names[i]: k for k, i in enumerate(counters)}


class _Profile:
    """The fixed facts of one node: its series names (in output order) and constants."""

    __slots__ = ("node_id", "key", "cpus", "per_cpu", "mem_bytes", "gpus", "spec", "fb_mib", "ambient", "gpu_ambient",
                 "rise", "uptime_s", "idle_mem", "idle_cpu", "names", "counter_idx", "n_counters", "slot", "remapped", "filesystems",
                 "power_idx")

    def __init__(self, node: Mapping[str, Any], per_cpu: int):
        self.node_id = node["node_id"]
        self.key = _h("telemetry", self.node_id) & 0x7FFF_FFFF_FFFF_FFFF
        self.cpus = max(1, int(math.ceil(node["cpu_milli"] / 1000)))
        self.per_cpu = min(self.cpus, per_cpu)
        self.mem_bytes = float(node["memory_mib"]) * 2 ** 20
        accelerators = [a for a in node.get("accelerators", ()) if a.get("kind", "GPU") == "GPU"]
        self.gpus = sum(int(a["count"]) for a in accelerators)
        model = accelerators[0]["model"] if accelerators else ""
        self.spec = GPU_SPECS.get(model, GENERIC_GPU)
        self.fb_mib = float((accelerators[0].get("memory_mib") if accelerators else 0) or self.spec.fb_mib)
        self.ambient = 27.0 + 8.0 * _u("ambient", self.node_id)
        self.gpu_ambient = np.array([self.ambient + 3.0 * _u("slot", self.node_id, g) for g in range(self.gpus)])
        self.rise = 36.0 + 6.0 * _u("rise", self.node_id)
        self.uptime_s = 86_400.0 * (1 + 29 * _u("uptime", self.node_id))   # 1 to 30 days up at the first sample
        self.idle_mem = 0.03 + 0.05 * _u("idle-mem", self.node_id)
        self.idle_cpu = 0.02 + 0.04 * _u("idle-cpu", self.node_id)
        self.remapped = float(_h("remap", self.node_id) % 3 == 0)           # a third of the GPUs remapped a row once
        self.filesystems: list[float] = []                                  # static over a run
        for j, (_device, _fstype, _mount, size) in enumerate(FILESYSTEMS):
            used = size * (0.2 + 0.3 * _u("fs", self.node_id, j))
            self.filesystems += [size, size - used - 0.05 * size, size - used, size / 16384, (size - used) / 16384, 0.0]
        self.names, self.counter_idx, self.slot = _layout(self.per_cpu, self.gpus)
        self.n_counters = len(self.counter_idx)
        first_gpu = len(self.names) - self.gpus * len(DCGM_FIELDS)
        self.power_idx = first_gpu + len(DCGM_FIELDS) * np.arange(self.gpus) + _D["DCGM_FI_DEV_POWER_USAGE"]


def series_count(node: Mapping[str, Any], per_cpu: int = 16) -> int:
    """How many ``extended`` series the generator reports for ``node``."""
    return len(_Profile(node, per_cpu).names)


# rates-array slots (the same for every node: node-level counters come first) of the
# typed fields' sources
_RX = np.array([_layout(1, 0)[2][_series("node_network_receive_bytes_total", device=d)] for d, _ in NICS])
_TX = np.array([_layout(1, 0)[2][_series("node_network_transmit_bytes_total", device=d)] for d, _ in NICS])
_IOPS = np.array([_layout(1, 0)[2][_series(f"node_disk_{c}", device=d)] for d in DISKS
                  for c in ("reads_completed_total", "writes_completed_total")])


class _NodeState:
    __slots__ = ("at", "boot", "counters", "load5", "load15")

    def __init__(self, at: int, boot: float, counters: np.ndarray, load: float):
        self.at, self.boot, self.counters, self.load5, self.load15 = at, boot, counters, load, load


# --------------------------------------------------------------------------- the generator
class TelemetryGenerator:
    """Exporter-named metrics for simulated nodes (see the module docstring).

    ``seed`` seeds the noise (with the node and the sample's ``seq``); ``per_cpu`` is how
    many CPUs report per-CPU series. Keeps each node's counters between samples.
    """

    def __init__(self, seed: int = 0, per_cpu: int = 16):
        if per_cpu < 1:
            raise ValueError("per_cpu must be >= 1")
        self.seed, self.per_cpu = seed, per_cpu
        self.faults: dict[str, Fault] = {}
        self._profiles: dict[str, _Profile] = {}
        self._state: dict[str, _NodeState] = {}

    # -- faults ---------------------------------------------------------------------------
    def set_fault(self, node_id: str, fault: Fault | None) -> None:
        """Make ``node_id``'s metrics say ``fault`` from its next sample on (None: clear it)."""
        if fault is None or fault == Fault():
            self.faults.pop(node_id, None)
        else:
            self.faults[node_id] = fault

    # -- sampling -------------------------------------------------------------------------
    def _profile(self, node: Mapping[str, Any]) -> _Profile:
        p = self._profiles.get(node["node_id"])
        if p is None:
            p = self._profiles[node["node_id"]] = _Profile(node, self.per_cpu)
        return p

    def node_metrics(self, node: Mapping[str, Any], tasks: Iterable[Mapping[str, Any]], at: int, seq: int,
                     event_id: str, cell: str) -> dict[str, Any]:
        """A NodeMetrics payload for ``node`` at ``at`` with ``tasks`` (dispatch commands) running.

        The typed fields keep their plain meaning: ``cpu_util`` = idle load + the allocated CPU
        share, ``gpu_util`` = each GPU's allocated share, ``gpu_memory_used_mib`` = that share of
        its memory, ``load1`` = cpu_util x cores; ``disk_iops``, ``net_*_mbps`` and ``power_w`` are
        the rates and the power the extended series report.
        """
        p = self._profile(node)
        tasks = list(tasks)
        fault = self.faults.get(p.node_id)
        gpu_alloc = np.zeros(p.gpus)
        cpu_milli = mem_mib = 0
        for t in tasks:
            cpu_milli += t.get("cpu_milli") or 0
            mem_mib += t.get("memory_mib") or 0
            for device in t.get("gpu_devices") or ():
                if 0 <= device < p.gpus:
                    gpu_alloc[device] = min(1.0, gpu_alloc[device] + (t.get("gpu_milli") or 1000) / 1000)
        cpu_util = min(1.0, p.idle_cpu + cpu_milli / max(1, node["cpu_milli"]))
        mem_used = min(p.mem_bytes, p.mem_bytes * p.idle_mem + mem_mib * 2 ** 20)
        rng = np.random.default_rng([self.seed & _MASK, p.key, seq & _MASK])
        values, rates = self._values(p, rng, fault, at, cpu_util, mem_used, gpu_alloc, len(tasks))

        state = self._state.get(p.node_id)
        if state is None:                 # counters that fit the uptime: as if these rates had always run
            counters = rates * p.uptime_s * (0.6 + 0.4 * rng.random(p.n_counters))
            state = self._state[p.node_id] = _NodeState(at, at / 1000.0 - p.uptime_s, counters, cpu_util * p.cpus)
        elif at > state.at:
            dt = (at - state.at) / 1000.0
            state.counters = state.counters + rates * dt
            a5, a15 = 1 - math.exp(-dt / 300), 1 - math.exp(-dt / 900)
            load = cpu_util * p.cpus
            state.load5 += a5 * (load - state.load5)
            state.load15 += a15 * (load - state.load15)
            state.at = at
        values[p.counter_idx] = state.counters
        values[1], values[2] = state.load5, state.load15       # node_load5, node_load15
        values[5] = state.boot                                  # node_boot_time_seconds
        extended = dict(zip(p.names, np.round(values, 3).tolist()))
        rx, tx, iops = (float(rates[slots].sum()) for slots in (_RX, _TX, _IOPS))
        gpu_power = float(values[p.power_idx].sum()) if p.gpus else 0.0
        return {"event_id": event_id, "node_id": p.node_id, "cell": cell, "at": at,
                "cpu_util": round(cpu_util, 4), "memory_used_mib": int(mem_used / 2 ** 20),
                "gpu_util": [float(u) for u in gpu_alloc],
                "gpu_memory_used_mib": [int(u * p.fb_mib) for u in gpu_alloc],
                "load1": round(cpu_util * p.cpus, 3), "disk_iops": round(float(iops), 1),
                "net_rx_mbps": round(float(rx) * 8 / 1e6, 3), "net_tx_mbps": round(float(tx) * 8 / 1e6, 3),
                "power_w": round(60 + 4 * p.cpus * cpu_util + gpu_power, 1), "extended": extended}

    def _values(self, p: _Profile, rng: np.random.Generator, fault: Fault | None, at: int, cpu_util: float,
                mem_used: float, gpu_alloc: np.ndarray, n_tasks: int) -> tuple[np.ndarray, np.ndarray]:
        """Gauge values (counters' slots filled later) and the per-second rate of every counter."""
        values: list[float] = []
        rates: list[float] = []
        z = rng.standard_normal(64)
        cores_busy = cpu_util * p.cpus
        gpus_busy = float(gpu_alloc.sum())
        temp = fault.temp_c if fault and fault.temp_c is not None else None

        # node gauges (NODE_GAUGES order)
        mem_total, mem_avail = p.mem_bytes, p.mem_bytes - mem_used
        conns = 40 + 25 * n_tasks + 3 * abs(z[0])
        values += [round(cores_busy * (1 + 0.05 * z[1]), 2), 0.0, 0.0,       # load1 (noisy), load5/15 from state
                   max(1.0, round(cores_busy + z[2])), max(0.0, round(0.02 * cores_busy * abs(z[3]))),
                   0.0, at / 1000.0, 256.0,                            # boot time from state
                   1500.0 + 120 * n_tasks + round(50 * abs(z[4])), 9.2e18,
                   conns, 300 + 2 * conns, conns + 5, 10 + round(abs(4 * z[5])), 12.0,
                   200 + 30 * conns, 262144.0]
        # /proc/meminfo
        cached, free = 0.6 * mem_avail, 0.35 * mem_avail
        anon = mem_used * 0.9
        values += [mem_total, free, mem_avail, 0.01 * mem_total, cached, 0.0, 8 * 2 ** 30, 8 * 2 ** 30,
                   anon * 0.8 + cached * 0.5, anon * 0.2 + cached * 0.5, anon * 0.8, anon * 0.2,
                   cached * 0.5, cached * 0.5, 2e6 * (1 + n_tasks) * (1 + 0.2 * abs(z[6])), 0.0, anon,
                   0.02 * mem_total, 0.004 * mem_total, 0.015 * mem_total, 0.01 * mem_total, 0.005 * mem_total,
                   3e7 + 4e5 * n_tasks, 6e7 + 2e6 * n_tasks, anon * 1.3, 0.5 * mem_total + 8 * 2 ** 30, 2.5e8,
                   0.0, 0.0, 2.0 * 2 ** 20]
        # node counters (NODE_COUNTERS order): rates per second
        io_busy = 0.02 + 0.25 * min(1.0, 0.5 * gpus_busy / max(1, p.gpus) + 0.5 * cpu_util)
        if fault and fault.disk_util is not None:
            io_busy = fault.disk_util
        values += [0.0] * len(NODE_COUNTERS)
        rates += [2e3 + 8e3 * cores_busy, 1.5e3 + 5e3 * cores_busy, 2 + 0.5 * n_tasks,
                  2e3 + 4e4 * io_busy, 4e3 + 8e4 * io_busy, 0.0, 0.0, 1e3 + 2e4 * cpu_util, 0.1 + io_busy, 0.0,
                  0.02 * cores_busy * cpu_util, 0.001, 0.0005, 0.3 * io_busy, 0.1 * io_busy,
                  0.5 + 0.1 * n_tasks, 0.8 + 0.1 * n_tasks, 0.05 * (1 + n_tasks), 5e3 + 4e4 * gpus_busy,
                  4e3 + 3e4 * gpus_busy, 0.0, 20.0, 20.0]
        # hwmon: CPU package temperatures
        for i, _ in enumerate(HWMON):
            base = temp if temp is not None else p.ambient + 10 + 35 * cpu_util
            values.append(round(base + 0.8 * z[7 + i], 1))
        # NICs: eth0 carries the work, eth1 is management
        rx0 = 2e6 + 6e7 * gpus_busy + 1e6 * cores_busy
        if fault and fault.net_util is not None:
            rx0 = fault.net_util * NICS[0][1]
        for i, (dev, speed) in enumerate(NICS):
            rx = (rx0 if i == 0 else 1e5) * (1 + 0.05 * z[9 + i])
            tx = (0.5 * rx0 if i == 0 else 8e4) * (1 + 0.05 * z[11 + i])
            rx, tx = min(max(rx, 0.0), speed), min(max(tx, 0.0), speed)
            values += [0.0] * len(NIC_COUNTERS) + [speed, 1.0, 9000.0 if i == 0 else 1500.0]
            rates += [rx, tx, rx / 1200, tx / 1200, 0.0, 0.0, rx / 1200 * 1e-6, 0.0, 0.5]
        # disks: the root disk is quiet, the data disk works with the node
        for i, dev in enumerate(DISKS):
            if i == 0:
                busy = (0.01 + 0.04 * cpu_util) * (1 + 0.03 * z[13])
            else:
                busy = io_busy if fault and fault.disk_util is not None else io_busy * (1 + 0.03 * z[14])
            busy = min(max(busy, 0.0), 1.0)
            ops = 4000.0 * busy
            values += [0.0] * len(DISK_COUNTERS) + [round(busy * 4)]
            rates += [0.6 * ops, 0.4 * ops, 0.6 * ops * 65536, 0.4 * ops * 131072, 0.6 * ops * 2e-4,
                      0.4 * ops * 4e-4, busy, busy * (1 + 3 * busy), 0.05 * ops, 0.1 * ops]
        # filesystems
        values += p.filesystems
        # per-CPU: mode counters and frequency
        if p.per_cpu:
            busy = np.clip(cpu_util * (1 + 0.15 * rng.standard_normal(p.per_cpu)), 0.0, 1.0)
            shares = np.stack([np.zeros_like(busy),                  # idle: the rest, below
                               0.04 * busy + 0.002,                 # iowait
                               0.01 * busy,                         # irq
                               np.zeros_like(busy),                 # nice
                               0.03 * busy,                         # softirq
                               np.zeros_like(busy),                 # steal
                               0.14 * busy,                         # system
                               0.78 * busy], axis=1)                # user
            shares[:, 0] = np.clip(1.0 - shares.sum(axis=1), 0.0, 1.0)
            freq = 2.2e9 + 1.0e9 * busy + 2e7 * rng.standard_normal(p.per_cpu)
            block = np.concatenate([np.zeros((p.per_cpu, len(CPU_MODES))), freq[:, None]], axis=1)
            values += block.ravel().tolist()
            rates += shares.ravel().tolist()
        # GPUs
        if p.gpus:
            values += self._gpus(p, rng, fault, temp, gpu_alloc, rates).ravel().tolist()
        return np.asarray(values, dtype=np.float64), np.asarray(rates, dtype=np.float64)

    def _gpus(self, p: _Profile, rng: np.random.Generator, fault: Fault | None, temp: float | None,
              alloc: np.ndarray, rates: list[float]) -> np.ndarray:
        """The DCGM block (gpus x fields, in DCGM_FIELDS order; counter slots 0) and the
        counters' rates (appended to ``rates``)."""
        s, g = p.spec, p.gpus
        z = rng.standard_normal((8, g))
        active = alloc > 0
        busy = np.where(active, np.clip(alloc * (0.9 + 0.06 * z[0]), 0.0, 1.0), 0.0)
        gpu_temp = (np.full(g, temp) if temp is not None else p.gpu_ambient + p.rise * busy ** 0.8) + 0.6 * z[1]
        power = np.maximum(s.idle_w + (s.tdp_w - s.idle_w) * busy + 0.015 * s.tdp_w * z[2], 0.5 * s.idle_w)
        working = busy > 0.02
        sm = np.where(working, s.sm_max_mhz * (0.96 + 0.02 * z[3]), 0.15 * s.sm_max_mhz)
        sm = np.where(gpu_temp >= 87, 0.8 * sm, sm)                       # thermal slowdown
        fb_used = np.where(active, np.minimum(p.fb_mib, 300 + alloc * (p.fb_mib - 300) * (0.8 + 0.05 * z[4])), 0.0)
        pcie = busy * 2.5e9 * (1 + 0.05 * z[5])
        zero = np.zeros(g)
        xid = zero.copy()
        if fault and fault.xid:
            xid[0] = float(fault.xid)
        out = np.stack([
            sm,                                                             # SM_CLOCK
            np.full(g, s.mem_mhz) if s.hbm else np.where(working, s.mem_mhz, 405.0),   # MEM_CLOCK
            gpu_temp + 4 + 4 * busy,                                        # MEMORY_TEMP
            gpu_temp,                                                       # GPU_TEMP
            power,                                                          # POWER_USAGE
            zero, zero, zero,                                               # energy, PCIe TX/RX (counters)
            np.full(g, float(_h("replay", p.node_id) % 2)),                 # PCIE_REPLAY_COUNTER
            np.clip(100 * busy + 1.5 * z[6] * active, 0, 100),              # GPU_UTIL
            np.clip(45 * busy + 2 * z[7] * active, 0, 100),                 # MEM_COPY_UTIL
            zero, zero,                                                     # ENC_UTIL, DEC_UTIL
            xid,                                                            # XID_ERRORS (the last XID)
            p.fb_mib - fb_used, fb_used,                                    # FB_FREE, FB_USED
            zero, zero, zero,                                               # NVLink (counter), vGPU licence, uncorrectable
            np.full(g, p.remapped), zero,                                   # CORRECTABLE_REMAPPED_ROWS, ROW_REMAP_FAILURE
            0.97 * busy, 0.35 * busy, 0.5 * busy,                           # GR_ENGINE, PIPE_TENSOR, DRAM active
            0.4 * pcie, pcie,                                               # PROF_PCIE_TX/RX_BYTES (per s)
        ], axis=1)
        out[:, _WHOLE] = np.round(out[:, _WHOLE])                           # DCGM reports these as integers
        per_gpu = np.stack([power * 1000.0,                                 # energy, mJ per s
                            0.4 * pcie / 1000.0, pcie / 1000.0,             # PCIe TX / RX, KB per s
                            busy * s.nvlink_bytes_s * 0.2], axis=1)          # NVLink bytes per s
        rates += per_gpu.ravel().tolist()
        return out

