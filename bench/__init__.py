"""Benchmarks: `suanli bench` measures and prints; it asserts nothing about speed."""
