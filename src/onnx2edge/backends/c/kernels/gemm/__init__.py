"""The GEMM engine calls (runtime/o2e_gemm.h), MatMulSpec and the sparse layouts; the list is ops/matmul.py."""
