"""Benchmarks of pramopt: optimal vs closed-form designs, solvers, scaling, figures.

Run ``python -m benchmarks [study ...] [--quick] [--out DIR]`` from the repository root.
Not part of the default test run; ``tests/test_benchmarks_smoke.py`` runs each study on a tiny case.
"""
