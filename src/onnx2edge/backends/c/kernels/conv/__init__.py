"""Conv kernel strategies (ConvSpec, ConvStrategy) and their code; the list is ops/conv.py."""
