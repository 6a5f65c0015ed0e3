//! The scheduling cycle's bookkeeping around the plugins (`processors/framework.py`
//! `run_cycle`): the filter pass that narrows the feasible rows mask by mask, and the
//! ranking of the scored rows (the best score's ties, and the provenance candidates), and
//! the node classes among the feasible rows, which the scorers then score once each.
//!
//! Each replaces a handful of numpy calls of 1-3 µs that a decision makes per filter and per
//! ranking; the results are the numpy ones exactly (`tests/processors/test_cycle_kernels.py`
//! runs both on random masks and scores). Arrays come in through the buffer protocol: bool
//! (`?`), int64 and float64, C-contiguous; a wrong dtype raises `BufferError`, a wrong
//! length or layout `ValueError` (nothing is written then).
use pyo3::buffer::{Element, ElementType, PyBuffer, ReadOnlyCell};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::cell::Cell;
use std::ffi::CStr;

/// A numpy bool (`?`, one byte: 0 or 1); pyo3 has no `Element` for `bool`.
#[derive(Copy, Clone)]
#[repr(transparent)]
pub struct Flag(u8);

// SAFETY: a one-byte element, read only after checking the buffer's format is `?`.
unsafe impl Element for Flag {
    fn is_compatible_format(format: &CStr) -> bool {
        ElementType::from_format(format) == ElementType::Bool
    }
}

fn ro<'a, T: Element>(py: Python<'a>, buf: &'a PyBuffer<T>, what: &str, len: Option<usize>)
    -> PyResult<&'a [ReadOnlyCell<T>]> {
    let s = buf
        .as_slice(py)
        .ok_or_else(|| PyValueError::new_err(format!("{what}: not a C-contiguous array")))?;
    match len {
        Some(n) if s.len() != n => Err(PyValueError::new_err(format!("{what}: {} elements, expected {n}", s.len()))),
        _ => Ok(s),
    }
}

fn rw<'a, T: Element>(py: Python<'a>, buf: &'a PyBuffer<T>, what: &str, len: usize) -> PyResult<&'a [Cell<T>]> {
    let s = buf
        .as_mut_slice(py)
        .ok_or_else(|| PyValueError::new_err(format!("{what}: not a writable C-contiguous array")))?;
    if s.len() < len {
        return Err(PyValueError::new_err(format!("{what}: {} elements, at least {len} expected", s.len())));
    }
    Ok(s)
}

/// Each byte of `w` as 1 when it is non-zero, else 0 (bit 0 of a byte ORs its 8 bits).
#[inline]
fn canon(w: u64) -> u64 {
    let w = w | (w >> 4);
    let w = w | (w >> 2);
    (w | (w >> 1)) & 0x0101_0101_0101_0101
}

/// `alive &= (mask != 0)` byte by byte, eight at a time; returns how many stay 1. `alive`
/// holds only 0 and 1 bytes, so a word's set bits count its live rows.
fn and_count(alive: &mut [u8], mask: &[u8]) -> usize {
    let whole = alive.len() - alive.len() % 8;
    let (head, tail) = alive.split_at_mut(whole);
    let mut kept = 0usize;
    for (a8, m8) in head.chunks_exact_mut(8).zip(mask.chunks_exact(8)) {
        let m = canon(u64::from_ne_bytes(m8.try_into().unwrap()));
        let a = u64::from_ne_bytes((&*a8).try_into().unwrap()) & m;
        a8.copy_from_slice(&a.to_ne_bytes());
        kept += a.count_ones() as usize;
    }
    for (a, &m) in tail.iter_mut().zip(mask[whole..].iter()) {
        *a &= (m != 0) as u8;
        kept += *a as usize;
    }
    kept
}

/// The filter pass: `alive` (bool [n], written) is the conjunction of `masks` (bool [n]
/// each, in order). Returns, for each mask that removed rows still alive before it,
/// `(its index, how many it removed)`, and writes the first (at most 3) of those rows,
/// ascending, into `samples[index]` (int64 [len(masks), 3]). That is `run_cycle`'s loop
/// `kept = alive & mask; if count(kept) < left: record alive & ~kept`, in one pass per mask.
#[pyfunction]
pub fn filter_pass(py: Python<'_>, masks: Vec<Bound<'_, PyAny>>, alive: &Bound<'_, PyAny>,
                   samples: &Bound<'_, PyAny>) -> PyResult<Vec<(usize, usize)>> {
    let ab = PyBuffer::<Flag>::get(alive)?;
    let n = ab.item_count();
    let alive = rw(py, &ab, "alive", n)?;
    let bufs = masks.iter().map(PyBuffer::<Flag>::get).collect::<PyResult<Vec<_>>>()?;
    let mut slices = Vec::with_capacity(bufs.len());
    for b in bufs.iter() {
        slices.push(ro(py, b, "a mask", Some(n))?);
    }
    let sb = PyBuffer::<i64>::get(samples)?;
    let samples = rw(py, &sb, "samples", 3 * slices.len())?;
    // SAFETY: the GIL is held and the buffers are C-contiguous of n one-byte elements; the
    // masks are only read, and `alive` is a buffer of our caller's that nothing else reads
    // meanwhile. Plain byte slices let the per-mask sweep vectorise.
    let alive: &mut [u8] = unsafe { std::slice::from_raw_parts_mut(alive.as_ptr() as *mut u8, n) };
    alive.fill(1);
    let mut left = n;
    let mut drops = Vec::new();
    for (i, m) in slices.iter().enumerate() {
        let m: &[u8] = unsafe { std::slice::from_raw_parts(m.as_ptr() as *const u8, n) };
        let kept = and_count(alive, m);
        if kept < left {
            // the first (at most 3) rows this mask removed: false in it, true in every mask
            // before it (what `alive` was; it usually takes a few rows to find them)
            let mut shown = 0;
            for (r, &f) in m.iter().enumerate() {
                if f == 0 && slices[..i].iter().all(|p| p[r].get().0 != 0) {
                    samples[3 * i + shown].set(r as i64);
                    shown += 1;
                    if shown == 3 {
                        break;
                    }
                }
            }
            drops.push((i, left - kept));
            left = kept;
        }
    }
    Ok(drops)
}

/// The ranking of a cycle's scores `total` (float64 [n], n > 0): writes the positions that
/// hold the maximum, ascending, into `tied` (int64, >= n) and the `k` best positions by
/// (score descending, position ascending) into `best` (int64, >= k), best first; returns
/// `(how many tie, how many best)`. With a NaN score it returns `(0, 0)` (numpy's max is
/// NaN then, and nothing equals it; the caller takes its numpy path).
///
/// The best `k` are `framework.stable_top`'s set in that order: the first `k` ties when
/// `k` or more rows tie for the maximum, else the rows above the k-th largest value and
/// the first of those equal to it. Comparisons are IEEE ones, as numpy's (-0.0 == 0.0).
#[pyfunction]
pub fn rank_scores(py: Python<'_>, total: &Bound<'_, PyAny>, k: usize, tied: &Bound<'_, PyAny>,
                   best: &Bound<'_, PyAny>) -> PyResult<(usize, usize)> {
    let tb = PyBuffer::<f64>::get(total)?;
    let total = ro(py, &tb, "total", None)?;
    let n = total.len();
    if n == 0 {
        return Err(PyValueError::new_err("total: no scores to rank"));
    }
    let (ob, bb) = (PyBuffer::<i64>::get(tied)?, PyBuffer::<i64>::get(best)?);
    let (tied, best) = (rw(py, &ob, "tied", n)?, rw(py, &bb, "best", k.min(n))?);
    Ok(rank(n, |i| total[i].get(), k, tied, best))
}

/// `rank_scores` of the scores `values[slot[i]]` (float64 [c] per node class, int64 [n] per
/// row: `framework.class_scores`' answer), which it first writes into `total` (float64, >= n),
/// all of it, a NaN's included. A slot outside `values` raises `ValueError` with nothing
/// written. The ranking is `rank_scores`' on `total`, so the same ties and candidates.
#[pyfunction]
pub fn rank_spread(py: Python<'_>, values: &Bound<'_, PyAny>, slot: &Bound<'_, PyAny>, k: usize,
                   total: &Bound<'_, PyAny>, tied: &Bound<'_, PyAny>, best: &Bound<'_, PyAny>)
                   -> PyResult<(usize, usize)> {
    let (vb, sb) = (PyBuffer::<f64>::get(values)?, PyBuffer::<i64>::get(slot)?);
    let (values, slot) = (ro(py, &vb, "values", None)?, ro(py, &sb, "slot", None)?);
    let n = slot.len();
    if n == 0 {
        return Err(PyValueError::new_err("slot: no scores to rank"));
    }
    if let Some(s) = slot.iter().map(|s| s.get()).find(|&s| s < 0 || s as usize >= values.len()) {
        return Err(PyValueError::new_err(format!("slot: {s} is outside the {} values", values.len())));
    }
    let (xb, ob, bb) = (PyBuffer::<f64>::get(total)?, PyBuffer::<i64>::get(tied)?, PyBuffer::<i64>::get(best)?);
    let (total, tied, best) = (rw(py, &xb, "total", n)?, rw(py, &ob, "tied", n)?, rw(py, &bb, "best", k.min(n))?);
    for (t, s) in total.iter().zip(slot.iter()) {
        t.set(values[s.get() as usize].get());
    }
    Ok(rank(n, |i| total[i].get(), k, tied, best))
}

/// The ranking both take, of `n > 0` scores read through `at`.
fn rank(n: usize, at: impl Fn(usize) -> f64, k: usize, tied: &[Cell<i64>], best: &[Cell<i64>]) -> (usize, usize) {
    let mut top = f64::NEG_INFINITY;
    for i in 0..n {
        let v = at(i);
        if v.is_nan() {
            return (0, 0);
        }
        if v > top {
            top = v;
        }
    }
    let mut nt = 0;
    for i in 0..n {
        if at(i) == top {
            tied[nt].set(i as i64);
            nt += 1;
        }
    }
    let k = k.min(n);
    if nt >= k {
        for j in 0..k {
            best[j].set(tied[j].get());
        }
        return (nt, k);
    }
    // a sorted buffer of the k best so far; a later position never beats an equal score
    let mut kb: Vec<(f64, usize)> = Vec::with_capacity(k + 1);
    for i in 0..n {
        let v = at(i);
        if kb.len() == k && !(v > kb[k - 1].0) {
            continue;
        }
        let pos = kb.iter().position(|&(s, _)| v > s).unwrap_or(kb.len());
        kb.insert(pos, (v, i));
        kb.truncate(k);
    }
    for (j, &(_, i)) in kb.iter().enumerate() {
        best[j].set(i as i64);
    }
    (nt, kb.len())
}

/// The node classes among a cycle's feasible rows (`processors/framework.py`
/// `class_scores`): for `rows` (int64 [n]), whose classes are `ids[rows[i]]` (int64),
/// writes one row of each class, the first of it in `rows`, into `reps` (int64, >= n) in
/// order of first appearance, and each row's position among those classes into `slot`
/// (int64, >= n); returns how many classes. So `reps` is ascending when `rows` is, and
/// `x[slot[:n]]` spreads a value per class `x` over the rows.
///
/// `marks` (int64, longer than every class id) is scratch: it must hold -1 everywhere, and
/// holds -1 everywhere again on return, an error's included. A row outside `ids`, or a
/// class id that is negative (a row the classes have not seen) or not below `marks`'s length,
/// raises `ValueError` (`reps` and `slot` may be partly written then, `marks` is clean).
#[pyfunction]
pub fn class_rows(py: Python<'_>, ids: &Bound<'_, PyAny>, rows: &Bound<'_, PyAny>, marks: &Bound<'_, PyAny>,
                  reps: &Bound<'_, PyAny>, slot: &Bound<'_, PyAny>) -> PyResult<usize> {
    let (ib, rb) = (PyBuffer::<i64>::get(ids)?, PyBuffer::<i64>::get(rows)?);
    let (ids, rows) = (ro(py, &ib, "ids", None)?, ro(py, &rb, "rows", None)?);
    let n = rows.len();
    let (mb, pb, sb) = (PyBuffer::<i64>::get(marks)?, PyBuffer::<i64>::get(reps)?, PyBuffer::<i64>::get(slot)?);
    let marks = rw(py, &mb, "marks", 0)?;
    let (reps, slot) = (rw(py, &pb, "reps", n)?, rw(py, &sb, "slot", n)?);
    let mut k = 0usize;
    let mut bad: Option<String> = None;
    for (i, r) in rows.iter().enumerate() {
        let r = r.get();
        let Some(c) = usize::try_from(r).ok().and_then(|r| ids.get(r)).map(|c| c.get()) else {
            bad = Some(format!("rows: row {r} is outside the {} rows of ids", ids.len()));
            break;
        };
        let Some(m) = usize::try_from(c).ok().and_then(|c| marks.get(c)) else {
            bad = Some(format!("ids: row {r} has class {c}, outside 0..{} (marks)", marks.len()));
            break;
        };
        let mut at = m.get();
        if at < 0 {
            at = k as i64;
            m.set(at);
            reps[k].set(r);
            k += 1;
        }
        slot[i].set(at);
    }
    // every class marked is one of reps' rows: clearing theirs leaves marks as it came
    for rep in reps[..k].iter() {
        marks[ids[rep.get() as usize].get() as usize].set(-1);
    }
    match bad {
        Some(msg) => Err(PyValueError::new_err(msg)),
        None => Ok(k),
    }
}

#[inline]
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// `processors/rng.py` `mix`: fold integers into one 64-bit hash with SplitMix64, each
/// value taken modulo 2**64 (two's complement for a negative one). A value outside
/// [-2**63, 2**64) raises `OverflowError` (the caller's loop takes any size).
#[pyfunction]
pub fn mix64(values: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<u64> {
    let mut h: u64 = 0x243F_6A88_85A3_08D3;
    for v in values.iter() {
        let x = match v.extract::<i64>() {
            Ok(i) => i as u64,
            Err(_) => v.extract::<u64>()?,
        };
        h = splitmix64(h ^ x);
    }
    Ok(h)
}
