"""Review: what people read and run to trust a spec and its runs — ``ratchet check``, traces,
tables, the views the CLI prints, and the diagrams."""
