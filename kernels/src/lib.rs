//! Compiled kernels of the Suanli control plane.
//!
//! `fold`: the audit index's per-record work on one fetched batch of the decisions topic
//! (`projections/audit.py`, `AuditIndex.apply_raw`): positions and skips, the Avro walk
//! that picks the index's fields off a record's bytes, the row and index keys, duplicates,
//! and the batch's writes in key order. The walk runs the same program the Python walker is
//! generated from (`projections/audit_avro.py`, `extractor_program`), so both accept and
//! capture alike; `tests/projections/test_audit_kernel.py` checks that the store each one
//! leaves is the same, byte for byte.
//!
//! `fold_chunks` (with `chunk_headers`) does the same from record sets as a Fetch response
//! carries them (`projections/audit_fetch.py`): it parses Kafka's v2 record batches itself
//! (CRC-32C checked, control batches skipped), so no per-record Python object is made.
//!
//! Contract: a batch the kernel cannot fold exactly as the Python path would (a record to
//! decode with the codec: no program for its writer, an unknown schema id, a body the walker
//! refuses; for record sets also a compressed or older-format batch or a bad CRC) makes it
//! return None, and the caller folds the whole batch the Python way.
//!
//! `score` (bestfit_rows, strand_rows, fgd_raw_states, fgd_class_scores): the scheduler's per-row scoring
//! arithmetic, bit for bit the numpy it replaces (see `score.rs`).
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PySet, PyString, PyTuple};
use std::collections::HashMap;

mod avro;
mod kafka;
mod score;
mod cycle;

const SLOT_EID: usize = 0;
const SLOT_TASK: usize = 1;
const SLOT_TENANT: usize = 2;
const SLOT_NODE: usize = 3;
const SLOT_TO: usize = 4;
const SLOT_FROM: usize = 5;
const SLOT_STRATEGY: usize = 6;
const SLOT_JOB: usize = 7;
const SLOT_BY: usize = 8;
const SLOTS: usize = 9;

/// One step of a program (see `projections/audit_avro.py` for the ops' meaning).
enum Op {
    SkipLong,
    Long,                 // the only long kept: provenance.decided_at
    Bool,
    Advance(usize),
    Bytes,
    Str(Option<usize>),   // Some(slot): kept
    Union(Vec<Vec<Op>>),
    Enum(i64),
    Array(Vec<Op>),
    Map(Vec<Op>),
}

fn slot_of(name: &str) -> PyResult<usize> {
    Ok(match name {
        "f_eid" => SLOT_EID,
        "f_task" => SLOT_TASK,
        "f_tenant" => SLOT_TENANT,
        "f_node" => SLOT_NODE,
        "f_to" => SLOT_TO,
        "f_from" => SLOT_FROM,
        "f_strategy" => SLOT_STRATEGY,
        "f_job" => SLOT_JOB,
        "f_by" => SLOT_BY,
        _ => return Err(PyValueError::new_err(format!("unknown slot {name:?}"))),
    })
}

fn parse_ops(ops: &Bound<'_, PyAny>) -> PyResult<Vec<Op>> {
    let mut out = Vec::new();
    for op in ops.try_iter()? {
        let op = op?;
        let op = op.downcast::<PyTuple>()?;
        let code: String = op.get_item(0)?.extract()?;
        out.push(match code.as_str() {
            "skip_long" => Op::SkipLong,
            "long" => {
                let slot: String = op.get_item(1)?.extract()?;
                if slot != "f_at" {
                    return Err(PyValueError::new_err(format!("long slot {slot:?} is not f_at")));
                }
                Op::Long
            }
            "bool" => Op::Bool,
            "advance" => Op::Advance(op.get_item(1)?.extract()?),
            "bytes" => Op::Bytes,
            "string" => {
                let slot = op.get_item(1)?;
                Op::Str(if slot.is_none() { None } else { Some(slot_of(&slot.extract::<String>()?)?) })
            }
            "union" => {
                let mut branches = Vec::new();
                for branch in op.get_item(1)?.try_iter()? {
                    branches.push(parse_ops(&branch?)?);
                }
                Op::Union(branches)
            }
            "enum" => Op::Enum(op.get_item(1)?.extract()?),
            "array" => Op::Array(parse_ops(&op.get_item(1)?)?),
            "map" => Op::Map(parse_ops(&op.get_item(1)?)?),
            other => return Err(PyValueError::new_err(format!("unknown op {other:?}"))),
        });
    }
    Ok(out)
}

/// What a walk keeps: byte ranges of the string slots, and decided_at.
#[derive(Clone, Copy, Default)]
struct Fields {
    slots: [(u32, u32); SLOTS],
    at: i64,
}

pub(crate) struct Cursor<'a> {
    pub(crate) buf: &'a [u8],
    pub(crate) pos: usize,
}

impl<'a> Cursor<'a> {
    #[inline]
    fn byte(&mut self) -> Option<u8> {
        let b = *self.buf.get(self.pos)?;
        self.pos += 1;
        Some(b)
    }

    /// A varint of any length, value unused (the Python walker's `skip_long`).
    #[inline]
    fn skip_long(&mut self) -> Option<()> {
        while self.byte()? > 127 {}
        Some(())
    }

    /// `schemas/codec.py` `read_long`: at most 10 bytes and 64 bits, zigzag.
    #[inline]
    pub(crate) fn long(&mut self) -> Option<i64> {
        let mut acc: u128 = 0;
        let mut shift = 0u32;
        loop {
            let b = self.byte()?;
            acc |= ((b & 0x7F) as u128) << shift;
            if b & 0x80 == 0 {
                break;
            }
            shift += 7;
            if shift > 63 {
                return None;
            }
        }
        if acc >> 64 != 0 {
            return None;
        }
        let u = acc as u64;
        Some(((u >> 1) as i64) ^ -((u & 1) as i64))
    }

    /// The next `n` bytes, in bounds.
    #[inline]
    pub(crate) fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n)?;
        let s = self.buf.get(self.pos..end)?;
        self.pos = end;
        Some(s)
    }

    /// A length-prefixed string, in bounds and valid UTF-8; its byte range.
    #[inline]
    fn string(&mut self) -> Option<(u32, u32)> {
        let n = self.long()?;
        if n < 0 {
            return None;
        }
        let start = self.pos;
        let end = start.checked_add(n as usize)?;
        if end > self.buf.len() {
            return None;
        }
        std::str::from_utf8(&self.buf[start..end]).ok()?;
        self.pos = end;
        Some((start as u32, end as u32))
    }

    fn walk(&mut self, ops: &[Op], f: &mut Fields) -> Option<()> {
        for op in ops {
            match op {
                Op::SkipLong => self.skip_long()?,
                Op::Long => f.at = self.long()?,
                Op::Bool => {
                    if self.byte()? > 1 {
                        return None;
                    }
                }
                Op::Advance(n) => self.pos = self.pos.checked_add(*n)?,
                Op::Bytes => {
                    let n = self.long()?;
                    if n < 0 {
                        return None;
                    }
                    let end = self.pos.checked_add(n as usize)?;
                    if end > self.buf.len() {
                        return None;
                    }
                    self.pos = end;
                }
                Op::Str(slot) => {
                    let range = self.string()?;
                    if let Some(slot) = slot {
                        f.slots[*slot] = range;
                    }
                }
                Op::Union(branches) => {
                    let idx = self.long()?;
                    if idx < 0 || idx as usize >= branches.len() {
                        return None;
                    }
                    self.walk(&branches[idx as usize], f)?;
                }
                Op::Enum(n) => {
                    let idx = self.long()?;
                    if idx < 0 || idx >= *n {
                        return None;
                    }
                }
                Op::Array(body) | Op::Map(body) => {
                    let is_map = matches!(op, Op::Map(_));
                    let mut count = self.long()? as i128;
                    while count != 0 {
                        if count < 0 {
                            count = -count;
                            self.skip_long()?;
                        }
                        if body.is_empty() && !is_map {
                            // Items of no bytes (an array of nulls): nothing to walk.
                        } else {
                            for _ in 0..count {
                                if is_map {
                                    self.string()?;
                                }
                                self.walk(body, f)?;
                            }
                        }
                        count = self.long()? as i128;
                    }
                }
            }
        }
        Some(())
    }
}

/// A writer schema's program, compiled once.
#[pyclass(frozen)]
struct Walker {
    ops: Vec<Op>,
}

#[pymethods]
impl Walker {
    #[new]
    fn new(program: &Bound<'_, PyAny>) -> PyResult<Self> {
        Ok(Walker { ops: parse_ops(program)? })
    }

    /// The values of `audit_avro.Fields` for one Confluent-framed record, as the Python
    /// extractor returns them, or None where the Python extractor raises.
    fn extract<'py>(&self, py: Python<'py>, value: &[u8]) -> Option<Bound<'py, PyTuple>> {
        let f = self.fields(value)?;
        let s = |i: usize| PyBytes::new(py, &value[f.slots[i].0 as usize..f.slots[i].1 as usize]);
        let node = if f.slots[SLOT_NODE].1 > f.slots[SLOT_NODE].0 { SLOT_NODE } else { SLOT_TO };
        PyTuple::new(py, [s(SLOT_EID).into_any(), s(SLOT_TASK).into_any(), s(SLOT_TENANT).into_any(),
                          s(node).into_any(), s(SLOT_FROM).into_any(), s(SLOT_STRATEGY).into_any(),
                          f.at.into_pyobject(py).ok()?.into_any(), s(SLOT_JOB).into_any(), s(SLOT_BY).into_any()])
            .ok()
    }
}

impl Walker {
    fn fields(&self, value: &[u8]) -> Option<Fields> {
        if value.len() < 5 {
            return None;
        }
        let mut f = Fields::default();
        let mut c = Cursor { buf: value, pos: 5 };
        c.walk(&self.ops, &mut f)?;
        if c.pos != value.len() {
            return None;
        }
        Some(f)
    }
}

/// `audit._part` of UTF-8 bytes: backslash and NUL escaped.
fn esc_into(out: &mut Vec<u8>, part: &[u8]) {
    for &b in part {
        match b {
            b'\\' => out.extend_from_slice(b"\\\\"),
            0 => out.extend_from_slice(b"\\0"),
            _ => out.push(b),
        }
    }
}

/// How the batch treats one writer schema (the Confluent header's schema id).
struct Plan {
    walker: Option<Py<Walker>>, // None with `decision`: records are decoded (fallback)
    decision: bool,             // false: not a decision kind, ignored
    kind_part: Vec<u8>,
    digest: Vec<u8>,
    migrated: bool,
    preempted: bool,
}

struct Entry {
    plan: usize,
    fields: Fields,
    partition: i64,
    offset: i64,
    topic: usize,
    src: usize,    // the bytes object holding the record's value (Folded::sources)
    start: usize,  // the value's range in it
    end: usize,
    row_key: Vec<u8>,
    unique: usize, // index of this row key among the batch's distinct ones
    first: bool,   // the first record of the batch with this row key
}

/// One batch folded by `fold`: what `apply_raw` needs to finish it.
#[pyclass]
struct Folded {
    #[pyo3(get)]
    skipped: u64,
    #[pyo3(get)]
    ignored: u64,
    /// How many records the batch held (data records, for fold_chunks).
    #[pyo3(get)]
    records: u64,
    #[pyo3(get)]
    next_offsets: Py<PyDict>,
    /// fold_chunks: for each chunk, the offset to fetch next (past its last whole batch).
    #[pyo3(get)]
    next_fetch: Vec<i64>,
    entries: Vec<Entry>,
    unique: usize,
    plans: Vec<Plan>,
    topics: Vec<Vec<u8>>,
    sources: Vec<Py<PyBytes>>,
}

#[pymethods]
impl Folded {
    /// The batch's row keys, each once, in the order of first appearance.
    fn row_keys<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        PyList::new(py, self.entries.iter().filter(|e| e.first).map(|e| PyBytes::new(py, &e.row_key)).collect::<Vec<_>>())
    }

    /// The writes: `stored` says, for each of `row_keys()` in order, whether the store holds
    /// it already. Returns `(applied, duplicates, keys, values, digests)`: the keys in
    /// ascending order with their values (rows and index entries), and the digests of the
    /// writer schemas the stored rows name.
    fn writes<'py>(&self, py: Python<'py>, stored: Vec<bool>) -> PyResult<Bound<'py, PyTuple>> {
        if stored.len() != self.unique {
            return Err(PyValueError::new_err("stored: one flag for each of row_keys() is needed"));
        }
        let (mut applied, mut duplicates) = (0u64, 0u64);
        let mut keys = Keys::new(self.entries.len());
        let mut rows: Vec<usize> = Vec::with_capacity(self.entries.len());
        let mut digests: Vec<usize> = Vec::new();
        for (i, e) in self.entries.iter().enumerate() {
            // The first record of an event id is kept unless the store holds it; later ones
            // are duplicates (apply_raw's rule).
            if stored[e.unique] || !e.first {
                duplicates += 1;
                continue;
            }
            applied += 1;
            if !digests.contains(&e.plan) {
                digests.push(e.plan);
            }
            rows.push(i);
            self.index_keys(py, e, &mut keys);
        }
        // Rows ("row\0...") sort after every index key ("ix\0..."); row keys are distinct.
        rows.sort_unstable_by(|a, b| self.entries[*a].row_key.cmp(&self.entries[*b].row_key));
        let empty = PyBytes::new(py, b"");
        let spans = keys.sorted();
        let arena = &keys.arena;
        let out_keys = PyList::new(py, spans.iter().map(|s| PyBytes::new(py, &arena[s.0 as usize..s.1 as usize]))
            .chain(rows.iter().map(|i| PyBytes::new(py, &self.entries[*i].row_key))).collect::<Vec<_>>())?;
        let mut values: Vec<Bound<'py, PyBytes>> = Vec::with_capacity(spans.len() + rows.len());
        values.resize(spans.len(), empty);
        for i in &rows {
            values.push(self.row_value(py, &self.entries[*i])?);
        }
        let out_values = PyList::new(py, values)?;
        let digests = PyList::new(py, digests.iter().map(|p| PyBytes::new(py, &self.plans[*p].digest)))?;
        PyTuple::new(py, [applied.into_pyobject(py)?.into_any(), duplicates.into_pyobject(py)?.into_any(),
                          out_keys.into_any(), out_values.into_any(), digests.into_any()])
    }
}

/// Index keys (empty values) of one batch: one arena, a list of spans per key family.
/// The families' prefixes ("ix\0job\0", "ix\0kind\0", ...) are listed in ascending order
/// and none is a prefix of another, so sorting within each family and concatenating the
/// families in this order sorts all keys, with far cheaper comparisons than one big sort.
struct Keys {
    arena: Vec<u8>,
    families: [Vec<(u32, u32)>; 8],
}

const FAMILIES: [&[u8]; 8] = [b"ix\x00job\x00", b"ix\x00kind\x00", b"ix\x00node\x00", b"ix\x00preemptor\x00",
                              b"ix\x00strategy\x00", b"ix\x00task\x00", b"ix\x00tenant\x00", b"ix\x00time\x00"];
const JOB: usize = 0;
const KIND: usize = 1;
const NODE: usize = 2;
const PREEMPTOR: usize = 3;
const STRATEGY: usize = 4;
const TASK: usize = 5;
const TENANT: usize = 6;
const TIME: usize = 7;

impl Keys {
    fn new(entries: usize) -> Self {
        Keys { arena: Vec::with_capacity(entries * 7 * 64), families: Default::default() }
    }

    /// Appends FAMILIES[family] + part (escaped or not) + the rest, as one key.
    fn push(&mut self, family: usize, part: &[u8], escape: bool, rest: &[&[u8]]) {
        let start = self.arena.len();
        self.arena.extend_from_slice(FAMILIES[family]);
        if escape { esc_into(&mut self.arena, part) } else { self.arena.extend_from_slice(part) }
        for r in rest {
            self.arena.extend_from_slice(r);
        }
        // Spans are u32: a batch's keys past 4 GiB would be cut silently, so refuse it
        // (a panic reaches Python as an exception); batches are a few MiB.
        let end = u32::try_from(self.arena.len()).expect("a batch's index keys exceed 4 GiB");
        self.families[family].push((start as u32, end));
    }

    fn sorted(&mut self) -> Vec<(u32, u32)> {
        let arena = &self.arena;
        let mut out = Vec::with_capacity(self.families.iter().map(Vec::len).sum());
        for family in self.families.iter_mut() {
            family.sort_by(|a, b| arena[a.0 as usize..a.1 as usize].cmp(&arena[b.0 as usize..b.1 as usize]));
            out.extend_from_slice(family);
        }
        out
    }
}

impl Folded {
    /// `RAW_ROW + _RAW_HEADER.pack(digest, partition, offset, len(topic)) + topic + value`.
    fn value<'a>(&'a self, py: Python<'a>, e: &Entry) -> &'a [u8] {
        &self.sources[e.src].as_bytes(py)[e.start..e.end]
    }

    fn row_value<'py>(&self, py: Python<'py>, e: &Entry) -> PyResult<Bound<'py, PyBytes>> {
        let value = self.value(py, e);
        let topic = &self.topics[e.topic];
        let digest = &self.plans[e.plan].digest;
        PyBytes::new_with(py, 1 + digest.len() + 14 + topic.len() + value.len(), |out| {
            let mut at = 0;
            for part in [&[1u8][..], digest, &(e.partition as u32).to_be_bytes(), &e.offset.to_be_bytes(),
                         &(topic.len() as u16).to_be_bytes(), topic, value] {
                out[at..at + part.len()].copy_from_slice(part);
                at += part.len();
            }
            Ok(())
        })
    }

    /// `audit.raw_index_keys` of one entry.
    fn index_keys(&self, py: Python<'_>, e: &Entry, keys: &mut Keys) {
        let value = self.value(py, e);
        let s = |i: usize| &value[e.fields.slots[i].0 as usize..e.fields.slots[i].1 as usize];
        let plan = &self.plans[e.plan];
        let node = if !s(SLOT_NODE).is_empty() { s(SLOT_NODE) } else { s(SLOT_TO) };
        // TS NUL event id, TS the decision time as 16 hex digits (0 when not positive).
        let mut ts_eid = [0u8; 17].to_vec();
        let at = if e.fields.at > 0 { e.fields.at as u64 } else { 0 };
        for i in 0..16 {
            ts_eid[i] = b"0123456789abcdef"[((at >> (60 - 4 * i)) & 0xF) as usize];
        }
        esc_into(&mut ts_eid, s(SLOT_EID));
        let mut tenant = Vec::new();
        esc_into(&mut tenant, s(SLOT_TENANT));
        let tail: &[&[u8]] = &[b"\x00", &tenant, b"\x00", &ts_eid];
        keys.push(TASK, s(SLOT_TASK), true, tail);
        keys.push(STRATEGY, s(SLOT_STRATEGY), true, tail);
        keys.push(KIND, &plan.kind_part, false, tail);
        keys.push(TENANT, &tenant, false, &[b"\x00", &ts_eid]);
        keys.push(TIME, &ts_eid, false, &[]);
        if !s(SLOT_JOB).is_empty() {
            keys.push(JOB, s(SLOT_JOB), true, tail);
        }
        if !s(SLOT_BY).is_empty() && plan.preempted {
            keys.push(PREEMPTOR, s(SLOT_BY), true, tail);
        }
        if !node.is_empty() {
            keys.push(NODE, node, true, tail);
        }
        let from = s(SLOT_FROM);
        if !from.is_empty() && from != node && plan.migrated {
            keys.push(NODE, from, true, tail);
        }
    }
}

/// The fold's state over one batch, whichever way its records arrive.
struct FoldState<'py> {
    py: Python<'py>,
    plans: Vec<Plan>,
    by_header: HashMap<[u8; 5], Option<usize>>,
    positions: Bound<'py, PyDict>,
    next_offsets: Bound<'py, PyDict>,
    offsets: HashMap<(usize, i64), i64>,
    topics: Vec<Vec<u8>>,
    topic_objs: Vec<Bound<'py, PyString>>,
    entries: Vec<Entry>,
    uniques: HashMap<Vec<u8>, usize>,
    sources: Vec<Py<PyBytes>>,
    skipped: u64,
    ignored: u64,
    records: u64,
    cur: Option<(usize, i64)>,
    expected: i64,
}

impl<'py> FoldState<'py> {
    fn new(py: Python<'py>, positions: &Bound<'py, PyDict>, plans: &Bound<'py, PyDict>) -> PyResult<Self> {
        let mut plan_list: Vec<Plan> = Vec::new();
        let mut by_header: HashMap<[u8; 5], Option<usize>> = HashMap::new();
        for (header, plan) in plans.iter() {
            let header: [u8; 5] = header.extract::<Vec<u8>>()?.try_into()
                .map_err(|_| PyValueError::new_err("a plan's header is not 5 bytes"))?;
            if plan.is_none() {
                by_header.insert(header, None);
                continue;
            }
            let plan = plan.downcast::<PyTuple>()?;
            let walker = plan.get_item(0)?;
            plan_list.push(Plan {
                walker: if walker.is_none() { None } else { Some(walker.extract()?) },
                decision: plan.get_item(1)?.extract()?,
                kind_part: plan.get_item(2)?.extract()?,
                digest: plan.get_item(3)?.extract()?,
                migrated: plan.get_item(4)?.extract()?,
                preempted: plan.get_item(5)?.extract()?,
            });
            by_header.insert(header, Some(plan_list.len() - 1));
        }
        Ok(FoldState {
            py, plans: plan_list, by_header, positions: positions.clone(), next_offsets: PyDict::new(py),
            offsets: HashMap::new(), topics: Vec::new(), topic_objs: Vec::new(), entries: Vec::new(),
            uniques: HashMap::new(), sources: Vec::new(), skipped: 0, ignored: 0, records: 0, cur: None, expected: 0,
        })
    }

    fn topic_index(&mut self, obj: Bound<'py, PyString>) -> PyResult<usize> {
        if let Some(i) = self.topic_objs.iter().position(|t| t.is(&obj)) {
            return Ok(i);
        }
        let text = obj.to_str()?.as_bytes().to_vec();
        if let Some(i) = self.topics.iter().position(|t| *t == text) {
            return Ok(i);
        }
        self.topics.push(text);
        self.topic_objs.push(obj);
        Ok(self.topics.len() - 1)
    }

    /// One record, in log order per partition; `value`: (source, start, end), None for a
    /// tombstone. Ok(false): the record is one for the codec (the caller gives up).
    fn record(&mut self, topic: usize, partition: i64, offset: i64, value: Option<(usize, usize, usize)>)
              -> PyResult<bool> {
        self.records += 1;
        if self.cur != Some((topic, partition)) {
            if let Some(tp) = self.cur {
                self.offsets.insert(tp, self.expected);
            }
            self.cur = Some((topic, partition));
            self.expected = match self.offsets.get(&(topic, partition)) {
                Some(o) => *o,
                None => {
                    let stored = match self.positions.get_item((self.topic_objs[topic].clone(), partition))? {
                        Some(v) => v.extract()?,
                        None => 0,
                    };
                    self.offsets.insert((topic, partition), stored);
                    self.next_offsets.set_item((self.topic_objs[topic].clone(), partition), stored)?;
                    stored
                }
            };
        }
        if offset < self.expected {
            self.skipped += 1;
            return Ok(true);
        }
        self.expected = offset + 1;
        let (src, start, end) = match value {
            Some(v) => v,
            None => return Ok(false),
        };
        let py = self.py;
        let bytes = &self.sources[src].as_bytes(py)[start..end];
        if bytes.len() < 5 || bytes[0] != 0 {
            return Ok(false);
        }
        let header: [u8; 5] = bytes[..5].try_into().unwrap();
        let plan = match self.by_header.get(&header) {
            Some(Some(p)) => *p,
            _ => return Ok(false), // unknown writer: the codec decides
        };
        let p = &self.plans[plan];
        if !p.decision {
            self.ignored += 1;
            return Ok(true);
        }
        let fields = match p.walker.as_ref().and_then(|w| w.get().fields(bytes)) {
            Some(f) => f,
            None => return Ok(false), // no walker for this writer, or the walker refuses the body
        };
        let eid = &bytes[fields.slots[SLOT_EID].0 as usize..fields.slots[SLOT_EID].1 as usize];
        if eid.is_empty() {
            self.ignored += 1;
            return Ok(true);
        }
        let mut row_key = b"row\x00".to_vec();
        esc_into(&mut row_key, eid);
        let n = self.uniques.len();
        let (unique, first) = match self.uniques.entry(row_key.clone()) {
            std::collections::hash_map::Entry::Occupied(o) => (*o.get(), false),
            std::collections::hash_map::Entry::Vacant(v) => (*v.insert(n), true),
        };
        self.entries.push(Entry { plan, fields, partition, offset, topic, src, start, end, row_key, unique, first });
        Ok(true)
    }

    fn finish(mut self, next_fetch: Vec<i64>) -> PyResult<Folded> {
        if let Some(tp) = self.cur {
            self.offsets.insert(tp, self.expected);
        }
        for ((topic, partition), offset) in &self.offsets {
            self.next_offsets.set_item((self.topic_objs[*topic].clone(), *partition), *offset)?;
        }
        Ok(Folded { skipped: self.skipped, ignored: self.ignored, records: self.records, next_offsets: self.next_offsets.unbind(),
                    next_fetch, unique: self.uniques.len(), entries: self.entries, plans: self.plans,
                    topics: self.topics, sources: self.sources })
    }
}

/// Fold one fetched batch (records with `topic`, `partition`, `offset`, `value`, in log
/// order per partition). `positions`: `{(topic, partition): next offset}` as stored;
/// `plans`: Confluent header (5 bytes) -> `(walker or None, decision, kind_part, digest,
/// migrated, preempted)` for every header in the batch. None: the batch has a record the
/// kernel does not fold (see the module's contract).
#[pyfunction]
fn fold<'py>(py: Python<'py>, records: &Bound<'py, PyAny>, positions: &Bound<'py, PyDict>,
             plans: &Bound<'py, PyDict>) -> PyResult<Option<Folded>> {
    let mut state = FoldState::new(py, positions, plans)?;
    let (a_topic, a_part, a_off, a_value) = (pyo3::intern!(py, "topic"), pyo3::intern!(py, "partition"),
                                             pyo3::intern!(py, "offset"), pyo3::intern!(py, "value"));
    for rec in records.try_iter()? {
        let rec = rec?;
        let topic = state.topic_index(rec.getattr(a_topic)?.downcast_into::<PyString>()?)?;
        let partition: i64 = rec.getattr(a_part)?.extract()?;
        let offset: i64 = rec.getattr(a_off)?.extract()?;
        let value = rec.getattr(a_value)?;
        let value = if value.is_none() {
            None
        } else {
            let value = value.downcast_into::<PyBytes>()?;
            let len = value.as_bytes().len();
            state.sources.push(value.unbind());
            Some((state.sources.len() - 1, 0, len))
        };
        if !state.record(topic, partition, offset, value)? {
            return Ok(None);
        }
    }
    Ok(Some(state.finish(Vec::new())?))
}

/// A Kafka record set (v2 record batches, uncompressed), batch by batch: calls `each` with
/// (offset, value range) for every record of a data batch with `from <= offset < to`.
/// Returns the offset past the last whole batch (a trailing partial batch, as a fetch may
/// end with, is left for the next fetch), or None for anything else: a compressed or
/// older-format batch, a CRC-32C mismatch, a malformed record (aiokafka's parser decides).
fn record_set(buf: &[u8], from: i64, to: i64, mut each: impl FnMut(i64, Option<(usize, usize)>) -> PyResult<bool>)
              -> PyResult<Option<i64>> {
    let be_i64 = |at: usize| i64::from_be_bytes(buf[at..at + 8].try_into().unwrap());
    let be_i32 = |at: usize| i32::from_be_bytes(buf[at..at + 4].try_into().unwrap());
    let mut next = from;
    let mut pos = 0usize;
    while buf.len() - pos >= 61 {
        let base = be_i64(pos);
        let length = be_i32(pos + 8);
        if length < 49 {
            return Ok(None);
        }
        let total = 12 + length as usize;
        if pos + total > buf.len() {
            break; // partial: the broker cut the response here
        }
        if buf[pos + 16] != 2 {
            return Ok(None);
        }
        let crc = u32::from_be_bytes(buf[pos + 17..pos + 21].try_into().unwrap());
        if crc32c::crc32c(&buf[pos + 21..pos + total]) != crc {
            return Ok(None);
        }
        let attributes = i16::from_be_bytes(buf[pos + 21..pos + 23].try_into().unwrap());
        if attributes & 0x07 != 0 {
            return Ok(None); // compressed
        }
        let last_delta = be_i32(pos + 23) as i64;
        let count = be_i32(pos + 57);
        if attributes & 0x20 == 0 {
            let mut c = Cursor { buf: &buf[..pos + total], pos: pos + 61 };
            for _ in 0..count {
                let parsed = (|| -> Option<(i64, Option<(usize, usize)>)> {
                    let len = c.long()?;
                    let end = c.pos.checked_add(usize::try_from(len).ok()?)?;
                    c.byte()?; // attributes
                    c.long()?; // timestamp delta
                    let delta = c.long()?;
                    let key = c.long()?;
                    if key > 0 {
                        c.pos = c.pos.checked_add(key as usize)?;
                    }
                    let vlen = c.long()?;
                    let value = if vlen >= 0 {
                        let start = c.pos;
                        c.pos = c.pos.checked_add(vlen as usize)?;
                        Some((start, c.pos))
                    } else {
                        None
                    };
                    let headers = c.long()?;
                    for _ in 0..headers.max(0) {
                        let k = c.long()?;
                        c.pos = c.pos.checked_add(usize::try_from(k).ok()?)?;
                        let v = c.long()?;
                        if v > 0 {
                            c.pos = c.pos.checked_add(v as usize)?;
                        }
                    }
                    if c.pos != end || end > pos + total {
                        return None;
                    }
                    Some((base + delta, value))
                })();
                let (offset, value) = match parsed {
                    Some(p) => p,
                    None => return Ok(None),
                };
                if offset >= from && offset < to && !each(offset, value)? {
                    return Ok(None);
                }
            }
            if c.pos != pos + total {
                return Ok(None);
            }
        }
        next = next.max(base + last_delta + 1);
        pos += total;
    }
    Ok(Some(next))
}

/// The Confluent headers (5 bytes) of the values of data records in `chunks` (see
/// `fold_chunks`), for the caller to make their plans, and each chunk's next fetch offset
/// (as `fold_chunks` gives it); None if a chunk is not one `fold_chunks` parses.
#[pyfunction]
fn chunk_headers<'py>(py: Python<'py>, chunks: &Bound<'py, PyAny>)
                      -> PyResult<Option<(Bound<'py, PySet>, Vec<i64>)>> {
    let mut seen: std::collections::HashSet<[u8; 5]> = std::collections::HashSet::new();
    let mut next_fetch = Vec::new();
    for chunk in chunks.try_iter()? {
        let chunk = chunk?;
        let (_topic, _partition, from, to, records): (Bound<'py, PyAny>, i64, i64, i64, Bound<'py, PyBytes>) =
            chunk.extract()?;
        let buf = records.as_bytes();
        let parsed = record_set(buf, from, to, |_offset, value| {
            if let Some((start, end)) = value {
                if end - start >= 5 && buf[start] == 0 {
                    seen.insert(buf[start..start + 5].try_into().unwrap());
                }
            }
            Ok(true)
        })?;
        match parsed {
            Some(next) => next_fetch.push(next),
            None => return Ok(None),
        }
    }
    let set = PySet::empty(py)?;
    for header in seen {
        set.add(PyBytes::new(py, &header))?;
    }
    Ok(Some((set, next_fetch)))
}

/// `fold` over record sets as fetched: `chunks` are `(topic, partition, fetch_offset, end,
/// record set bytes)` (`projections/audit_fetch.py` `Chunk`); the records folded are the
/// data records with `fetch_offset <= offset < end`, as a consumer would hand them out.
/// `next_fetch` of the result gives each chunk's next fetch offset. None: a record set it
/// does not parse, or a record for the codec.
#[pyfunction]
fn fold_chunks<'py>(py: Python<'py>, chunks: &Bound<'py, PyAny>, positions: &Bound<'py, PyDict>,
                    plans: &Bound<'py, PyDict>) -> PyResult<Option<Folded>> {
    let mut state = FoldState::new(py, positions, plans)?;
    let mut next_fetch = Vec::new();
    for chunk in chunks.try_iter()? {
        let chunk = chunk?;
        let (topic, partition, from, to, records): (Bound<'py, PyString>, i64, i64, i64, Bound<'py, PyBytes>) =
            chunk.extract()?;
        let topic = state.topic_index(topic)?;
        state.sources.push(records.clone().unbind());
        let src = state.sources.len() - 1;
        let buf = records.as_bytes();
        let next = record_set(buf, from, to, |offset, value| {
            state.record(topic, partition, offset, value.map(|(start, end)| (src, start, end)))
        })?;
        match next {
            Some(n) => next_fetch.push(n),
            None => return Ok(None),
        }
    }
    Ok(Some(state.finish(next_fetch)?))
}

#[pymodule]
fn suanli_kernels(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Walker>()?;
    m.add_class::<Folded>()?;
    m.add_class::<avro::AvroProgram>()?;
    m.add_function(wrap_pyfunction!(fold, m)?)?;
    m.add_function(wrap_pyfunction!(fold_chunks, m)?)?;
    m.add_function(wrap_pyfunction!(chunk_headers, m)?)?;
    m.add_function(wrap_pyfunction!(score::bestfit_rows, m)?)?;
    m.add_function(wrap_pyfunction!(score::strand_rows, m)?)?;
    m.add_function(wrap_pyfunction!(score::fgd_raw_states, m)?)?;
    m.add_function(wrap_pyfunction!(score::fgd_class_scores, m)?)?;
    m.add_function(wrap_pyfunction!(cycle::filter_pass, m)?)?;
    m.add_function(wrap_pyfunction!(cycle::rank_scores, m)?)?;
    m.add_function(wrap_pyfunction!(cycle::class_rows, m)?)?;
    m.add_function(wrap_pyfunction!(cycle::rank_classes, m)?)?;
    m.add_function(wrap_pyfunction!(cycle::weighted_total, m)?)?;
    m.add_function(wrap_pyfunction!(cycle::mix64, m)?)?;
    m.add_function(wrap_pyfunction!(kafka::murmur2, m)?)?;
    Ok(())
}
