"""``ratchet check``: every crash window of every effect run for real, and the invariants proved
(cases, plan, http, invariants, report). A consumer of the library, as the command line is: each
case opens a session of its own."""
