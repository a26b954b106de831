"""Adapters: the one small protocol through which Ratchet changes the outside world
(:mod:`.base`), the ``noop`` adapter, the HTTP adapter (:mod:`.http`) and the practice world
(:mod:`.practice`).

The adapter kinds a spec may name are words of the spec language:
:data:`ratchet_runner.spec.kinds.KINDS`.
"""
