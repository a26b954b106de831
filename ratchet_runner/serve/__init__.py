"""The service: ``ratchet serve``'s HTTP API, its operators and their tokens."""
