"""Changing a workflow while its runs are in flight.

Two versions of a spec compared (:mod:`.diff`: every state, row, guard, effect, contract,
approval, compensation and timer added, removed or changed, each located), the mapping file an
operator writes to move runs between them (:mod:`.mapping`), what one unfinished run stands on
(:mod:`.runs`), and the hazards of the change, for the change itself and for each live run
(:mod:`.hazards`, over :mod:`.basis` and its checks :mod:`.states`, :mod:`.effects` and
:mod:`.reads`), shown as text, JSON or a pull-request comment (:mod:`.render`, with its
picture in :mod:`.picture`). It stands beside the worker and the session: it reads the spec,
the store and the engine, and imports nothing of the session, the worker, the read models, the
service or the command line.
"""
