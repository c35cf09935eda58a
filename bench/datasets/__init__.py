"""Deterministic dataset generators for the quality benchmarks (bench/evolving.py, bench/profiles.py).

Each generator is pure Python: the same seed gives the same memories and questions, byte for byte.
"""
