"""Review: the read models people are shown to trust a spec and its runs — the views the command
line and the service show, traces, tables, decisions and the diagrams — and the naive strategy
that ``ratchet run --naive`` and ``ratchet check --compare naive`` show, kept as a warning."""
