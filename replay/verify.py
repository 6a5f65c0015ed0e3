"""``--verify``: regenerated decisions against recorded ones, byte for byte.

Recorded decisions first lose redelivered duplicates (same event id: the first record is
kept), then the two sequences are compared record by record. The report names the first
divergence: its index, both event ids, a decoded summary of both records, the fields that
differ and the input position the decision was made at; and, when placements themselves
differ, the first task placed differently.

**An undecided tail is not a divergence.** A log exported from a live cell (or one whose
scheduler was stopped) holds inputs the scheduler had not decided yet when the export read
the decisions topic. When the recorded decisions end, and every regenerated decision past
that point answers an input *after* the last input a recorded decision answered, the verdict
is IDENTICAL over the decided part and the report names the tail (``undecided``: that input's
offset, the inputs after it, the regenerated decisions not compared). A recording that stops
partway through one input's decisions is still a divergence.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from suanli.schemas.codec import Codec

from .log_replay import Divergence, drop_redeliveries, first_divergence
from .logdir import LogDir
from .rerun import Replayed


@dataclass
class VerifyReport:
    recorded: int                 # recorded decision records, duplicates included
    duplicates: int               # redelivered duplicates dropped
    regenerated: int
    divergence: Divergence | None
    details: dict[str, Any]
    undecided: dict[str, int] | None = None    # the tail the recording had not decided (see above)

    @property
    def identical(self) -> bool:
        return self.divergence is None


def _decode(codec: Codec, value: bytes | None) -> tuple[str | None, dict[str, Any] | None]:
    if value is None:
        return None, None
    try:
        return codec.decode(value)
    except Exception as exc:  # noqa: BLE001 - describe, never crash, on a bad record
        return f"<undecodable: {exc}>", None


def summary(kind: str | None, payload: dict[str, Any] | None) -> dict[str, Any] | None:
    """The fields of a decision that a person checks first."""
    if payload is None:
        return None if kind is None else {"kind": kind}
    prov = payload.get("provenance") or {}
    pos = prov.get("input") or {}
    out = {"kind": kind, "event_id": payload.get("event_id"), "task_id": payload.get("task_id"),
           "node_id": payload.get("node_id"), "gpu_devices": payload.get("gpu_devices"),
           "reasons": [r.get("reason") for r in payload.get("reasons") or []] or None,
           "input": f"{pos.get('topic')}[{pos.get('partition')}]@{pos.get('offset')}" if pos else None,
           "strategy": prov.get("strategy")}
    return {k: v for k, v in out.items() if v is not None}


def diff_fields(a: Any, b: Any, path: str = "", limit: int = 8) -> list[str]:
    """Dotted paths where two decoded values differ (at most ``limit``)."""
    out: list[str] = []

    def walk(x: Any, y: Any, p: str) -> None:
        if len(out) >= limit:
            return
        if isinstance(x, dict) and isinstance(y, dict):
            for k in sorted(set(x) | set(y), key=str):
                walk(x.get(k), y.get(k), f"{p}.{k}" if p else str(k))
        elif isinstance(x, list) and isinstance(y, list) and len(x) == len(y):
            for i, (u, v) in enumerate(zip(x, y)):
                walk(u, v, f"{p}[{i}]")
        elif x != y:
            out.append(f"{p}: {_short(x)} -> {_short(y)}")

    walk(a, b, path)
    return out


def _short(v: Any, n: int = 60) -> str:
    s = repr(v)
    return s if len(s) <= n else s[: n - 3] + "..."


def _placement(kind: str | None, payload: dict[str, Any] | None) -> tuple | None:
    if payload is None:
        return None
    return (kind, payload.get("task_id"), payload.get("node_id"), tuple(payload.get("gpu_devices") or ()))


def verify(log: LogDir, replayed: Replayed) -> VerifyReport:
    codec = replayed.codec
    raw = [r.value for r in log.decisions()]
    recorded, dupes = drop_redeliveries(codec, raw)
    regenerated = replayed.regenerated
    div = first_divergence(recorded, regenerated)
    undecided = _undecided_tail(log, codec, recorded, regenerated, div)
    if undecided is not None:
        return VerifyReport(len(raw), dupes, len(regenerated), None, {}, undecided)
    details: dict[str, Any] = {}
    if div is not None:
        ka, pa = _decode(codec, div.recorded)
        kb, pb = _decode(codec, div.regenerated)
        details["recorded"] = summary(ka, pa)
        details["regenerated"] = summary(kb, pb)
        if pa is not None and pb is not None:
            details["fields"] = diff_fields({"kind": ka, **pa}, {"kind": kb, **pb})
        details["first_placement_difference"] = _first_placement_difference(codec, recorded, regenerated, div.index)
        details["strategies"] = {"recorded": _strategies(codec, recorded), "regenerated": _strategies(codec, regenerated)}
    return VerifyReport(len(raw), dupes, len(regenerated), div, details)


def _input_offset(codec: Codec, value: bytes | None, partition: int) -> int | None:
    """The cell-log offset of the input a decision answered (None: not of that partition)."""
    _, payload = _decode(codec, value)
    pos = ((payload or {}).get("provenance") or {}).get("input") or {}
    return pos.get("offset") if pos.get("partition") == partition else None


def _undecided_tail(log: LogDir, codec: Codec, recorded: list[bytes], regenerated: list[bytes],
                    div: Divergence | None) -> dict[str, int] | None:
    """The undecided tail (module docstring) when ``div`` is only that, else None."""
    if div is None or div.recorded is not None or not recorded:
        return None                                # identical, a real difference, or nothing to compare
    last = max((o for o in (_input_offset(codec, v, log.partition) for v in recorded) if o is not None), default=None)
    if last is None:
        return None
    for value in regenerated[div.index:]:
        offset = _input_offset(codec, value, log.partition)
        if offset is None or offset <= last:
            return None                            # the recording stopped inside a decided input
    return {"after_offset": last, "inputs": sum(1 for r in log.inputs() if r.offset > last),
            "decisions_not_compared": len(regenerated) - div.index}


def recorded_pins(log: LogDir) -> dict[str, str]:
    """Strategy name -> the version its recorded decisions name, for every strategy that can
    still build that version (``processors.strategies.versions``): what to pin with
    ``pinned_versions`` so a log recorded before a new version landed verifies under the
    version that made it (the first version seen per name: a log that changed versions
    midway diverges where it changed)."""
    from suanli.processors.strategies import UnknownStrategyError, versions

    pins: dict[str, str] = {}
    for ref in _strategies(log.codec(), [r.value for r in log.decisions()]):
        name, _, version = ref.rpartition("@")
        try:
            buildable = versions(name)
        except UnknownStrategyError:
            continue
        if name not in pins and version in buildable:
            pins[name] = version
    return pins


def _strategies(codec: Codec, values: list[bytes]) -> list[str]:
    """``name@version`` of every strategy that made these decisions (first-seen order)."""
    seen: dict[str, None] = {}
    for decoded in codec.decode_many(values):
        payload = None if isinstance(decoded, Exception) else decoded[1]
        ref = ((payload or {}).get("provenance") or {}).get("strategy") or {}
        if ref:
            seen.setdefault(f"{ref.get('name')}@{ref.get('version')}", None)
    return list(seen)


def _first_placement_difference(codec: Codec, rec: list[bytes], gen: list[bytes], start: int) -> dict | None:
    """From ``start`` on, the first index whose (kind, task, node, devices) differ."""
    for i in range(start, max(len(rec), len(gen))):
        a = _decode(codec, rec[i]) if i < len(rec) else (None, None)
        b = _decode(codec, gen[i]) if i < len(gen) else (None, None)
        if _placement(*a) != _placement(*b):
            return {"index": i, "recorded": summary(*a), "regenerated": summary(*b)}
    return None


def describe(report: VerifyReport, replayed: Replayed) -> str:
    """Human-readable verdict, several lines."""
    pre = (f" after re-applying {replayed.prefix:,} earlier records in {replayed.prefix_seconds:.2f}s"
           if replayed.prefix else "")
    head = (f"inputs {replayed.inputs:,} in {replayed.seconds:.2f}s ({replayed.events_per_s:,.0f} events/s){pre}; "
            f"decisions: recorded {report.recorded:,} ({report.duplicates:,} redelivered duplicates dropped), "
            f"regenerated {report.regenerated:,}")
    if report.identical and report.undecided:
        u = report.undecided
        return (head + "\nIDENTICAL: every recorded decision equals the regenerated one byte for byte"
                f"\n  not compared: the recording ends with the decisions of input offset {u['after_offset']}; "
                f"the {u['inputs']:,} inputs after it had no recorded decision when the log was exported (its "
                f"scheduler was behind or stopped), so their {u['decisions_not_compared']:,} regenerated "
                "decisions are not compared")
    if report.identical:
        return head + "\nIDENTICAL: every regenerated decision equals the recorded one byte for byte"
    d = report.divergence
    lines = [head, f"DIVERGED at decision #{d.index}"]
    for side in ("recorded", "regenerated"):
        s = report.details.get(side)
        lines.append(f"  {side:<11}: " + (", ".join(f"{k}={v}" for k, v in s.items()) if s else "(none: sequence ended)"))
    for f in report.details.get("fields") or []:
        lines.append(f"  differs    : {f}")
    p = report.details.get("first_placement_difference")
    if p is None:
        lines.append("  every placement (task, node, devices) is the same: only other fields differ")
    elif p["index"] != d.index:
        lines.append(f"  first different placement at #{p['index']}: recorded {p['recorded']} / regenerated {p['regenerated']}")
    st = report.details.get("strategies") or {}
    if st.get("recorded") != st.get("regenerated"):
        lines.append(f"  note: recorded decisions were made by {', '.join(st.get('recorded') or ['-'])}; this build "
                     f"runs {', '.join(st.get('regenerated') or ['-'])}: the strategy code changed since the recording")
    if replayed.local_schemas:
        lines.append(f"  note: encoded with schemas the log directory does not hold: {replayed.local_schemas}")
    return "\n".join(lines)
