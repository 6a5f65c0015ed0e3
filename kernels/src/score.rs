//! The scheduler's per-row scoring arithmetic (`processors/plugins/basic.py` BestFit,
//! `processors/plugins/strand.py` CpuStrand, `processors/plugins/fgd.py` FGD in raw mode).
//!
//! Each function is the numpy expression it replaces, written out element by element with
//! the same IEEE operations in the same order, so every result is bit for bit the numpy
//! one (`tests/processors/test_score_kernels.py` checks that on random states). What the
//! numpy version spends is per-call overhead: a decision at 5,000 nodes made about 25 array
//! operations of 3-10 µs each over the feasible rows; here each scorer is one pass.
//!
//! Arrays come in through the buffer protocol: int64 (`i64`), float64 (`f64`) and uint8,
//! C-contiguous, as the state keeps them; a wrong dtype raises `BufferError`, a wrong layout or
//! length `ValueError`, and an index out of range `IndexError` (nothing is written then).
use pyo3::buffer::{Element, PyBuffer, ReadOnlyCell};
use pyo3::exceptions::{PyIndexError, PyValueError};
use pyo3::prelude::*;
use std::cell::Cell;

struct Ro<T: Element> {
    buf: PyBuffer<T>,
}

impl<T: Element + Copy> Ro<T> {
    fn new(obj: &Bound<'_, PyAny>) -> PyResult<Self> {
        Ok(Ro { buf: PyBuffer::get(obj)? })
    }
    fn slice<'a>(&'a self, py: Python<'a>, what: &str) -> PyResult<&'a [ReadOnlyCell<T>]> {
        self.buf
            .as_slice(py)
            .ok_or_else(|| PyValueError::new_err(format!("{what}: not a C-contiguous array")))
    }
}

fn out_slice<'a, T: Element>(py: Python<'a>, buf: &'a PyBuffer<T>, what: &str, len: usize)
    -> PyResult<&'a [Cell<T>]> {
    let s = buf
        .as_mut_slice(py)
        .ok_or_else(|| PyValueError::new_err(format!("{what}: not a writable C-contiguous array")))?;
    if s.len() != len {
        return Err(PyValueError::new_err(format!("{what}: {} elements, expected {len}", s.len())));
    }
    Ok(s)
}

fn rows_in(rows: &[ReadOnlyCell<i64>], n: usize) -> PyResult<()> {
    for r in rows {
        let r = r.get();
        if r < 0 || r as usize >= n {
            return Err(PyIndexError::new_err(format!("row {r} out of range for {n} nodes")));
        }
    }
    Ok(())
}

/// numpy's `maximum(0.0, x)`: `0.0 >= x ? 0.0 : x` (NaN passes through, as in numpy).
#[inline]
fn max0(x: f64) -> f64 {
    if 0.0 >= x { 0.0 } else { x }
}

/// BestFit over `rows`: `trunc((1 - ((cpu_free[r] - req_cpu) / max_cpu * cpu_share
/// + (gpu_total[r] - req_gpu) / max_gpu * gpu_share)) * 100)` into `out`.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn bestfit_rows(py: Python<'_>, cpu_free: &Bound<'_, PyAny>, gpu_total: &Bound<'_, PyAny>,
                    rows: &Bound<'_, PyAny>, req_cpu: i64, req_gpu: i64, max_cpu: f64, max_gpu: f64,
                    cpu_share: f64, gpu_share: f64, out: &Bound<'_, PyAny>) -> PyResult<()> {
    let (cf, gt, rw) = (Ro::<i64>::new(cpu_free)?, Ro::<i64>::new(gpu_total)?, Ro::<i64>::new(rows)?);
    let (cf, gt, rw) = (cf.slice(py, "cpu_free")?, gt.slice(py, "gpu_total")?, rw.slice(py, "rows")?);
    rows_in(rw, cf.len().min(gt.len()))?;
    let ob = PyBuffer::<f64>::get(out)?;
    let o = out_slice(py, &ob, "out", rw.len())?;
    for (i, r) in rw.iter().enumerate() {
        let r = r.get() as usize;
        let c = (cf[r].get() - req_cpu) as f64 / max_cpu * cpu_share;
        let g = (gt[r].get() - req_gpu) as f64 / max_gpu * gpu_share;
        o[i].set(((1.0 - (c + g)) * 100.0).trunc());
    }
    Ok(())
}

/// CpuStrand over `rows`: `max(0, g - c/rho) - max(0, (g - req_gpu) - (c - req_cpu)/rho)`
/// with `c`, `g` the row's free CPU and GPU milli as floats, into `out`.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn strand_rows(py: Python<'_>, cpu_free: &Bound<'_, PyAny>, gpu_total: &Bound<'_, PyAny>,
                   rows: &Bound<'_, PyAny>, req_cpu: i64, req_gpu: i64, rho: f64,
                   out: &Bound<'_, PyAny>) -> PyResult<()> {
    let (cf, gt, rw) = (Ro::<i64>::new(cpu_free)?, Ro::<i64>::new(gpu_total)?, Ro::<i64>::new(rows)?);
    let (cf, gt, rw) = (cf.slice(py, "cpu_free")?, gt.slice(py, "gpu_total")?, rw.slice(py, "rows")?);
    rows_in(rw, cf.len().min(gt.len()))?;
    let ob = PyBuffer::<f64>::get(out)?;
    let o = out_slice(py, &ob, "out", rw.len())?;
    // numpy adds a Python int to a float64 array as a float64
    let (rc, rg) = (req_cpu as f64, req_gpu as f64);
    for (i, r) in rw.iter().enumerate() {
        let r = r.get() as usize;
        let (c, g) = (cf[r].get() as f64, gt[r].get() as f64);
        let before = max0(g - c / rho);
        let after = max0((g - rg) - (c - rc) / rho);
        o[i].set(before - after);
    }
    Ok(())
}

/// The typical tasks (`frag.TypicalTasks`), borrowed.
struct Typical<'a> {
    cpu: &'a [ReadOnlyCell<i64>],
    num: &'a [ReadOnlyCell<i64>],
    milli: &'a [ReadOnlyCell<i64>],
    count: &'a [ReadOnlyCell<i64>],
}

impl Typical<'_> {
    /// `frag.node_frag` of one node state (count-weighted, int64; exact, like numpy's).
    fn node_frag(&self, cpu: i64, gpu: &[i64], acc: &[bool], ign: bool) -> i64 {
        let total: i64 = gpu.iter().map(|&g| g.max(0)).sum();
        let mut f_sum: i64 = 0;
        for c in 0..self.cpu.len() {
            let m = self.milli[c].get();
            let a = acc[c];
            let f = if ign && !a {
                0
            } else {
                let (mut cnt, mut part) = (0i64, 0i64);
                for &g in gpu {
                    if g >= m { cnt += 1 } else { part += g.max(0) }
                }
                let q3 = m > 0 && a && cnt >= self.num[c].get() && cpu >= self.cpu[c].get();
                if q3 { part } else { total }
            };
            f_sum = f_sum.wrapping_add(f.wrapping_mul(self.count[c].get()));
        }
        f_sum
    }
}

/// One FGD placement scorer in ``raw`` mode: the typical tasks, the access table and the
/// task's shape, with scratch buffers for one node state at a time.
struct FgdRaw<'a> {
    tt: Typical<'a>,
    acc_t: &'a [ReadOnlyCell<u8>],
    cols: usize,
    kind: u8,
    req_cpu: i64,
    req_milli: i64,
    req_count: i64,
    ign: bool,
    gap_weight: f64,
    wt: &'a [ReadOnlyCell<f64>],
    quantum: f64,
    tot: f64,
    acc_col: Vec<bool>,
    g2: Vec<i64>,
    sc: Vec<f64>,
}

impl<'a> FgdRaw<'a> {
    /// `req`: the task's CPU, GPU milli and GPU count. `width`: devices per node state.
    #[allow(clippy::too_many_arguments)]
    fn new(tt: Typical<'a>, acc_t: &'a [ReadOnlyCell<u8>], cols: usize, kind: u8, req: [i64; 3], ign: bool,
           gap_weight: f64, wt: &'a [ReadOnlyCell<f64>], quantum: f64, total: i64, width: usize)
           -> PyResult<Self> {
        if gap_weight != 0.0 && kind == 1 && wt.len() != 1001 {
            return Err(PyValueError::new_err("wt: the gap waste table has 1001 entries"));
        }
        let c = tt.cpu.len();
        Ok(FgdRaw { tt, acc_t, cols, kind, req_cpu: req[0], req_milli: req[1], req_count: req[2], ign, gap_weight,
                    wt, quantum, tot: total as f64, acc_col: Vec::with_capacity(c), g2: vec![0; width],
                    sc: Vec::with_capacity(width) })
    }

    fn quant(&self, d: f64) -> f64 {
        if self.quantum > 0.0 { (d / self.quantum).floor() } else { d }
    }

    /// (score, device) of one node state: free CPU `cpu_i`, free milli per device `g`,
    /// model index `m` (in range: the caller checked). The device is -1 but for a shared task.
    fn score(&mut self, cpu_i: i64, g: &[i64], m: i64) -> (f64, i64) {
        let col = if m < 0 { self.cols as i64 + m } else { m } as usize;
        self.acc_col.clear();
        for ci in 0..self.tt.cpu.len() {
            self.acc_col.push(self.acc_t[ci * self.cols + col].get() != 0);
        }
        let width = g.len();
        self.g2.resize(width, 0);
        let before = self.tt.node_frag(cpu_i, g, &self.acc_col, self.ign);
        if self.kind == 1 {
            // numpy: sc = where(fits, delta, -inf); the device with the best score,
            // ties to the least free milli, then the lowest index (argmin's first)
            let mut best = f64::NEG_INFINITY;
            self.sc.clear();
            for j in 0..width {
                let fits = g[j] >= self.req_milli;
                let s = if fits {
                    self.g2.copy_from_slice(g);
                    self.g2[j] -= self.req_milli;
                    let after = self.tt.node_frag(cpu_i - self.req_cpu, &self.g2, &self.acc_col, self.ign);
                    let mut delta = (before - after) as f64 / self.tot;
                    if self.gap_weight != 0.0 {
                        let a = self.wt[g[j].clamp(0, 1000) as usize].get();
                        let b = self.wt[(g[j] - self.req_milli).clamp(0, 1000) as usize].get();
                        delta = delta + self.gap_weight * (a - b);
                    }
                    self.quant(delta)
                } else {
                    f64::NEG_INFINITY
                };
                if s > best {
                    best = s;
                }
                self.sc.push(s);
            }
            let (mut dev, mut key) = (0usize, i64::MAX);
            for j in 0..width {
                let kj = if g[j] >= self.req_milli && self.sc[j] == best { g[j] } else { i64::MAX };
                if kj < key {
                    key = kj;
                    dev = j;
                }
            }
            return (if width > 0 { self.sc[dev] } else { f64::NAN }, dev as i64);
        }
        self.g2.copy_from_slice(g);
        if self.kind == 2 {
            // the lowest-index devices with >= req_milli free (whole devices are alike)
            let mut taken = 0;
            for v in self.g2.iter_mut() {
                if *v >= self.req_milli {
                    taken += 1;
                    if taken <= self.req_count {
                        *v -= self.req_milli;
                    }
                }
            }
        }
        let after = self.tt.node_frag(cpu_i - self.req_cpu, &self.g2, &self.acc_col, self.ign);
        (self.quant((before - after) as f64 / self.tot), -1)
    }
}

/// The typical tasks' four arrays, borrowed and checked: equal lengths, a total above 0.
fn typical_of<'a>(py: Python<'a>, bufs: &'a [Ro<i64>; 4], total: i64) -> PyResult<Typical<'a>> {
    let tt = Typical { cpu: bufs[0].slice(py, "tt.cpu")?, num: bufs[1].slice(py, "tt.num")?,
                       milli: bufs[2].slice(py, "tt.milli")?, count: bufs[3].slice(py, "tt.count")? };
    let c = tt.cpu.len();
    if tt.num.len() != c || tt.milli.len() != c || tt.count.len() != c {
        return Err(PyValueError::new_err("typical tasks: arrays of different lengths"));
    }
    if total == 0 {
        return Err(PyValueError::new_err("typical tasks: total 0 (no fragmentation to score)"));
    }
    Ok(tt)
}

/// The access table's column count, checked against `c` typical tasks.
fn acc_cols(ab: &Ro<u8>, c: usize) -> PyResult<usize> {
    let shape = ab.buf.shape();
    if shape.len() != 2 || shape[0] != c || shape[1] == 0 {
        return Err(PyValueError::new_err(format!("acc: shape {shape:?}, expected [{c}, M+1]")));
    }
    Ok(shape[1])
}

/// Every model index in range (numpy's -1 reads the last column).
fn models_in(midx: &[ReadOnlyCell<i64>], cols: usize) -> PyResult<()> {
    if let Some(m) = midx.iter().map(|m| m.get()).find(|&m| m < -(cols as i64) || m >= cols as i64) {
        return Err(PyIndexError::new_err(format!("model index {m} out of range for {cols} columns")));
    }
    Ok(())
}

/// FGD's `_score_states` in ``raw`` mode for k node states: the placement's drop in
/// count-weighted fragmentation over `total`, (shared task) plus `gap_weight` times the drop
/// in the gap's expected final waste (`wt`), floored by `quantum` when > 0; for a shared
/// task the best device (ties: least free milli, then lowest index) into `out_dev`.
///
/// `kind`: 0 cpu, 1 shared, 2 whole. `acc`: the access table [C, M+1] (bool, viewed as
/// uint8: the buffer protocol has no bool element here); a model index
/// of -1 reads its last column, as numpy's negative index does. `gpu`: [k, G].
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn fgd_raw_states(py: Python<'_>, tt_cpu: &Bound<'_, PyAny>, tt_num: &Bound<'_, PyAny>,
                      tt_milli: &Bound<'_, PyAny>, tt_count: &Bound<'_, PyAny>, total: i64,
                      acc: &Bound<'_, PyAny>, cpu: &Bound<'_, PyAny>, gpu: &Bound<'_, PyAny>,
                      midx: &Bound<'_, PyAny>, kind: u8, req_cpu: i64, req_milli: i64, req_count: i64,
                      ign: bool, gap_weight: f64, wt: &Bound<'_, PyAny>, quantum: f64,
                      out_score: &Bound<'_, PyAny>, out_dev: &Bound<'_, PyAny>) -> PyResult<()> {
    let bufs = [Ro::<i64>::new(tt_cpu)?, Ro::<i64>::new(tt_num)?, Ro::<i64>::new(tt_milli)?,
                Ro::<i64>::new(tt_count)?];
    let tt = typical_of(py, &bufs, total)?;
    let c = tt.cpu.len();
    let (ab, cb, gb, mb, wb) = (Ro::<u8>::new(acc)?, Ro::<i64>::new(cpu)?, Ro::<i64>::new(gpu)?,
                                Ro::<i64>::new(midx)?, Ro::<f64>::new(wt)?);
    let (acc_t, cpu, gpu, midx, wt) = (ab.slice(py, "acc")?, cb.slice(py, "cpu")?, gb.slice(py, "gpu")?,
                                       mb.slice(py, "midx")?, wb.slice(py, "wt")?);
    let k = cpu.len();
    let cols = acc_cols(&ab, c)?;
    let gshape = gb.buf.shape();
    if gshape.len() != 2 || gshape[0] != k || midx.len() != k {
        return Err(PyValueError::new_err(format!("gpu {gshape:?} / midx {} / cpu {k}: lengths differ", midx.len())));
    }
    let width = gshape[1];
    let mut f = FgdRaw::new(tt, acc_t, cols, kind, [req_cpu, req_milli, req_count], ign, gap_weight, wt, quantum,
                            total, width)?;
    let sb = PyBuffer::<f64>::get(out_score)?;
    let db = PyBuffer::<i64>::get(out_dev)?;
    let (os, od) = (out_slice(py, &sb, "out_score", k)?, out_slice(py, &db, "out_dev", k)?);
    models_in(midx, cols)?;
    let mut g: Vec<i64> = vec![0; width];
    for i in 0..k {
        for j in 0..width {
            g[j] = gpu[i * width + j].get();
        }
        let (score, dev) = f.score(cpu[i].get(), &g, midx[i].get());
        os[i].set(score);
        od[i].set(dev);
    }
    Ok(())
}

/// FGD's per-class read of one cycle (`plugins/fgd.py` `_entry` and `score`) in one pass:
/// for each of `rows`, its class `ids[row]`; a class `known` does not mark is scored now
/// from that row's state (`cpu_free[row]`, `gpu_free[row]`, `model_idx[row]`: any row of a
/// class has its state), its score put in `score_tbl` (and, for a shared task, its device in
/// `dev_tbl`) and marked known; `out[i]` is the class's score. Returns how many classes
/// were scored. A class's score is a pure function of its state, so the order in which
/// classes are met does not change any value: these are `fgd_raw_states`' numbers.
///
/// `known` is a bool array viewed as uint8. Everything is checked (shapes, rows, and the
/// class ids and model indices of those rows) before anything is written.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn fgd_class_scores(py: Python<'_>, tt_cpu: &Bound<'_, PyAny>, tt_num: &Bound<'_, PyAny>,
                        tt_milli: &Bound<'_, PyAny>, tt_count: &Bound<'_, PyAny>, total: i64,
                        acc: &Bound<'_, PyAny>, cpu_free: &Bound<'_, PyAny>, gpu_free: &Bound<'_, PyAny>,
                        model_idx: &Bound<'_, PyAny>, ids: &Bound<'_, PyAny>, rows: &Bound<'_, PyAny>,
                        known: &Bound<'_, PyAny>, score_tbl: &Bound<'_, PyAny>, dev_tbl: &Bound<'_, PyAny>,
                        kind: u8, req_cpu: i64, req_milli: i64, req_count: i64, ign: bool, gap_weight: f64,
                        wt: &Bound<'_, PyAny>, quantum: f64, out: &Bound<'_, PyAny>) -> PyResult<usize> {
    let bufs = [Ro::<i64>::new(tt_cpu)?, Ro::<i64>::new(tt_num)?, Ro::<i64>::new(tt_milli)?,
                Ro::<i64>::new(tt_count)?];
    let tt = typical_of(py, &bufs, total)?;
    let c = tt.cpu.len();
    let (ab, cb, gb, mb, ib, rb, wb) = (Ro::<u8>::new(acc)?, Ro::<i64>::new(cpu_free)?, Ro::<i64>::new(gpu_free)?,
                                        Ro::<i64>::new(model_idx)?, Ro::<i64>::new(ids)?, Ro::<i64>::new(rows)?,
                                        Ro::<f64>::new(wt)?);
    let (acc_t, cpu, gpu, midx, ids, rows, wt) = (ab.slice(py, "acc")?, cb.slice(py, "cpu_free")?,
                                                  gb.slice(py, "gpu_free")?, mb.slice(py, "model_idx")?,
                                                  ib.slice(py, "ids")?, rb.slice(py, "rows")?, wb.slice(py, "wt")?);
    let n = cpu.len();
    let cols = acc_cols(&ab, c)?;
    let gshape = gb.buf.shape();
    if gshape.len() != 2 || gshape[0] != n || midx.len() != n || ids.len() != n {
        return Err(PyValueError::new_err(format!("gpu_free {gshape:?} / model_idx {} / ids {} / cpu_free {n}: \
                                                  lengths differ", midx.len(), ids.len())));
    }
    let width = gshape[1];
    let mut f = FgdRaw::new(tt, acc_t, cols, kind, [req_cpu, req_milli, req_count], ign, gap_weight, wt, quantum,
                            total, width)?;
    let (kb, sb, db, ob) = (PyBuffer::<u8>::get(known)?, PyBuffer::<f64>::get(score_tbl)?,
                            PyBuffer::<i64>::get(dev_tbl)?, PyBuffer::<f64>::get(out)?);
    let classes = kb.item_count();
    let (kn, st, dt) = (out_slice(py, &kb, "known", classes)?, out_slice(py, &sb, "score_tbl", classes)?,
                        out_slice(py, &db, "dev_tbl", classes)?);
    let o = out_slice(py, &ob, "out", rows.len())?;
    for r in rows {
        let r = r.get();
        if r < 0 || r as usize >= n {
            return Err(PyIndexError::new_err(format!("row {r} out of range for {n} nodes")));
        }
        let id = ids[r as usize].get();
        if id < 0 || id as usize >= classes {
            return Err(PyIndexError::new_err(format!("class id {id} out of range for {classes} classes")));
        }
        let m = midx[r as usize].get();          // only these rows' model indices are read
        if m < -(cols as i64) || m >= cols as i64 {
            return Err(PyIndexError::new_err(format!("model index {m} out of range for {cols} columns")));
        }
    }
    let mut g: Vec<i64> = vec![0; width];
    let mut scored = 0usize;
    for (i, r) in rows.iter().enumerate() {
        // SAFETY: every row is < n and every id of those rows < classes (checked above), and
        // ids, known and score_tbl hold n, classes and classes elements: the hot loop of a
        // cycle reads about a thousand rows, and the bounds checks were half its cost
        let row = r.get() as usize;
        let id = unsafe { ids.get_unchecked(row) }.get() as usize;
        if unsafe { kn.get_unchecked(id) }.get() == 0 {
            for j in 0..width {
                g[j] = gpu[row * width + j].get();
            }
            let (score, dev) = f.score(cpu[row].get(), &g, midx[row].get());
            st[id].set(score);
            if kind == 1 {
                dt[id].set(dev);
            }
            kn[id].set(1);
            scored += 1;
        }
        o[i].set(unsafe { st.get_unchecked(id) }.get());
    }
    Ok(scored)
}
