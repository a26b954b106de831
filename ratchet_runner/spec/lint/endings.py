"""W518: a row that ends a run compensated or cancelled while a change it never undoes may still
be in place.

A saga undoes its changes in a ``compensate`` state; a run that reaches a ``compensated`` or
``cancelled`` end any other way, or after its undo failed, skips that undo. Following every path
from ``start`` (:func:`~ratchet_runner.spec.paths.made_before`), a row into such an end is
flagged when some path into it can have made a change whose compensation is an effect
(registered, never run) or ``impossible`` (a person must be told). A change kept on purpose
(``none: REASON``) may stay.
"""

from __future__ import annotations

from collections.abc import Iterator

from ...errors import Diagnostic
from ..model import Spec
from ..paths import after_row, effect_row, made_before
from .support import at, col

#: The ends that say the run's changes were undone, or that none were made.
UNDONE_ENDS = frozenset({"compensated", "cancelled"})


def check_saga_endings(spec: Spec) -> Iterator[Diagnostic]:
    known = made_before(spec)
    undo_states = [s.name for s in spec.states.values() if s.kind == "compensate"]
    for row in spec.transitions:
        end = spec.states.get(row.next_state)
        if end is None or end.kind not in UNDONE_ENDS or row.state not in known:
            continue
        if spec.states[row.state].kind == "compensate" and row.event == "ok":
            continue  # it undid what it could; one it cannot undo goes to a person instead
        left = []
        for state, made in after_row(spec, row, known[row.state]).items():
            found = effect_row(spec, state)
            comp = found[0].compensation if found is not None else None
            if found is not None and comp is not None and comp.kind != "none":
                left.append(f"{found[1].name} ({'made' if made == 'made' else 'maybe made'})")
        if not left:
            continue
        if spec.states[row.state].kind == "compensate":
            instead = f"the undo {row.event}: go to an operator queue, for a person to finish it"
        elif undo_states:
            instead = (
                f"go to {undo_states[0]!r} first, which undoes them "
                "(or end in an operator queue, for a person)"
            )
        else:
            instead = "add a compensate state that undoes them, and go there"
        yield at(
            spec,
            col(row, "next_state"),
            "W518",
            f"{row.state} --{row.event}--> {end.name} ends the run {end.kind}, but "
            f"{', '.join(sorted(left))} may still be in place on the way here and would never be "
            f"undone: {instead}",
        )
