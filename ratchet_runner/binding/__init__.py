"""Bindings, the extension point that says how each adapter a spec names is reached in one
environment: binding files found, read, named and digested (:mod:`.files`), checked against a
spec (:mod:`.check`, the ``B`` codes), the implementations a binding may name and what each offers
(:mod:`.implementations`: ``http``, ``python``, ``noop``, ``practice``, plugins), and a runner's
adapters resolved through them (:mod:`.resolve`)."""
