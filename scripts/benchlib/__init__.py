"""The daemon benchmarks behind `make bench` (scripts/bench.py)."""
