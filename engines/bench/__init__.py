"""The Spec-Bench-style benchmark, and whether a run's output equals plain decoding.
"""
