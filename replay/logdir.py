"""A log directory: one cell's recorded input log and decisions, self-describing.

Layout (``format`` 1)::

    DIR/cell.json        what was exported: cell, namespace, source topics, offset/time
                         range, record counts, node-list source, the cell's policy at the
                         start of the range *as the cell held it* (``initial_policy``)
    DIR/strategy.json    {"strategy": name, "config": {...}}: that policy with every
                         effective default made explicit (see ``strategy_config.py``);
                         edit it to replay the same inputs under another configuration
    DIR/inputs.avro      Avro object container file: the cell-log records, in log order
    DIR/decisions.avro   Avro object container file: the recorded decision records, in
                         decisions-topic order (redelivered duplicates kept as recorded)
    DIR/schemas/ID.avsc  the Avro writer schema of every schema id the records reference,
                         plus the current id of every event the core may encode
    DIR/prefix.avro      only when the range does not start at the cell's first record:
                         the cell's records before the range, which a replay re-applies
                         silently (``CellRunner.catch_up``) to rebuild the state first

Why records and not a state snapshot for the prefix: a restored ``CellState`` snapshot
does not decide like the state it was taken from (the FGD plugin's "observed" typical-task
cache holds the histogram of the first decision of its refresh epoch, and a restore
recomputes it from the current one), so only re-applying the prefix reproduces the
live decisions byte for byte. See ``tests/replay/test_replay_verify.py``.

The OCFs use :data:`RECORD_SCHEMA`: ``topic, partition, offset, timestamp, key, value``
with the raw wire bytes, so a replay feeds the core exactly what Kafka held.
:class:`DirRegistry` serves ``schemas/`` through the :class:`RegistryClient` calls the
codec makes, so a log directory replays with no registry and no Kafka.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

import fastavro

from suanli.errors import ReplayError
from suanli.schemas.codec import Codec, split_frame
from suanli.streams.records import RawRecord

from .dir_registry import DirRegistry

FORMAT = 1
CELL_FILE = "cell.json"
STRATEGY_FILE = "strategy.json"
INPUTS_FILE = "inputs.avro"
DECISIONS_FILE = "decisions.avro"
SCHEMAS_DIR = "schemas"
PREFIX_FILE = "prefix.avro"

RECORD_SCHEMA = {
    "type": "record", "name": "LogRecord", "namespace": "io.suanli.replay",
    "doc": "One Kafka record as it was stored: coordinates, timestamp, raw key and value bytes.",
    "fields": [
        {"name": "topic", "type": "string", "doc": "Topic it was read from."},
        {"name": "partition", "type": "int", "doc": "Partition."},
        {"name": "offset", "type": "long", "doc": "Offset in the partition."},
        {"name": "timestamp", "type": "long", "doc": "Kafka record timestamp, epoch milliseconds."},
        {"name": "key", "type": ["null", "bytes"], "default": None, "doc": "Raw key bytes."},
        {"name": "value", "type": ["null", "bytes"], "default": None,
         "doc": "Raw value bytes (Confluent wire format: 0x00, schema id, Avro body)."},
    ],
}
_PARSED = fastavro.parse_schema(RECORD_SCHEMA)


# --------------------------------------------------------------------------- OCF
def write_records(path: Path, records: Iterable[RawRecord], *, role: str, cell: str) -> int:
    """Write records to an Avro object container file; returns how many."""
    n = 0

    def rows() -> Iterator[dict[str, Any]]:
        nonlocal n
        for r in records:
            n += 1
            yield {"topic": r.topic, "partition": int(r.partition), "offset": int(r.offset),
                   "timestamp": int(r.timestamp or 0), "key": r.key, "value": r.value}

    with open(path, "wb") as out:
        fastavro.writer(out, _PARSED, rows(), codec="deflate",
                        metadata={"suanli.role": role, "suanli.cell": cell, "suanli.format": str(FORMAT)})
    return n


def read_records(path: Path) -> Iterator[RawRecord]:
    """The records of an OCF written by :func:`write_records`, in file order."""
    try:
        with open(path, "rb") as f:
            for row in fastavro.reader(f):
                yield RawRecord(row["topic"], row["partition"], row["offset"], row["timestamp"],
                                row["key"], row["value"])
    except FileNotFoundError:
        raise ReplayError(f"{path} is missing: not a complete log directory") from None
    except (ValueError, EOFError, StopIteration) as exc:
        raise ReplayError(f"{path} is not a readable Avro object container file: {exc}") from None


def schema_ids(records: Iterable[RawRecord]) -> set[int]:
    """Schema ids referenced by record values (unframed values are skipped)."""
    ids = set()
    for r in records:
        try:
            ids.add(split_frame(r.value)[0])
        except ValueError:
            pass
    return ids


# --------------------------------------------------------------------------- dir
def write_logdir(path: Path, *, cell_meta: dict[str, Any], strategy: dict[str, Any],
                 inputs: list[RawRecord], decisions: list[RawRecord], schemas: dict[int, dict],
                 prefix: list[RawRecord] | None = None) -> Path:
    """Write a complete log directory (see the module docstring). Returns ``path``."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    cell = cell_meta["cell"]
    missing = schema_ids(inputs) | schema_ids(decisions) | schema_ids(prefix or [])
    missing -= set(schemas)
    if missing:
        raise ReplayError(f"no writer schema for ids {sorted(missing)}: the directory would not be self-describing")
    sdir = path / SCHEMAS_DIR
    sdir.mkdir(exist_ok=True)
    for old in sdir.glob("*.avsc"):
        old.unlink()
    for sid, schema in sorted(schemas.items()):
        (sdir / f"{sid}.avsc").write_text(json.dumps(schema, indent=2) + "\n")
    write_records(path / INPUTS_FILE, inputs, role="inputs", cell=cell)
    write_records(path / DECISIONS_FILE, decisions, role="decisions", cell=cell)
    pre = path / PREFIX_FILE
    if prefix:
        write_records(pre, prefix, role="prefix", cell=cell)
    elif pre.exists():
        pre.unlink()
    meta = dict(cell_meta, format=FORMAT, prefix=PREFIX_FILE if prefix else None,
                counts={"inputs": len(inputs), "decisions": len(decisions), "schemas": len(schemas),
                        "prefix": len(prefix or [])})
    (path / CELL_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    (path / STRATEGY_FILE).write_text(json.dumps(strategy, indent=2, sort_keys=True) + "\n")
    return path


@dataclass
class LogDir:
    """An opened log directory. :meth:`open` checks it is complete."""

    path: Path
    meta: dict[str, Any]
    strategy: dict[str, Any]

    @classmethod
    def open(cls, path: str | Path) -> "LogDir":
        path = Path(path)
        if not path.is_dir():
            raise ReplayError(f"{path} is not a directory (expected a log directory written by `suanli export`)")
        meta = _read_json(path / CELL_FILE)
        if meta.get("format") != FORMAT:
            raise ReplayError(f"{path / CELL_FILE}: unsupported log directory format {meta.get('format')!r}")
        strategy = _read_json(path / STRATEGY_FILE)
        if not isinstance(strategy.get("strategy"), str) or not isinstance(strategy.get("config"), dict):
            raise ReplayError(f"{path / STRATEGY_FILE} must be {{\"strategy\": name, \"config\": {{...}}}}")
        for name in (INPUTS_FILE, DECISIONS_FILE):
            if not (path / name).is_file():
                raise ReplayError(f"{path / name} is missing: not a complete log directory")
        return cls(path, meta, strategy)

    @property
    def cell(self) -> str:
        return self.meta["cell"]

    @property
    def partition(self) -> int:
        return int(self.meta["inputs"]["partition"])

    @property
    def namespace(self) -> str:
        """The namespace the log was exported from (the replay's topic names)."""
        from .log_replay import REPLAY_NAMESPACE

        return self.meta.get("namespace") or REPLAY_NAMESPACE

    def inputs(self) -> Iterator[RawRecord]:
        return read_records(self.path / INPUTS_FILE)

    def decisions(self) -> list[RawRecord]:
        return list(read_records(self.path / DECISIONS_FILE))

    def prefix(self) -> Iterator[RawRecord]:
        """The cell's records before the range (empty when it starts at the first one)."""
        name = self.meta.get("prefix")
        if not name:
            return iter(())
        if not (self.path / name).is_file():
            raise ReplayError(f"{self.path / name} is missing (cell.json says the range starts mid-log)")
        return read_records(self.path / name)

    def registry(self) -> DirRegistry:
        return DirRegistry.from_dir(self.path / SCHEMAS_DIR)

    def codec(self) -> Codec:
        """A codec whose schemas come from this directory only (no registry needed); it
        encodes in the recorded schemas where that loses nothing (``recorded_codec.py``)."""
        from .recorded_codec import RecordedCodec
        return RecordedCodec(self.registry())


def _read_json(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise ReplayError(f"{path} is missing: not a complete log directory") from None
    except json.JSONDecodeError as exc:
        raise ReplayError(f"{path} is not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise ReplayError(f"{path} must hold a JSON object")
    return doc
