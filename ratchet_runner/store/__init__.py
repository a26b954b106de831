"""The store: every SQL statement Ratchet runs, on SQLite or PostgreSQL; a run's every change is
one compare-and-set commit (records → tables, dialects → one writer per database → store)."""
