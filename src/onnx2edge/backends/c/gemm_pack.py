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
AVX2, NEON and portable kernels all read the same MR = 8 panels.
"""

from __future__ import annotations

from collections.abc import Sequence

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
    return _panels(a, MR)


def _panels(a: np.ndarray, width: int) -> np.ndarray:
    """The rows of a float32 (M, K) matrix in panels of `width`, each panel column-major:
    (panels, width, K) -> (panels, K, width), rows past M zero. Filled panel by panel, so a
    large weight is copied once (not padded, then transposed)."""
    m, k = a.shape
    if m == 0 or k == 0:
        return np.zeros(0, np.float32)
    panels = -(-m // width)
    out = np.zeros((panels, k, width), np.float32)
    for p in range(panels):
        rows = a[p * width : (p + 1) * width]
        out[p, :, : rows.shape[0]] = rows.T
    return out.reshape(-1)


PB = 48  # must match O2E_GEMM_PB in runtime/o2e_gemm.h (a multiple of every kernel's NR)


def packed_b_size(k: int, n: int) -> int:
    """Number of float32 values `pack_b` returns for a k x n matrix."""
    if k <= 0 or n <= 0:
        return 0
    return -(-n // PB) * PB * k


def pack_b(b: np.ndarray) -> np.ndarray:
    """Pack a constant 2-D (K, N) B operand into the layout `o2e_sgemm_bpacked` reads.

    Columns are grouped into strips of PB = 48; strip q holds columns 48q .. 48q+47 of every
    row, row-major: element (k, 48q + j) sits at ``q * 48 * K + k * 48 + j``; columns past N
    are zeros. Each ISA's kernel reads an NR-wide part of a strip with row stride 48, and a
    K slice of a strip is one contiguous run, so the run time never packs B.
    """
    b = np.asarray(b)
    if b.ndim != 2:
        raise ValueError(f"pack_b needs a 2-D (K, N) matrix, got shape {b.shape}")
    return _panels(b.astype(np.float32, copy=False).T, PB)  # B's columns are A's rows


# Default blocking of o2e_gemm.h, per kernel variant: (KC, NR, A-block bytes, small-N limit).
_SB = 1
_CONV_SB = 4  # O2E_GEMM_CONV_SB: the implicit im2col's strips (o2e_sgemm_packed_conv)
_MC_MIN = 64
_SN_KB = 128
KC_MIN = 64  # lowest O2E_GEMM_KC a generated model may be built with (blocking_guard)
_VARIANTS = {
    "avx512": (256, 48, 8 * 1024 * 1024, 12),
    "avx2": (160, 24, 8 * 1024 * 1024, 1),
    "portable": (160, 8, 256 * 1024, 1),
    "neon": (256, 12, 512 * 1024, 1),
}


def _rup16(n: int) -> int:
    return (n + 15) & ~15


def _ws_floats(
    m: int, n: int, k: int, kc: int, nr: int, a_bytes: int, small_n: int, sb: int = _SB
) -> int:
    if m <= 0 or n <= 0 or k <= 0:
        return 0
    if n == 1:
        return _rup16(k) + _rup16(m + MR)
    total = _rup16(min(k, kc) * sb * nr)  # one K slice of packed B (O2E_GEMM_KCB_)
    # The C code adds the M block's partial-sum tile when K > KC; counted from K > KC_MIN, so
    # a build that lowers O2E_GEMM_KC (tuning, down to KC_MIN) never outgrows the arena.
    if k > KC_MIN:
        rows = min(max(a_bytes / (k * 4.0), _MC_MIN), m)
        mc = max(MR, (int(rows) + MR - 1) // MR * MR)
        total += _rup16(mc * sb * nr)
    # Callers plan one workspace for their largest call and issue smaller ones too (a
    # deconvolution's last row block has fewer columns): a call with N' <= small_n columns
    # takes the small-N path, whose scratch may exceed this N's now that packed B holds only
    # min(K, KC) rows. Bound every N' <= N, not just N itself (the C sizes each call alone).
    if small_n > 1:
        ns = min(n, small_n)
        sn = _rup16(ns * (_SN_KB + 2) * 8) + _rup16(4 * MR * _SN_KB) + _rup16((m + MR) * ns) + 16
        total = max(total, sn)
    return max(total, _rup16(k) + _rup16(m + MR))  # N' = 1: the GEMV path


def blocking_guard() -> str:
    """C preprocessor lines that stop a build raising o2e_gemm.h's blocking above the defaults.

    `sgemm_workspace_bytes` grows with each of these knobs (and not with a lower KC), so a
    generated model compiled with, say, -DO2E_GEMM_KC=512 would overrun its static arena: the
    build fails with this message instead. Lower values stay allowed (tuning experiments),
    down to KC_MIN for the K slice.
    """
    kc, a_bytes = (max(v[i] for v in _VARIANTS.values()) for i in (0, 2))
    limits = [
        ("O2E_GEMM_KC", kc),
        ("O2E_GEMM_SB", _SB),
        ("O2E_GEMM_CONV_SB", _CONV_SB),
        ("O2E_GEMM_A_BYTES", a_bytes),
        ("O2E_GEMM_MC_MIN", _MC_MIN),
        ("O2E_SN_KB", _SN_KB),
    ]
    cond = " || ".join([f"O2E_GEMM_KC < {KC_MIN}"] + [f"{name} > {v}" for name, v in limits])
    names = ", ".join(name for name, _ in limits)
    return (
        f"#if {cond}\n"
        f'#error "GEMM workspaces were sized for the default {names} (KC >= {KC_MIN}): '
        'lower them or reconvert"\n'
        "#endif\n"
    )


def sgemm_workspace_bytes(
    m: int,
    n: int,
    k: int,
    threads: int = 1,
    conv: bool = False,
    variants: Sequence[str] = tuple(_VARIANTS),
) -> int:
    """Bytes of workspace `o2e_sgemm` / `o2e_sgemm_packed` need for an m x n x k product.

    Mirrors `o2e_sgemm_workspace` in C and returns the largest value over `variants` (by
    default the AVX-512, AVX2, NEON and portable kernels; a `--device` conversion names the
    one its build runs) at the default blocking, `threads` = O2E_THREADS, so a converter can
    size a static arena without knowing which kernel the model will be compiled with.
    """
    sb = _CONV_SB if conv else _SB  # conv: `o2e_sgemm_conv_workspace` (wider strips)
    floats = max(_ws_floats(m, n, k, *_VARIANTS[v], sb=sb) for v in variants)
    return floats * max(1, threads) * 4 + 64
