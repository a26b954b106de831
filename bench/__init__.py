"""Ratchet's benchmarks. Run them all with ``python -m bench`` (or ``make bench``).

Each benchmark measures Ratchet beside a baseline measured in the same run on the same machine
and reports the ratio, so a slower machine does not read as a regression.
"""
