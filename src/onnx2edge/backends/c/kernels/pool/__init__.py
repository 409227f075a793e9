"""Pooling kernels over PoolSpec (rows, phase planes); the lists are ops/pool.py."""
