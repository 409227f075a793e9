"""Reference (numpy) of the packed-A layout used by runtime/o2e_gemm.h.

Constant weight matrices (the A operand: conv weights as M = output channels by
K = Cin/groups * kh * kw, fully-connected weights as M = outputs by K = inputs) are packed
once at conversion time, so the generated C code never repacks them.

Layout, identical to `o2e_pack_a` in C: rows are grouped into panels of MR = 8; panel p
holds rows 8p .. 8p+7 for the whole K, "k-major", i.e. element (8p + i, k) sits at
``p * 8 * K + k * 8 + i``. Rows past M in the last panel are zeros. The GEMM micro-kernel
then reads the 8 values it broadcasts for one K step from one cache line, and any K slice of
a panel is one contiguous run, so the kernel's K blocking can change without repacking.

The layout does not depend on the instruction set the C code is compiled for: the AVX-512,
AVX2 and portable kernels all read the same MR = 8 panels.
"""

from __future__ import annotations

import numpy as np

MR = 8  # must match O2E_GEMM_MR in runtime/o2e_gemm.h


def packed_a_size(m: int, k: int) -> int:
    """Number of float32 values `pack_a` returns for an m x k matrix."""
    if m <= 0 or k <= 0:
        return 0
    return -(-m // MR) * MR * k


def pack_a(a: np.ndarray) -> np.ndarray:
    """Pack a 2-D (M, K) matrix into the 1-D float32 layout `o2e_sgemm_packed` reads.

    An array with more than two dimensions is taken as (M, rest...) and flattened to
    (M, K), which is how conv weights (Cout, Cin/groups, kh, kw) map onto A.
    """
    a = np.asarray(a)
    if a.ndim < 2:
        raise ValueError(f"pack_a needs a 2-D (M, K) matrix, got shape {a.shape}")
    if a.ndim > 2:
        a = a.reshape(a.shape[0], -1)
    a = a.astype(np.float32, copy=False)
    m, k = a.shape
    if m == 0 or k == 0:
        return np.zeros(0, np.float32)
    panels = -(-m // MR)
    padded = np.zeros((panels * MR, k), np.float32)
    padded[:m] = a
    # (panels, MR, K) -> (panels, K, MR): the MR rows of one column become adjacent.
    return np.ascontiguousarray(padded.reshape(panels, MR, k).transpose(0, 2, 1)).reshape(-1)
