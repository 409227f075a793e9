"""int8 kernels: GEMM / convolution (runtime/o2e_qgemm.h) and depthwise / element-wise (o2e_qdw.h)."""
