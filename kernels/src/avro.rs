//! `AvroProgram`: Avro binary encoding and decoding of one schema, compiled once.
//!
//! The codec (`schemas/codec.py`) encodes and decodes every record of the plane with
//! fastavro, whose writer and reader interpret the parsed schema per value (a TaskPlaced
//! with its provenance takes ~19 us to write and ~16 us to read). A program is the same
//! schema turned into a tree of nodes once, walked per record.
//!
//! Contract: the program is a fast path, never a second opinion. `encode` returns the
//! bytes fastavro's `schemaless_writer` writes, or None; `decode` returns the value and end
//! position fastavro's `schemaless_reader` (writer schema only, no resolution) gives, or
//! None. None means "let fastavro do it": the caller then runs fastavro, which encodes,
//! decodes or raises exactly as before. So every datum or body the program is unsure of is
//! declined rather than guessed:
//! - encode takes only the exact Python types (dict for records and maps with str keys,
//!   list for arrays, int but not bool for int and long, in range, float for float and
//!   double, str, bytes, bool, None), a record's missing field only where it has a default
//!   (written as fastavro writes it), no record dict with fastavro's `-type` key, and unions
//!   of exactly `[null, X]` (a schema with another union encodes nothing: `encodes` is False);
//! - decode declines a truncated body, a varint beyond 64 bits, invalid UTF-8, a union or
//!   enum index out of range, a boolean byte other than 0 or 1, a negative length, and a
//!   block count larger than the bytes left could hold.
//! `tests/schemas/test_avro_kernel.py` checks both directions against fastavro over every
//! schema of the contract, and that no malformed body decodes to a value fastavro refuses.
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString};
use std::collections::HashMap;
use std::sync::Arc;

use crate::Cursor;

/// A declined value or body: the caller falls back to fastavro.
struct Miss;

type Step<T> = Result<T, Miss>;

/// A record's field: its key (interned), its type, and its default as fastavro writes it
/// for a missing key (`datum.get(name, field["default"])`, made a float for a float or
/// double field as fastavro does).
struct Field {
    key: Py<PyString>,
    node: Node,
    default: Option<Py<PyAny>>,
}

enum Node {
    Null,
    Boolean,
    Int,
    Long,
    Float,
    Double,
    Bytes,
    Str,
    Fixed(usize),
    Enum(Arc<Vec<Py<PyString>>>),
    Array(Box<Node>),
    Map(Box<Node>),
    Record(Arc<Vec<Field>>),
    /// `[null, X]` or `[X, null]`: the null branch's index, and X
    Optional(u8, Box<Node>),
    /// any other union: decoded by index, never encoded
    Union(Vec<Node>),
}

impl Node {
    fn clone_ref(&self, py: Python<'_>) -> Node {
        match self {
            Node::Null => Node::Null,
            Node::Boolean => Node::Boolean,
            Node::Int => Node::Int,
            Node::Long => Node::Long,
            Node::Float => Node::Float,
            Node::Double => Node::Double,
            Node::Bytes => Node::Bytes,
            Node::Str => Node::Str,
            Node::Fixed(n) => Node::Fixed(*n),
            Node::Enum(s) => Node::Enum(s.clone()),
            Node::Array(i) => Node::Array(Box::new(i.clone_ref(py))),
            Node::Map(v) => Node::Map(Box::new(v.clone_ref(py))),
            Node::Record(f) => Node::Record(f.clone()),
            Node::Optional(k, x) => Node::Optional(*k, Box::new(x.clone_ref(py))),
            Node::Union(b) => Node::Union(b.iter().map(|n| n.clone_ref(py)).collect()),
        }
    }

    /// Whether a value of this node can take no bytes (so a block count alone bounds nothing).
    fn may_be_empty(&self) -> bool {
        match self {
            Node::Null => true,
            Node::Fixed(n) => *n == 0,
            Node::Record(f) => f.iter().all(|f| f.node.may_be_empty()),
            _ => false,
        }
    }

    fn encodes(&self) -> bool {
        match self {
            Node::Union(_) => false,
            Node::Array(i) | Node::Map(i) | Node::Optional(_, i) => i.encodes(),
            Node::Record(f) => f.iter().all(|f| f.node.encodes()),
            _ => true,
        }
    }
}

/// Compiles fastavro's parsed form: primitive names, dicts for complex types, lists for
/// unions, full names for named types defined earlier in the walk.
struct Compiler<'py> {
    py: Python<'py>,
    named: HashMap<String, Node>,
}

impl<'py> Compiler<'py> {
    fn node(&mut self, s: &Bound<'py, PyAny>, depth: usize) -> PyResult<Node> {
        if depth > 64 {
            return Err(PyValueError::new_err("schema nested deeper than 64 levels"));
        }
        if let Ok(name) = s.downcast::<PyString>() {
            let name = name.to_str()?;
            return Ok(match name {
                "null" => Node::Null,
                "boolean" => Node::Boolean,
                "int" => Node::Int,
                "long" => Node::Long,
                "float" => Node::Float,
                "double" => Node::Double,
                "bytes" => Node::Bytes,
                "string" => Node::Str,
                _ => match self.named.get(name) {
                    Some(n) => n.clone_ref(self.py),
                    None => return Err(PyValueError::new_err(format!(
                        "type {name:?} is not defined before its use (a recursive or unknown type)"))),
                },
            });
        }
        if let Ok(branches) = s.downcast::<PyList>() {
            let nodes = branches.iter().map(|b| self.node(&b, depth + 1)).collect::<PyResult<Vec<_>>>()?;
            let nulls: Vec<usize> = nodes.iter().enumerate().filter(|(_, n)| matches!(n, Node::Null)).map(|(i, _)| i).collect();
            if nodes.len() == 2 && nulls.len() == 1 {
                let k = nulls[0];
                let mut nodes = nodes;
                let other = nodes.swap_remove(1 - k);
                if !matches!(other, Node::Union(_) | Node::Optional(..)) {
                    return Ok(Node::Optional(k as u8, Box::new(other)));
                }
                return Err(PyValueError::new_err("a union inside a union"));
            }
            return Ok(Node::Union(nodes));
        }
        let d = s.downcast::<PyDict>().map_err(|_| PyValueError::new_err("a schema is a name, a list or a dict"))?;
        let kind = d.get_item("type")?.ok_or_else(|| PyValueError::new_err("a schema dict without \"type\""))?;
        let kind_s: String = match kind.downcast::<PyString>() {
            Ok(k) => k.to_str()?.to_owned(),
            Err(_) => return self.node(&kind, depth + 1),     // {"type": {...}} or {"type": [...]}
        };
        let name = || -> PyResult<String> {
            Ok(d.get_item("name")?.ok_or_else(|| PyValueError::new_err("a named type without a name"))?.extract::<String>()?)
        };
        let node = match kind_s.as_str() {
            "record" | "error" => {
                let fields = d.get_item("fields")?.ok_or_else(|| PyValueError::new_err("a record without fields"))?;
                let mut out = Vec::new();
                for f in fields.downcast::<PyList>()?.iter() {
                    let f = f.downcast::<PyDict>()?;
                    let fname = f.get_item("name")?.ok_or_else(|| PyValueError::new_err("a field without a name"))?;
                    let ftype = f.get_item("type")?.ok_or_else(|| PyValueError::new_err("a field without a type"))?;
                    let key = PyString::intern(self.py, fname.downcast::<PyString>()?.to_str()?).unbind();
                    let node = self.node(&ftype, depth + 1)?;
                    let default = match f.get_item("default")? {
                        Some(d) if matches!(node, Node::Float | Node::Double) && d.is_exact_instance_of::<PyInt>() =>
                            Some(PyFloat::new(self.py, d.extract::<f64>()?).into_any().unbind()),
                        Some(d) => Some(d.unbind()),
                        None => None,
                    };
                    out.push(Field { key, node, default });
                }
                let node = Node::Record(Arc::new(out));
                self.named.insert(name()?, node.clone_ref(self.py));
                node
            }
            "enum" => {
                let symbols = d.get_item("symbols")?.ok_or_else(|| PyValueError::new_err("an enum without symbols"))?;
                let symbols = symbols.downcast::<PyList>()?.iter()
                    .map(|s| Ok(PyString::intern(self.py, s.downcast::<PyString>()?.to_str()?).unbind()))
                    .collect::<PyResult<Vec<_>>>()?;
                let node = Node::Enum(Arc::new(symbols));
                self.named.insert(name()?, node.clone_ref(self.py));
                node
            }
            "fixed" => {
                let size = d.get_item("size")?.ok_or_else(|| PyValueError::new_err("a fixed without a size"))?.extract::<usize>()?;
                self.named.insert(name()?, Node::Fixed(size));
                Node::Fixed(size)
            }
            "array" => Node::Array(Box::new(self.node(&d.get_item("items")?.ok_or_else(
                || PyValueError::new_err("an array without items"))?, depth + 1)?)),
            "map" => Node::Map(Box::new(self.node(&d.get_item("values")?.ok_or_else(
                || PyValueError::new_err("a map without values"))?, depth + 1)?)),
            _ => self.node(&kind, depth + 1)?,                  // {"type": "string"}
        };
        Ok(node)
    }
}

// ------------------------------------------------------------------------- encoding

#[inline]
fn put_long(out: &mut Vec<u8>, n: i64) {
    let mut z = ((n << 1) ^ (n >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

#[inline]
fn put_str(out: &mut Vec<u8>, v: &Bound<'_, PyAny>) -> Step<()> {
    if !v.is_exact_instance_of::<PyString>() {
        return Err(Miss);
    }
    // SAFETY of the cast: checked exact str above
    let s = unsafe { v.downcast_unchecked::<PyString>() }.to_str().map_err(|_| Miss)?;
    put_long(out, s.len() as i64);
    out.extend_from_slice(s.as_bytes());
    Ok(())
}

fn exact_int(v: &Bound<'_, PyAny>) -> Step<i64> {
    if !v.is_exact_instance_of::<PyInt>() {
        return Err(Miss);                                    // bool, int subclasses, anything else
    }
    v.extract::<i64>().map_err(|_| Miss)
}

fn encode(node: &Node, v: &Bound<'_, PyAny>, out: &mut Vec<u8>) -> Step<()> {
    match node {
        Node::Null => if v.is_none() { Ok(()) } else { Err(Miss) },
        Node::Boolean => {
            if !v.is_exact_instance_of::<PyBool>() {
                return Err(Miss);
            }
            out.push(if v.is_truthy().map_err(|_| Miss)? { 1 } else { 0 });
            Ok(())
        }
        Node::Int => {
            let n = exact_int(v)?;
            if n < i32::MIN as i64 || n > i32::MAX as i64 {
                return Err(Miss);                            // fastavro's union validation refuses it
            }
            put_long(out, n);
            Ok(())
        }
        Node::Long => {
            put_long(out, exact_int(v)?);
            Ok(())
        }
        Node::Float => {
            if !v.is_exact_instance_of::<PyFloat>() {
                return Err(Miss);
            }
            let x = unsafe { v.downcast_unchecked::<PyFloat>() }.value();
            // beyond float32's range (or a NaN, whose payload the cast need not keep) the
            // C cast fastavro makes is not pinned down: let it do those
            if x.is_nan() || (x.is_finite() && x.abs() > f32::MAX as f64) {
                return Err(Miss);
            }
            out.extend_from_slice(&(x as f32).to_le_bytes());
            Ok(())
        }
        Node::Double => {
            if !v.is_exact_instance_of::<PyFloat>() {
                return Err(Miss);
            }
            out.extend_from_slice(&unsafe { v.downcast_unchecked::<PyFloat>() }.value().to_le_bytes());
            Ok(())
        }
        Node::Str => put_str(out, v),
        Node::Bytes => {
            if !v.is_exact_instance_of::<PyBytes>() {
                return Err(Miss);
            }
            let b = unsafe { v.downcast_unchecked::<PyBytes>() }.as_bytes();
            put_long(out, b.len() as i64);
            out.extend_from_slice(b);
            Ok(())
        }
        Node::Fixed(size) => {
            if !v.is_exact_instance_of::<PyBytes>() {
                return Err(Miss);
            }
            let b = unsafe { v.downcast_unchecked::<PyBytes>() }.as_bytes();
            if b.len() != *size {
                return Err(Miss);
            }
            out.extend_from_slice(b);
            Ok(())
        }
        Node::Enum(symbols) => {
            if !v.is_exact_instance_of::<PyString>() {
                return Err(Miss);
            }
            let s = unsafe { v.downcast_unchecked::<PyString>() }.to_str().map_err(|_| Miss)?;
            let py = v.py();
            let i = symbols.iter().position(|k| k.bind(py).to_str().map(|t| t == s).unwrap_or(false)).ok_or(Miss)?;
            put_long(out, i as i64);
            Ok(())
        }
        Node::Array(item) => {
            if !v.is_exact_instance_of::<PyList>() {
                return Err(Miss);
            }
            let list = unsafe { v.downcast_unchecked::<PyList>() };
            let n = list.len();
            if n > 0 {
                put_long(out, n as i64);
                for x in list.iter() {
                    encode(item, &x, out)?;
                }
                if list.len() != n {
                    return Err(Miss);                        // a key's __eq__ (Python code) changed it meanwhile: the count is wrong
                }
            }
            out.push(0);
            Ok(())
        }
        Node::Map(value) => {
            if !v.is_exact_instance_of::<PyDict>() {
                return Err(Miss);
            }
            let dict = unsafe { v.downcast_unchecked::<PyDict>() };
            let n = dict.len();
            if n > 0 {
                put_long(out, n as i64);
                for (k, x) in dict.iter() {
                    put_str(out, &k)?;
                    encode(value, &x, out)?;
                }
            }
            out.push(0);
            Ok(())
        }
        Node::Record(fields) => {
            if !v.is_exact_instance_of::<PyDict>() {
                return Err(Miss);
            }
            let dict = unsafe { v.downcast_unchecked::<PyDict>() };
            // fastavro picks a union's record branch by a "-type" key's name (and refuses a
            // dict naming another): let it do such dicts, wherever they are
            if dict.contains("-type").map_err(|_| Miss)? {
                return Err(Miss);
            }
            let py = v.py();
            for f in fields.iter() {
                match dict.get_item(f.key.bind(py)).map_err(|_| Miss)? {
                    Some(x) => encode(&f.node, &x, out)?,
                    // fastavro writes a missing field's default; without one, let it say so
                    None => encode(&f.node, f.default.as_ref().ok_or(Miss)?.bind(py), out)?,
                }
            }
            Ok(())
        }
        Node::Optional(null_at, x) => {
            if v.is_none() {
                put_long(out, *null_at as i64);
                Ok(())
            } else {
                put_long(out, 1 - *null_at as i64);
                encode(x, v, out)
            }
        }
        Node::Union(_) => Err(Miss),
    }
}

// ------------------------------------------------------------------------- decoding

/// Decoding reads through the audit walker's `Cursor` (`lib.rs`: varints of at most 64
/// bits, bounds-checked slices); these two add what only a full decode needs.
impl<'a> Cursor<'a> {
    fn length(&mut self) -> Step<usize> {
        let n = self.long().ok_or(Miss)?;
        if n < 0 {
            return Err(Miss);
        }
        Ok(n as usize)
    }

    /// The next block's item count (0 ends the array or map), bounded by what the bytes
    /// left could hold; a negative count carries the block's size in bytes after it.
    fn block(&mut self, item: &Node) -> Step<usize> {
        let mut n = self.long().ok_or(Miss)?;
        if n < 0 {
            n = n.checked_neg().ok_or(Miss)?;
            self.long().ok_or(Miss)?;
        }
        let n = n as usize;
        let left = self.buf.len() - self.pos;
        if n > left && (!item.may_be_empty() || n > 1 << 20) {
            return Err(Miss);
        }
        Ok(n)
    }
}

fn decode<'py>(py: Python<'py>, node: &Node, r: &mut Cursor<'_>) -> Step<Bound<'py, PyAny>> {
    Ok(match node {
        Node::Null => py.None().into_bound(py),
        Node::Boolean => match r.take(1).ok_or(Miss)?[0] {
            0 => PyBool::new(py, false).to_owned().into_any(),
            1 => PyBool::new(py, true).to_owned().into_any(),
            _ => return Err(Miss),
        },
        Node::Int | Node::Long => r.long().ok_or(Miss)?.into_pyobject(py).map_err(|_| Miss)?.into_any(),
        Node::Float => {
            let b = r.take(4).ok_or(Miss)?;
            PyFloat::new(py, f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64).into_any()
        }
        Node::Double => {
            let b = r.take(8).ok_or(Miss)?;
            PyFloat::new(py, f64::from_le_bytes(b.try_into().map_err(|_| Miss)?)).into_any()
        }
        Node::Bytes => {
            let n = r.length()?;
            PyBytes::new(py, r.take(n).ok_or(Miss)?).into_any()
        }
        Node::Fixed(n) => PyBytes::new(py, r.take(*n).ok_or(Miss)?).into_any(),
        Node::Str => {
            let n = r.length()?;
            let s = std::str::from_utf8(r.take(n).ok_or(Miss)?).map_err(|_| Miss)?;
            PyString::new(py, s).into_any()
        }
        Node::Enum(symbols) => {
            let i = r.long().ok_or(Miss)?;
            if i < 0 {
                return Err(Miss);
            }
            symbols.get(i as usize).ok_or(Miss)?.bind(py).clone().into_any()
        }
        Node::Array(item) => {
            let list = PyList::empty(py);
            loop {
                let n = r.block(item)?;
                if n == 0 {
                    break;
                }
                for _ in 0..n {
                    list.append(decode(py, item, r)?).map_err(|_| Miss)?;
                }
            }
            list.into_any()
        }
        Node::Map(value) => {
            let dict = PyDict::new(py);
            loop {
                let n = r.block(&Node::Str)?;
                if n == 0 {
                    break;
                }
                for _ in 0..n {
                    let k = decode(py, &Node::Str, r)?;
                    let v = decode(py, value, r)?;
                    dict.set_item(k, v).map_err(|_| Miss)?;
                }
            }
            dict.into_any()
        }
        Node::Record(fields) => {
            let dict = PyDict::new(py);
            for f in fields.iter() {
                let v = decode(py, &f.node, r)?;
                dict.set_item(f.key.bind(py), v).map_err(|_| Miss)?;
            }
            dict.into_any()
        }
        Node::Optional(null_at, x) => {
            let i = r.long().ok_or(Miss)?;
            if i == *null_at as i64 {
                py.None().into_bound(py)
            } else if i == 1 - *null_at as i64 {
                decode(py, x, r)?
            } else {
                return Err(Miss);
            }
        }
        Node::Union(branches) => {
            let i = r.long().ok_or(Miss)?;
            if i < 0 {
                return Err(Miss);
            }
            decode(py, branches.get(i as usize).ok_or(Miss)?, r)?
        }
    })
}

// ------------------------------------------------------------------------- the class

/// One schema's compiled encoder and decoder (see the module docs for the contract).
#[pyclass(frozen, module = "suanli_kernels")]
pub struct AvroProgram {
    root: Node,
    encodes: bool,
}

#[pymethods]
impl AvroProgram {
    /// Compile ``schema`` as ``fastavro.parse_schema`` returns it (logical types stripped);
    /// ValueError for a form it does not take (a recursive type, an unknown name).
    #[new]
    fn new(py: Python<'_>, schema: &Bound<'_, PyAny>) -> PyResult<Self> {
        let mut c = Compiler { py, named: HashMap::new() };
        let root = c.node(schema, 0)?;
        let encodes = root.encodes();
        Ok(AvroProgram { root, encodes })
    }

    /// False when the schema has a union other than ``[null, X]``: ``encode`` declines every datum.
    #[getter]
    fn encodes(&self) -> bool {
        self.encodes
    }

    /// ``prefix`` + the Avro body of ``datum``, byte for byte fastavro's; None to let fastavro do it.
    #[pyo3(signature = (datum, prefix = None))]
    fn encode<'py>(&self, py: Python<'py>, datum: &Bound<'py, PyAny>, prefix: Option<&[u8]>) -> Option<Bound<'py, PyBytes>> {
        if !self.encodes {
            return None;
        }
        let mut out = Vec::with_capacity(256);
        if let Some(p) = prefix {
            out.extend_from_slice(p);
        }
        encode(&self.root, datum, &mut out).ok()?;
        Some(PyBytes::new(py, &out))
    }

    /// ``(value, end)``: the datum at ``data[start:]`` and the position after it, as fastavro
    /// reads it with the writer schema alone; None to let fastavro do it.
    fn decode<'py>(&self, py: Python<'py>, data: &[u8], start: usize) -> Option<(Bound<'py, PyAny>, usize)> {
        if start > data.len() {
            return None;
        }
        let mut r = Cursor { buf: data, pos: start };
        let v = decode(py, &self.root, &mut r).ok()?;
        Some((v, r.pos))
    }
}
