"""The compiled kernels (``kernels/``, Rust, built into the venv by ``bin/suanli``).

``KERNELS`` is the ``suanli_kernels`` module, or None where it is not built; every caller
keeps its Python implementation as the reference and runs it then. The kernels compute the
same values bit for bit (``tests/processors/test_score_kernels.py``,
``tests/projections/test_audit_kernel.py``); callers read ``compiled.KERNELS`` at call time,
so a test can switch the Python path on by setting it to None.
"""
from __future__ import annotations

import numpy as np

try:
    import suanli_kernels as KERNELS
except ImportError:  # pragma: no cover - the kernels' tests fail when bin/suanli did not build them
    KERNELS = None


def int64_rows(rows: np.ndarray) -> np.ndarray:
    """``rows`` as the C-contiguous int64 array a kernel takes (no copy when it already is)."""
    if rows.dtype == np.int64 and rows.flags.c_contiguous:
        return rows
    return np.ascontiguousarray(rows, dtype=np.int64)
