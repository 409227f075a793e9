"""The C backend (see backend.py)."""
