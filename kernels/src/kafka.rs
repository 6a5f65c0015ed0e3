//! `murmur2`: the Kafka key hash that picks a keyed record's partition.
//!
//! aiokafka's `DefaultPartitioner` (and the Java client's) computes it in pure Python for
//! every keyed record a producer sends, ~5 us for a short key; `streams/partitioner.py`
//! calls this instead and makes the same choice. Same arithmetic as aiokafka's
//! `partitioner.murmur2` (32-bit wrapping steps, seed 0x9747b28c), so the same value for
//! every key: `tests/streams/test_partitioner.py` compares them.
use pyo3::prelude::*;

const M: u32 = 0x5bd1_e995;

/// MurmurHash2 of `data`, as `aiokafka.partitioner.murmur2` returns it (an unsigned 32-bit value).
#[pyfunction]
pub fn murmur2(data: &[u8]) -> u32 {
    let mut h: u32 = 0x9747_b28c ^ (data.len() as u32);
    let chunks = data.chunks_exact(4);
    let rest = chunks.remainder();
    for c in chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> 24;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    if rest.len() >= 3 {
        h ^= (rest[2] as u32) << 16;
    }
    if rest.len() >= 2 {
        h ^= (rest[1] as u32) << 8;
    }
    if !rest.is_empty() {
        h ^= rest[0] as u32;
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h
}
