"""Suanli (算力): an event-sourced streaming control plane for heterogeneous compute."""
__version__ = "0.1.0"
