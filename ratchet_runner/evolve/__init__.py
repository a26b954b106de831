"""Changing a workflow while its runs are in flight.

Two versions of a spec compared (:mod:`.diff`: every state, row, guard, effect, contract,
approval, compensation and timer added, removed or changed, each located), the mapping file an
operator writes to move runs between them (:mod:`.mapping`), what one unfinished run stands on
(:mod:`.runs`), and the hazards of the change, for the change itself and for each live run
(:mod:`.hazards`, over :mod:`.basis` and its checks :mod:`.states`, :mod:`.effects` and
:mod:`.reads`), shown as text, JSON or a pull-request comment (:mod:`.render`, with its
picture in :mod:`.picture`); a migration of the live runs, planned, applied and rolled back
(:mod:`.migrate`); and runs' histories in a portable format (:mod:`.history`) replayed under
another version (:mod:`.replay`, over :mod:`.walk`, :mod:`.moves`, :mod:`.effect_steps` and
:mod:`.continuing`; its verdicts in :mod:`.results`). It stands beside the worker and the
session: it reads the spec, the store and the engine, and imports nothing of the session, the
worker, the read models, the service or the command line.
"""
