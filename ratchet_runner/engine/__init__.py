"""The engine: drives a run through its table, performs each effect by the effect protocol, and
carries out what the commands ask of a run (start, decide, signal, resume, operate)."""
