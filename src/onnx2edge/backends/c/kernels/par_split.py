"""When a layer goes to the threads: one rule for every kernel that can split its work with
o2e_parallel_for (runtime/o2e_gemm.h), int8 and float alike.

A layer splits only when each of two threads would get at least PAR_MIN_US of work on one core.
A parallel region costs ~2-6 us on the 2-vCPU test host (the job hand-off, the join, cache lines
of the job counter moving between cores: the 8-unit split of MobileNetV3-small's 8 us 7x7
projections ran 14 us at 2 threads), and far more when the host stalls the second vCPU mid-job:
MobileViT-xs int8 ran 166 regions a run, 127 of them under 50 us, and was 2.07x slower at 2
threads than at 1. A kernel states its work in its own unit and the rate at which one core does
that unit (`RATE_*`, units per ns, measured per node from `bench --profile` at 1 thread, AMD
EPYC AVX-512; an AVX2 or slower core takes longer for the same work, so the thresholds err
towards not splitting); `min_work(rate)` is PAR_MIN_US of it.
"""

from __future__ import annotations

from ..emitter import NodeContext
from .gemm.gemm import _use_engine, plan_threads

PAR_MIN_US = 10
SPLIT_THREADS = 2  # the rule is taken at the smallest split: two threads

# int8 kernels (per node, 10th percentiles): products ~200 multiply-adds a ns (VNNI 1x1
# convolutions 300-400, matmul-shaped QGemm 130-200), depthwise ~45 tap operations a ns (35-50),
# the float-formula element-wise ops (QAdd, QMul, QuantizeLinear) ~15 bytes a ns, a VBMI table
# lookup ~40.
RATE_INT8_MACS = 200
RATE_INT8_DW = 45
RATE_INT8_BYTES = 15
RATE_INT8_LUT = 40
# float kernels (thread CPU time of the runtime kernels, AMD EPYC AVX-512): LayerNorm / RMSNorm
# rows 0.8-4 elements a ns (a row's fixed cost dominates short rows: ConvNeXt-atto's 3136 rows
# of 40 take 157 us, Whisper's 1500 of 384 137 us), group norm alike; the channel norm
# (positions in vector lanes) ~5; Softmax rows 1.8-2.8 (an exp each); fused attention ~60
# multiply-adds a ns (MiniLM's 12 heads of 128x128x32: 0.2 ms); pooling window taps and Resize
# output elements, not measured per node, at 4 a ns: no op splits finer than before the rule.
RATE_NORM = 2
RATE_CHANNEL_NORM = 5
RATE_SOFTMAX = 2
RATE_ATTENTION = 60
RATE_POOL = 4
RATE_RESIZE = 4


def min_work(rate: float) -> int:
    """Work (in the rate's unit) one thread must get for a split to pay: PAR_MIN_US of it."""
    return int(rate * 1000 * PAR_MIN_US)


def pays(work: int, units: int, threshold: int) -> bool:
    """Whether splitting `units` (at least two) gives each of two threads `threshold` work."""
    return units > 1 and work // min(SPLIT_THREADS, max(units, 1)) >= threshold


def split(ctx: NodeContext, work: int, units: int, threshold: int) -> bool:
    """Whether a kernel splits its `units` across threads: a build planned for more than one
    thread (never a microcontroller's) and `pays`. When it does, the threading runtime
    (o2e_parallel_for, o2e_gemm.h) joins the includes."""
    threaded = plan_threads(ctx) > 1 and pays(work, units, threshold)
    if threaded:
        _use_engine(ctx)
    return threaded


def split_at(ctx: NodeContext, work: int, units: int, rate: float) -> bool:
    """`split` with the threshold of a kernel doing `rate` units of work a ns."""
    return split(ctx, work, units, min_work(rate))
