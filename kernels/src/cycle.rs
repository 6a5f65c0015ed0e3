//! The scheduling cycle's bookkeeping around the plugins (`processors/framework.py`
//! `run_cycle`): the filter pass that narrows the feasible rows mask by mask (and lists
//! them), the ranking of the scored rows (the best score's ties, and the provenance
//! candidates), the node classes among the feasible rows, which the scorers then score
//! once each and which are ranked as classes, and the weighted sum of the scorers' scores.
//!
//! Each replaces a handful of numpy calls of 1-3 µs that a decision makes per filter and per
//! ranking; the results are the numpy ones exactly (`tests/processors/test_cycle_kernels.py`
//! runs both on random masks and scores). Arrays come in through the buffer protocol: bool
//! (`?`), int64 and float64, C-contiguous; a wrong dtype raises `BufferError`, a wrong
//! length or layout `ValueError` (nothing is written then), and so does an output of
//! `filter_pass`, `rank_scores`, `rank_classes`, `class_rows` or `weighted_total` that
//! shares memory with an array the kernel reads (their loops read and write plain slices,
//! which must not alias). `weighted_total` alone declines (returns false, writing
//! nothing) a part it does not take, for its caller's numpy loop.
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

/// The plain values of a read-only buffer, for loops the compiler can vectorise.
///
/// SAFETY (of every use): the GIL is held for the whole call and no buffer a kernel writes
/// overlaps one it reads (`disjoint` checks that), so nothing changes these values meanwhile.
fn plain<T: Element>(s: &[ReadOnlyCell<T>]) -> &[T] {
    // SAFETY: ReadOnlyCell<T> is a transparent wrapper of T; see above for aliasing.
    unsafe { std::slice::from_raw_parts(s.as_ptr() as *const T, s.len()) }
}

/// The plain values of a writable buffer (see `plain`).
#[allow(clippy::mut_from_ref)]
fn plain_mut<T: Element>(s: &[Cell<T>]) -> &mut [T] {
    // SAFETY: Cell<T> is a transparent wrapper of T; the caller holds the only view of the
    // buffer for the call (the GIL, and `disjoint` against the buffers it reads).
    unsafe { std::slice::from_raw_parts_mut(s.as_ptr() as *mut T, s.len()) }
}

/// `ValueError` unless the written buffer `out` shares no byte with any of `ins`.
fn disjoint<A, B>(what: &str, out: &[A], ins: &[&[B]]) -> PyResult<()> {
    let (o0, o1) = (out.as_ptr() as usize, out.as_ptr() as usize + std::mem::size_of_val(out));
    for s in ins {
        let (i0, i1) = (s.as_ptr() as usize, s.as_ptr() as usize + std::mem::size_of_val(*s));
        if o0 < i1 && i0 < o1 {
            return Err(PyValueError::new_err(format!("{what}: shares memory with an input")));
        }
    }
    Ok(())
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
/// each, in order), and `rows` (int64, >= n) gets its true positions, ascending (numpy's
/// `alive.nonzero()[0]`). Returns how many rows are alive and, for each mask that removed
/// rows still alive before it, `(its index, how many it removed)`; it writes the first (at
/// most 3) of those rows, ascending, into `samples[index]` (int64 [len(masks), 3]). That is
/// `run_cycle`'s loop `kept = alive & mask; if count(kept) < left: record alive & ~kept`, in
/// one pass per mask, and one more for the rows.
#[pyfunction]
pub fn filter_pass(py: Python<'_>, masks: Vec<Bound<'_, PyAny>>, alive: &Bound<'_, PyAny>,
                   samples: &Bound<'_, PyAny>, rows: &Bound<'_, PyAny>) -> PyResult<(usize, Vec<(usize, usize)>)> {
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
    let rb = PyBuffer::<i64>::get(rows)?;
    let rows = plain_mut(rw(py, &rb, "rows", n)?);
    disjoint("rows", rows, &[samples])?;
    for m in slices.iter() {
        disjoint("rows", rows, &[*m])?;
    }
    disjoint("rows", rows, &[alive])?;
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
    // every position is written at the next row, which moves on only for a live one
    let mut nf = 0usize;
    for (i, &a) in alive.iter().enumerate() {
        // SAFETY: nf <= i < n <= rows.len()
        unsafe { *rows.get_unchecked_mut(nf) = i as i64 };
        nf += a as usize;
    }
    Ok((nf, drops))
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
    // `rank` reads plain values: neither output may alias them
    disjoint("tied", tied, &[total])?;
    disjoint("best", best, &[total])?;
    Ok(rank(plain(total), k, tied, best))
}

/// `rank_scores` of the scores `values[slot[i]]` (float64 [c] per node class, int64 [n] per
/// row: `framework.class_scores`' answer) without spreading them over the rows: the same
/// `tied` and `best`, and the same `(0, 0)` when a row's score is NaN. Only the classes some
/// row has count (a class no row has is never a row's score; `class_rows` leaves none, and
/// the kernel finds them only when the maximum or a NaN is such a class's). A slot outside
/// `values` raises `ValueError` with nothing written; `tied` or `best` sharing memory with
/// an input too.
///
/// One pass over `slot` checks it, one collects the tied rows, and, only when fewer than
/// `k` rows tie, one more gives each group of equal values (`-0.0 == 0.0` included, as
/// `rank` never puts a later row before an equal score) its first `k` rows in row order;
/// the groups in descending order of value then give the `k` best.
#[pyfunction]
pub fn rank_classes(py: Python<'_>, values: &Bound<'_, PyAny>, slot: &Bound<'_, PyAny>, k: usize,
                    tied: &Bound<'_, PyAny>, best: &Bound<'_, PyAny>) -> PyResult<(usize, usize)> {
    let (vb, sb) = (PyBuffer::<f64>::get(values)?, PyBuffer::<i64>::get(slot)?);
    let (values, slot) = (plain(ro(py, &vb, "values", None)?), plain(ro(py, &sb, "slot", None)?));
    let n = slot.len();
    if n == 0 {
        return Err(PyValueError::new_err("slot: no scores to rank"));
    }
    let c = values.len();
    // a negative slot is a huge u64: one vectorised maximum checks both bounds
    if slot.iter().fold(0u64, |m, &s| m.max(s as u64)) >= c as u64 {
        let s = slot.iter().find(|&&s| s as u64 >= c as u64).unwrap();
        return Err(PyValueError::new_err(format!("slot: {s} is outside the {c} values")));
    }
    let (ob, bb) = (PyBuffer::<i64>::get(tied)?, PyBuffer::<i64>::get(best)?);
    let (tied, best) = (plain_mut(rw(py, &ob, "tied", n)?), plain_mut(rw(py, &bb, "best", k.min(n))?));
    disjoint("tied", tied, &[slot])?;
    disjoint("tied", tied, &[values])?;
    disjoint("best", best, &[slot, tied])?;
    disjoint("best", best, &[values])?;
    let k = k.min(n);
    // which classes rows have: every one, unless a NaN or the maximum says to look
    let mut used: Option<Vec<bool>> = None;
    let mut top = highest(values, None);
    if top.is_nan() {
        used = Some(classes_used(slot, c));
        top = highest(values, used.as_deref());
        if top.is_nan() {
            return Ok((0, 0));
        }
    }
    let mut nt = collect_tied(values, slot, top, tied);
    if nt == 0 {
        let u = classes_used(slot, c);
        top = highest(values, Some(&u));
        nt = collect_tied(values, slot, top, tied);
        used = Some(u);
    }
    if nt >= k {
        best[..k].copy_from_slice(&tied[..k]);
        return Ok((nt, k));
    }
    // the classes by value, descending (no NaN among those kept); each run of equal values is
    // one group, and a group gives at most its first k rows
    let mut order: Vec<usize> = (0..c).filter(|&j| used.as_ref().map_or(true, |u| u[j])).collect();
    order.sort_by(|&a, &b| values[b].partial_cmp(&values[a]).unwrap());
    let mut group = vec![usize::MAX; c];
    let mut groups = 0usize;
    for (at, &j) in order.iter().enumerate() {
        if at == 0 || values[j] != values[order[at - 1]] {
            groups += 1;
        }
        group[j] = groups - 1;
    }
    let mut firsts: Vec<Vec<i64>> = vec![Vec::new(); groups];
    for (i, &s) in slot.iter().enumerate() {
        let g = group[s as usize];
        if firsts[g].len() < k {
            firsts[g].push(i as i64);
        }
    }
    let mut nb = 0;
    for f in firsts.iter() {
        for &i in f.iter().take(k - nb) {
            best[nb] = i;
            nb += 1;
        }
        if nb == k {
            break;
        }
    }
    Ok((nt, nb))
}

/// The largest of `values` (of the classes `used` marks; all without it) by `>` from -inf,
/// as `rank` takes it; NaN when one of them is NaN.
fn highest(values: &[f64], used: Option<&[bool]>) -> f64 {
    let mut top = f64::NEG_INFINITY;
    for (j, &v) in values.iter().enumerate() {
        if used.map_or(true, |u| u[j]) {
            if v.is_nan() {
                return f64::NAN;
            }
            if v > top {
                top = v;
            }
        }
    }
    top
}

/// Which of the `c` classes some row of `slot` (checked: each below c) has.
fn classes_used(slot: &[i64], c: usize) -> Vec<bool> {
    let mut used = vec![false; c];
    for &s in slot {
        used[s as usize] = true;
    }
    used
}

/// The rows whose class's value equals `top`, ascending, into `tied` (>= slot's length);
/// returns how many. Every row is written at the next position, which moves on only for a
/// tied one: no branch for the compiler to mispredict.
fn collect_tied(values: &[f64], slot: &[i64], top: f64, tied: &mut [i64]) -> usize {
    let is_top: Vec<usize> = values.iter().map(|&v| (v == top) as usize).collect();
    let mut nt = 0;
    for (i, &s) in slot.iter().enumerate() {
        // SAFETY: every slot is below values' length (checked by the caller), and
        // nt <= i < slot.len() <= tied.len()
        unsafe {
            *tied.get_unchecked_mut(nt) = i as i64;
            nt += *is_top.get_unchecked(s as usize);
        }
    }
    nt
}

/// The ranking `rank_scores` takes, of the `n > 0` scores `total`.
fn rank(total: &[f64], k: usize, tied: &[Cell<i64>], best: &[Cell<i64>]) -> (usize, usize) {
    let n = total.len();
    let mut top = f64::NEG_INFINITY;
    for i in 0..n {
        let v = total[i];
        if v.is_nan() {
            return (0, 0);
        }
        if v > top {
            top = v;
        }
    }
    let mut nt = 0;
    for i in 0..n {
        if total[i] == top {
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
        let v = total[i];
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
    let (ids, rows) = (plain(ro(py, &ib, "ids", None)?), plain(ro(py, &rb, "rows", None)?));
    let n = rows.len();
    let (mb, pb, sb) = (PyBuffer::<i64>::get(marks)?, PyBuffer::<i64>::get(reps)?, PyBuffer::<i64>::get(slot)?);
    let marks = plain_mut(rw(py, &mb, "marks", 0)?);
    let (reps, slot) = (plain_mut(rw(py, &pb, "reps", n)?), plain_mut(rw(py, &sb, "slot", n)?));
    for (what, out) in [("marks", &*marks), ("reps", &*reps), ("slot", &*slot)] {
        disjoint(what, out, &[ids, rows])?;
    }
    disjoint("reps", reps, &[&*marks])?;
    disjoint("slot", slot, &[&*marks, &*reps])?;
    // a negative row is a huge u64: one vectorised maximum checks both bounds
    if rows.iter().fold(0u64, |m, &r| m.max(r as u64)) >= ids.len() as u64 {
        let r = rows.iter().find(|&&r| r as u64 >= ids.len() as u64).unwrap();
        return Err(PyValueError::new_err(format!("rows: row {r} is outside the {} rows of ids", ids.len())));
    }
    let mut k = 0usize;
    let mut bad: Option<String> = None;
    for (i, &r) in rows.iter().enumerate() {
        // SAFETY: every row is below ids' length (checked above)
        let c = unsafe { *ids.get_unchecked(r as usize) };
        if c as u64 >= marks.len() as u64 {
            bad = Some(format!("ids: row {r} has class {c}, outside 0..{} (marks)", marks.len()));
            break;
        }
        // SAFETY: 0 <= c < marks.len() (just checked); i < n <= slot.len(); k <= i
        unsafe {
            let m = marks.get_unchecked_mut(c as usize);
            if *m < 0 {
                *m = k as i64;
                *reps.get_unchecked_mut(k) = r;
                k += 1;
            }
            *slot.get_unchecked_mut(i) = *m;
        }
    }
    // every class marked is one of reps' rows: clearing theirs leaves marks as it came
    for &rep in reps[..k].iter() {
        marks[ids[rep as usize] as usize] = -1;
    }
    match bad {
        Some(msg) => Err(PyValueError::new_err(msg)),
        None => Ok(k),
    }
}

/// `framework.total_score`'s sum: `out` (float64 [n], written) = 0.0, then for each part
/// (float64 [n] each, in order) `out += part` when its weight is 1.0, else
/// `out += weight * part`: the same IEEE operations, element by element and in the same
/// order, as numpy's `total += w * s if w != 1.0 else s` (no fused multiply-add), so the
/// same bits. Returns `false` with nothing written when a part is not a C-contiguous
/// float64 array of `n` values (the caller's numpy loop takes it then); `ValueError` when
/// `weights` and `parts` differ in length or `out` shares memory with a part.
#[pyfunction]
pub fn weighted_total(py: Python<'_>, parts: Vec<Bound<'_, PyAny>>, weights: Vec<f64>, out: &Bound<'_, PyAny>)
    -> PyResult<bool> {
    if parts.len() != weights.len() {
        return Err(PyValueError::new_err(format!("{} parts, {} weights", parts.len(), weights.len())));
    }
    let ob = PyBuffer::<f64>::get(out)?;
    let n = ob.item_count();
    let mut bufs = Vec::with_capacity(parts.len());
    for p in parts.iter() {
        match PyBuffer::<f64>::get(p) {
            Ok(b) if b.item_count() == n && b.is_c_contiguous() => bufs.push(b),
            _ => return Ok(false),
        }
    }
    let mut slices = Vec::with_capacity(bufs.len());
    for b in bufs.iter() {
        match b.as_slice(py) {
            Some(s) => slices.push(plain(s)),
            None => return Ok(false),
        }
    }
    let out = plain_mut(rw(py, &ob, "out", n)?);
    for s in slices.iter() {
        disjoint("out", out, &[*s])?;
    }
    out.fill(0.0);
    for (s, &w) in slices.iter().zip(weights.iter()) {
        if w == 1.0 {
            for (t, &v) in out.iter_mut().zip(s.iter()) {
                *t += v;
            }
        } else {
            for (t, &v) in out.iter_mut().zip(s.iter()) {
                *t += w * v;
            }
        }
    }
    Ok(true)
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
