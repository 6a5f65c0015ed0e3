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
//! Contract: a batch the kernel cannot fold exactly as the Python path would (a record to
//! decode with the codec: no program for its writer, an unknown schema id, a body the walker
//! refuses) makes `fold` return None, and the caller folds the whole batch the Python way.
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};
use std::collections::HashMap;

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

struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
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
    fn long(&mut self) -> Option<i64> {
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
    value: Py<PyBytes>,
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
    #[pyo3(get)]
    next_offsets: Py<PyDict>,
    entries: Vec<Entry>,
    unique: usize,
    plans: Vec<Plan>,
    topics: Vec<Vec<u8>>,
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
        self.families[family].push((start as u32, self.arena.len() as u32));
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
    fn row_value<'py>(&self, py: Python<'py>, e: &Entry) -> PyResult<Bound<'py, PyBytes>> {
        let value = e.value.bind(py).as_bytes();
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
        let value = e.value.bind(py).as_bytes();
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

/// Fold one fetched batch (records with `topic`, `partition`, `offset`, `value`, in log
/// order per partition). `positions`: `{(topic, partition): next offset}` as stored;
/// `plans`: Confluent header (5 bytes) -> `(walker or None, decision, kind_part, digest,
/// migrated, preempted)` for every header in the batch. None: the batch has a record the
/// kernel does not fold (see the module's contract).
#[pyfunction]
fn fold(py: Python<'_>, records: &Bound<'_, PyAny>, positions: &Bound<'_, PyDict>, plans: &Bound<'_, PyDict>)
        -> PyResult<Option<Folded>> {
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
    let next_offsets = PyDict::new(py);
    let mut offsets: HashMap<(usize, i64), i64> = HashMap::new();
    let mut topics: Vec<Vec<u8>> = Vec::new();
    let mut topic_objs: Vec<Bound<'_, PyString>> = Vec::new();
    let mut entries: Vec<Entry> = Vec::new();
    let mut uniques: HashMap<Vec<u8>, usize> = HashMap::new();
    let (mut skipped, mut ignored) = (0u64, 0u64);
    let mut cur: Option<(usize, i64)> = None;
    let mut expected: i64 = 0;
    let (a_topic, a_part, a_off, a_value) = (pyo3::intern!(py, "topic"), pyo3::intern!(py, "partition"),
                                             pyo3::intern!(py, "offset"), pyo3::intern!(py, "value"));
    for rec in records.try_iter()? {
        let rec = rec?;
        let topic_obj = rec.getattr(a_topic)?;
        let topic_obj = topic_obj.downcast_into::<PyString>()?;
        let topic = match topic_objs.iter().position(|t| t.is(&topic_obj)) {
            Some(i) => i,
            None => {
                let text = topic_obj.to_str()?.as_bytes().to_vec();
                match topics.iter().position(|t| *t == text) {
                    Some(i) => i,
                    None => {
                        topics.push(text);
                        topic_objs.push(topic_obj.clone());
                        topics.len() - 1
                    }
                }
            }
        };
        let partition: i64 = rec.getattr(a_part)?.extract()?;
        let offset: i64 = rec.getattr(a_off)?.extract()?;
        if cur != Some((topic, partition)) {
            if let Some(tp) = cur {
                offsets.insert(tp, expected);
            }
            cur = Some((topic, partition));
            expected = match offsets.get(&(topic, partition)) {
                Some(o) => *o,
                None => {
                    let key = (topic_objs[topic].clone(), partition);
                    match positions.get_item(key)? {
                        Some(v) => v.extract()?,
                        None => 0,
                    }
                }
            };
            if !offsets.contains_key(&(topic, partition)) {
                offsets.insert((topic, partition), expected);
                next_offsets.set_item((topic_objs[topic].clone(), partition), expected)?;
            }
        }
        if offset < expected {
            skipped += 1;
            continue;
        }
        expected = offset + 1;
        let value = rec.getattr(a_value)?;
        if value.is_none() {
            return Ok(None);
        }
        let value = value.downcast_into::<PyBytes>()?;
        let bytes = value.as_bytes();
        if bytes.len() < 5 || bytes[0] != 0 {
            return Ok(None);
        }
        let header: [u8; 5] = bytes[..5].try_into().unwrap();
        let plan = match by_header.get(&header) {
            Some(Some(p)) => *p,
            _ => return Ok(None), // unknown writer: the codec decides
        };
        let p = &plan_list[plan];
        if !p.decision {
            ignored += 1;
            continue;
        }
        let walker = match &p.walker {
            Some(w) => w,
            None => return Ok(None),
        };
        let fields = match walker.get().fields(bytes) {
            Some(f) => f,
            None => return Ok(None),
        };
        let eid = &bytes[fields.slots[SLOT_EID].0 as usize..fields.slots[SLOT_EID].1 as usize];
        if eid.is_empty() {
            ignored += 1;
            continue;
        }
        let mut row_key = b"row\x00".to_vec();
        esc_into(&mut row_key, eid);
        let n = uniques.len();
        let (unique, first) = match uniques.entry(row_key.clone()) {
            std::collections::hash_map::Entry::Occupied(o) => (*o.get(), false),
            std::collections::hash_map::Entry::Vacant(v) => (*v.insert(n), true),
        };
        entries.push(Entry { plan, fields, partition, offset, topic, value: value.unbind(), row_key, unique, first });
    }
    if let Some(tp) = cur {
        offsets.insert(tp, expected);
    }
    for ((topic, partition), offset) in &offsets {
        next_offsets.set_item((topic_objs[*topic].clone(), *partition), *offset)?;
    }
    Ok(Some(Folded { skipped, ignored, next_offsets: next_offsets.unbind(), entries, unique: uniques.len(),
                     plans: plan_list, topics }))
}

#[pymodule]
fn suanli_kernels(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Walker>()?;
    m.add_class::<Folded>()?;
    m.add_function(wrap_pyfunction!(fold, m)?)?;
    Ok(())
}
