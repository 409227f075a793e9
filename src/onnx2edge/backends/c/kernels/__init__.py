"""The C backend's kernels, apart from op registration (ops/): each sub-package holds the
strategies of one family and the code they write. conv/: the Conv strategies over `ConvSpec`;
gemm/: the GEMM calls, `MatMulSpec`, the sparse layouts; int8/: the int8 GEMM, depthwise and
element-wise kernels; pool/: the pooling kernels over `PoolSpec`. Their static C is in
../runtime/*.h. Kernel modules never import op modules (tests/test_import_graph.py)."""
