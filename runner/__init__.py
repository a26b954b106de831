"""Ratchet: durable workflows whose external effects happen exactly once."""
