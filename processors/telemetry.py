"""Telemetry conditions: a node's metrics samples -> NORMAL, HOT, CONGESTED or DEGRADED, with hysteresis.

The telemetry worker (``streams/telemetry_app.py``) reads every ``NodeMetrics`` at full rate
and calls :func:`observe` with the node's previous :class:`NodeTelemetry` and the new sample;
only a *change* of condition comes back, as a ``NodeConditionChanged``, and only that enters
the cell log. So the scheduler's input stays small while 200+ metrics per node flow.

Pure: no clock (a sample's time is its ``at``), no I/O, no Kafka. Metric names are the
exporters' own, keyed as Prometheus prints a series (``DCGM_FI_DEV_GPU_TEMP{gpu="3"}``,
``node_network_receive_bytes_total{device="eth0"}``), which is what the simulator
(``connectors/sim_telemetry.py``) and the Prometheus source (``connectors/prometheus_source.py``)
put in ``NodeMetrics.extended``.

**The rules** (thresholds in :class:`TelemetryArgs`; each flag has an *enter* and an *exit*
threshold, and between the two it keeps its value — hysteresis, so a reading that hovers at
the threshold does not flap):

- **HOT**: the hottest GPU (``DCGM_FI_DEV_GPU_TEMP``) >= ``gpu_temp_enter_c`` (85 °C), or its
  memory (``DCGM_FI_DEV_MEMORY_TEMP``) >= ``memory_temp_enter_c`` (95), or a CPU package
  (``node_hwmon_temp_celsius``) >= ``cpu_temp_enter_c`` (95). It stays HOT until every one is
  below its exit threshold (80, 90, 88).
- **CONGESTED**: a NIC at >= ``net_enter`` (0.9) of its link speed, receive or transmit
  (``rate(node_network_{receive,transmit}_bytes_total) / node_network_speed_bytes``), or a disk
  busy >= ``disk_enter`` (0.9) of the time (``rate(node_disk_io_time_seconds_total)``, iostat's
  %util). Until both are below ``net_exit`` / ``disk_exit`` (0.7). Rates come from the counters of
  two successive samples; without a previous sample (or after a counter reset) the flag keeps
  its value.
- **DEGRADED**: a *new* XID error — a GPU's ``DCGM_FI_DEV_XID_ERRORS`` (the exporter's "value of
  the last XID error") non-zero and different from its previous value, or non-zero the first
  time the GPU is seen — or a failed row remap (``DCGM_FI_DEV_ROW_REMAP_FAILURE`` >= 1). It clears
  once no new XID has come for ``degraded_clear_ms`` (10 min of sample time) and no row remap
  has failed.

The node's condition is the worst flag: DEGRADED, then HOT, then CONGESTED, else NORMAL. The
event's ``reason`` names each threshold crossed (``DCGM_FI_DEV_GPU_TEMP{gpu="3"} 88 >= 85
(gpu_temp_enter_c)``) and ``metrics`` holds the readings that decided it, by exporter name.

**Idempotent.** A sample no newer than the last one applied changes nothing; if it is the very
sample that made the last change (a redelivery after a crash), that change is returned again
with the same event id (``telemetry/<cell>/<node>/<at>/<condition>``), so a change is never
lost between storing the state and producing the event.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Optional

from . import model as m
from .args import Invalid, arg, explicit, parse_args

__all__ = ["CONDITIONS", "NodeTelemetry", "Readings", "TelemetryArgs", "observe", "readings", "thresholds_of"]

NORMAL, HOT, CONGESTED, DEGRADED = "NORMAL", "HOT", "CONGESTED", "DEGRADED"
CONDITIONS = (NORMAL, HOT, CONGESTED, DEGRADED)
_WORST_FIRST = (DEGRADED, HOT, CONGESTED)


@dataclass(frozen=True, slots=True)
class TelemetryArgs:
    """The telemetry thresholds: the ``telemetry`` key of a cell's policy (defaults here)."""
    gpu_temp_enter_c: float = arg(85.0, "HOT when the hottest GPU (DCGM_FI_DEV_GPU_TEMP) reaches this", gt=0)
    gpu_temp_exit_c: float = arg(80.0, "... and stays HOT until every GPU is below this", gt=0)
    memory_temp_enter_c: float = arg(95.0, "HOT when a GPU's memory (DCGM_FI_DEV_MEMORY_TEMP) reaches this", gt=0)
    memory_temp_exit_c: float = arg(90.0, "... until every GPU memory is below this", gt=0)
    cpu_temp_enter_c: float = arg(95.0, "HOT when a CPU package (node_hwmon_temp_celsius) reaches this", gt=0)
    cpu_temp_exit_c: float = arg(88.0, "... until every package is below this", gt=0)
    net_enter: float = arg(0.9, "CONGESTED when a NIC's receive or transmit rate reaches this share of "
                           "node_network_speed_bytes", gt=0, le=1)
    net_exit: float = arg(0.7, "... until every NIC is below this share", gt=0, le=1)
    disk_enter: float = arg(0.9, "CONGESTED when a disk is busy (rate of node_disk_io_time_seconds_total) "
                            "this share of the time", gt=0, le=1)
    disk_exit: float = arg(0.7, "... until every disk is below this share", gt=0, le=1)
    degraded_on_xid: bool = arg(True, "DEGRADED on a new XID error (DCGM_FI_DEV_XID_ERRORS) or a failed row remap")
    degraded_clear_ms: int = arg(600_000, "DEGRADED clears after this long (sample time) with no new XID", ge=0)

    def validate(self) -> None:
        for enter, exit_ in (("gpu_temp_enter_c", "gpu_temp_exit_c"), ("memory_temp_enter_c", "memory_temp_exit_c"),
                             ("cpu_temp_enter_c", "cpu_temp_exit_c"), ("net_enter", "net_exit"),
                             ("disk_enter", "disk_exit")):
            if getattr(self, exit_) > getattr(self, enter):
                raise Invalid(exit_, getattr(self, exit_), f"<= {enter} ({getattr(self, enter)}): the exit "
                              "threshold of a condition cannot be above its enter threshold")

    @classmethod
    def parse(cls, config: Any) -> "TelemetryArgs":
        """``config`` (a JSON object, None = defaults) as TelemetryArgs; StrategyConfigError if refused."""
        return parse_args(cls, config, "telemetry")

    def to_json(self) -> dict[str, Any]:
        return explicit(self)


DEFAULTS = TelemetryArgs()


# --------------------------------------------------------------------------- readings of one sample
@dataclass(frozen=True, slots=True)
class Readings:
    """What one sample says, reduced to what the rules read: each ``(series, value)`` is the
    worst series of its kind (None when the sample has none)."""
    gpu_temp: Optional[tuple[str, float]] = None
    memory_temp: Optional[tuple[str, float]] = None
    cpu_temp: Optional[tuple[str, float]] = None
    net: Optional[tuple[str, float]] = None            # share of link speed
    disk: Optional[tuple[str, float]] = None           # busy share
    xid: Mapping[str, float] = field(default_factory=dict)        # series -> last XID value (all GPUs)
    row_remap_failure: Optional[tuple[str, float]] = None
    counters: Mapping[str, float] = field(default_factory=dict)   # the counters rates are taken from


_COUNTER_NAMES = ("node_network_receive_bytes_total", "node_network_transmit_bytes_total",
                  "node_disk_io_time_seconds_total")


def _worse(current: Optional[tuple[str, float]], key: str, value: float) -> Optional[tuple[str, float]]:
    if math.isnan(value):
        return current
    return (key, value) if current is None or value > current[1] else current


def readings(sample: m.NodeMetrics, previous: Optional["NodeTelemetry"]) -> Readings:
    """The readings of ``sample``; rates against ``previous``'s counters when it has them."""
    gpu_temp = memory_temp = cpu_temp = remap = None
    xid: dict[str, float] = {}
    counters: dict[str, float] = {}
    speed: dict[str, float] = {}
    for key, value in sample.extended.items():
        name, brace, _labels = key.partition("{")
        if name == "DCGM_FI_DEV_GPU_TEMP":
            gpu_temp = _worse(gpu_temp, key, value)
        elif name == "DCGM_FI_DEV_MEMORY_TEMP":
            memory_temp = _worse(memory_temp, key, value)
        elif name == "node_hwmon_temp_celsius":
            cpu_temp = _worse(cpu_temp, key, value)
        elif name == "DCGM_FI_DEV_XID_ERRORS":
            xid[key] = value
        elif name == "DCGM_FI_DEV_ROW_REMAP_FAILURE":
            remap = _worse(remap, key, value)
        elif name in _COUNTER_NAMES:
            counters[key] = value
        elif name == "node_network_speed_bytes":
            speed[brace + _labels] = value
    net = disk = None
    dt = (sample.at - previous.at) / 1000.0 if previous is not None and previous.at >= 0 else 0.0
    if dt > 0:
        before = previous.counters
        for key, value in counters.items():
            old = before.get(key)
            if old is None or value < old:        # new series, or a counter reset (reboot): no rate yet
                continue
            rate = (value - old) / dt
            name, brace, labels = key.partition("{")
            if name == "node_disk_io_time_seconds_total":
                disk = _worse(disk, f"rate({key})", rate)
            else:
                link = speed.get(brace + labels)
                if link and link > 0:
                    net = _worse(net, f"rate({key})/node_network_speed_bytes", rate / link)
    return Readings(gpu_temp, memory_temp, cpu_temp, net, disk, xid, remap, counters)


# --------------------------------------------------------------------------- per-node state
@dataclass(frozen=True, slots=True)
class NodeTelemetry:
    """What the telemetry worker keeps per node between samples (its table holds it as JSON)."""
    node_id: str
    cell: str
    at: int = -1                                   # time of the last sample applied
    condition: str = NORMAL
    hot: bool = False
    congested: bool = False
    degraded: bool = False
    last_xid_at: int = -1                          # time of the last new XID (or failed row remap)
    xid: Mapping[str, float] = field(default_factory=dict)
    counters: Mapping[str, float] = field(default_factory=dict)
    last_change: Optional[m.NodeConditionChanged] = None

    def to_json(self) -> bytes:
        d = {"node_id": self.node_id, "cell": self.cell, "at": self.at, "condition": self.condition,
             "hot": self.hot, "congested": self.congested, "degraded": self.degraded,
             "last_xid_at": self.last_xid_at, "xid": dict(self.xid), "counters": dict(self.counters),
             "last_change": m.to_avro(self.last_change) if self.last_change is not None else None}
        return json.dumps(d, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes | str) -> "NodeTelemetry":
        d = json.loads(data)
        change = d.pop("last_change", None)
        return cls(**d, last_change=m.from_avro("NodeConditionChanged", change) if change else None)


def _fmt(v: float) -> str:
    return f"{v:.3g}" if abs(v) < 10 else f"{v:.0f}"


def _flag(was: bool, reading: Optional[tuple[str, float]], enter: float, exit_: float, enter_name: str,
          exit_name: str) -> tuple[bool, Optional[str]]:
    """Hysteresis for one reading: (is set, why it changed or None). No reading: unchanged."""
    if reading is None:
        return was, None
    key, value = reading
    if not was and value >= enter:
        return True, f"{key} {_fmt(value)} >= {_fmt(enter)} ({enter_name})"
    if was and value < exit_:
        return False, f"{key} {_fmt(value)} < {_fmt(exit_)} ({exit_name})"
    return was, None


def _any_flag(was: bool, checks: list[tuple[bool, Optional[str]]],
              readings_: list[tuple[Optional[tuple[str, float]], float]]) -> tuple[bool, list[str]]:
    """Several readings behind one flag: set when any enters; cleared only when every reading
    present is below its exit threshold (and at least one is present)."""
    if not was:
        why = [w for on, w in checks if on and w]
        return bool(why), why
    present = [(r, exit_) for r, exit_ in readings_ if r is not None]
    if present and all(r[1] < exit_ for r, exit_ in present):
        return False, [w for on, w in checks if not on and w]
    return True, []


def observe(state: Optional[NodeTelemetry], sample: m.NodeMetrics,
            args: TelemetryArgs = DEFAULTS) -> tuple[NodeTelemetry, Optional[m.NodeConditionChanged]]:
    """Apply one sample to a node's state: the new state and the change of condition, if any."""
    if state is None:
        state = NodeTelemetry(sample.node_id, sample.cell)
    if sample.at <= state.at:
        again = state.last_change if state.last_change is not None and state.last_change.at == sample.at else None
        return state, again
    r = readings(sample, state)

    hot_checks = [_flag(state.hot, r.gpu_temp, args.gpu_temp_enter_c, args.gpu_temp_exit_c,
                        "gpu_temp_enter_c", "gpu_temp_exit_c"),
                  _flag(state.hot, r.memory_temp, args.memory_temp_enter_c, args.memory_temp_exit_c,
                        "memory_temp_enter_c", "memory_temp_exit_c"),
                  _flag(state.hot, r.cpu_temp, args.cpu_temp_enter_c, args.cpu_temp_exit_c,
                        "cpu_temp_enter_c", "cpu_temp_exit_c")]
    hot, hot_why = _any_flag(state.hot, hot_checks, [(r.gpu_temp, args.gpu_temp_exit_c),
                                                     (r.memory_temp, args.memory_temp_exit_c),
                                                     (r.cpu_temp, args.cpu_temp_exit_c)])
    net_checks = [_flag(state.congested, r.net, args.net_enter, args.net_exit, "net_enter", "net_exit"),
                  _flag(state.congested, r.disk, args.disk_enter, args.disk_exit, "disk_enter", "disk_exit")]
    congested, congested_why = _any_flag(state.congested, net_checks,
                                         [(r.net, args.net_exit), (r.disk, args.disk_exit)])

    new_xid = [(k, v) for k, v in sorted(r.xid.items()) if v and v != state.xid.get(k)]
    remap_failed = r.row_remap_failure is not None and r.row_remap_failure[1] >= 1
    last_xid_at = sample.at if (new_xid or remap_failed) else state.last_xid_at
    degraded_why: list[str] = []
    if not args.degraded_on_xid:
        degraded = False
        if state.degraded:
            degraded_why = ["degraded_on_xid is off"]
    elif new_xid or remap_failed:
        degraded = True
        if not state.degraded:
            degraded_why = [f"{k} {v:.0f} (a new XID error)" for k, v in new_xid]
            if remap_failed:
                degraded_why.append(f"{r.row_remap_failure[0]} {_fmt(r.row_remap_failure[1])} (row remap failed)")
    elif state.degraded and sample.at - state.last_xid_at >= args.degraded_clear_ms:
        degraded = False
        degraded_why = [f"no new XID error for {(sample.at - state.last_xid_at) / 1000:.0f} s "
                        f">= {args.degraded_clear_ms / 1000:.0f} s (degraded_clear_ms)"]
    else:
        degraded = state.degraded

    flags = {DEGRADED: degraded, HOT: hot, CONGESTED: congested}
    condition = next((c for c in _WORST_FIRST if flags[c]), NORMAL)
    new = replace(state, cell=sample.cell or state.cell, at=sample.at, condition=condition, hot=hot,
                  congested=congested, degraded=degraded, last_xid_at=last_xid_at,
                  xid={**state.xid, **r.xid}, counters=dict(r.counters) or dict(state.counters))
    if condition == state.condition:
        return new, None
    why = {DEGRADED: degraded_why, HOT: hot_why, CONGESTED: congested_why}
    changed = [f"{c} {'on' if flags[c] else 'off'}: {'; '.join(why[c])}" for c in _WORST_FIRST if why[c]]
    metrics: dict[str, float] = {}
    for reading in (r.gpu_temp, r.memory_temp, r.cpu_temp, r.net, r.disk, r.row_remap_failure, *new_xid):
        if reading is not None:
            metrics[reading[0]] = float(reading[1])
    change = m.NodeConditionChanged(
        event_id=f"telemetry/{new.cell}/{sample.node_id}/{sample.at}/{condition}", node_id=sample.node_id,
        cell=new.cell, condition=condition, previous=state.condition, metrics=metrics,
        reason=" | ".join(changed), at=sample.at)
    return replace(new, last_change=change), change


# --------------------------------------------------------------------------- thresholds from a policy
def thresholds_of(policy: m.PolicyChanged) -> Optional[TelemetryArgs]:
    """The telemetry thresholds a PolicyChanged sets: its config's ``telemetry`` object (absent:
    the defaults). None when the core would refuse the policy (bad JSON, unknown strategy or
    argument, a bad value: ``validate_policy``), so the telemetry worker follows exactly the
    policies the cell follows, or when ``telemetry`` itself is refused."""
    from suanli.errors import ModelError, StrategyConfigError

    from .strategies import validate_policy

    try:
        config = policy.config()
        validate_policy(policy.strategy, config)
        return TelemetryArgs.parse(config.get("telemetry"))
    except (ModelError, StrategyConfigError):
        return None
