"""The placement differential: draco + kube-scheduler against kube-scheduler with native DRA.

See ``tests/differential/test_placement.py`` for what is compared and how to run it.
"""
