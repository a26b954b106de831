"""The ``crash-windows`` view: each effect's durable sequence and where a crash can fall.

For every row that performs an effect, and then for every compensating effect a row registers
(``ratchet check`` crashes both), four steps top to bottom — (1) the write-ahead (version
bump, pending record, attempt counted), (2) the call sent, (3) the provider's commit, (4) the
receipt and the move committed together — and beside them the four windows a crash (or a lost
reply) can fall into, each with its one recovery and an edge back to where that recovery rejoins
the sequence (docs/explanation/crash-windows.md).

A row that validation flags (a missing or unstable idempotency key, no reconcile lookup, no
pending write, no receipt: the codes in :data:`UNSAFE_CODES`) is drawn in the unsafe colour with
its codes, and the windows it breaks show what recovery would really do: retry and hope.

A compensating effect runs by the same protocol (engine/compensation.py): its pending record is
the undo registered with the forward effect, its operation ID is derived from the forward one,
and its receipt is stored with the forward effect marked undone, while the run stays in the
``compensate`` state for the next undo, newest first.
"""

from __future__ import annotations

from collections.abc import Iterable

from ...errors import Diagnostic
from ...spec.codes import CODES
from ...spec.model import Effect, Row, Spec
from .model import Builder, Graph, Line, duration, wrap

#: The codes that make an effect row unsafe to crash in, drawn on the row.
UNSAFE_CODES = ("E501", "E502", "E503", "E504", "E505", "E513", "E516", "W517")
#: What each code does to the sequence, as said on the step it breaks.
_BROKEN = {
    "E501": "no idempotency key: every attempt is a new change",
    "E502": "the key changes between attempts: a new ID each time",
    "E503": "the key leaves out arguments: another change may share the ID",
    "E516": "the key does not name the effect: another effect may share the ID",
    "W517": "the key does not name the business key: runs may share the ID",
    "E505": "no pending write: a crash leaves no trace of the call",
    "E504": "no reconcile lookup: nobody can ask what happened",
    "E513": "no receipt: nothing stored proves the change",
}
WIDTH = 46


def effect_rows(spec: Spec) -> list[tuple[Row, Effect]]:
    """Every row that performs a declared effect, in table order."""
    return [
        (row, spec.effects[row.external_effect])
        for row in spec.transitions
        if row.external_effect is not None and row.external_effect in spec.effects
    ]


def compensation_rows(spec: Spec) -> list[tuple[Row, Effect]]:
    """Every row that performs a forward effect and registers a declared compensating effect,
    with that compensating effect, in table order."""
    return [
        (row, spec.effects[row.compensation.effect])
        for row, _ in effect_rows(spec)
        if row.compensation is not None
        and row.compensation.effect is not None
        and row.compensation.effect in spec.effects
    ]


def _under(pointer: str, base: str) -> bool:
    return pointer == base or pointer.startswith(base + "/")


def findings(row: Row, effect: Effect, diagnostics: Iterable[Diagnostic]) -> list[Diagnostic]:
    """The unsafe findings about ``row`` or its effect."""
    return sorted(
        d
        for d in diagnostics
        if d.code in UNSAFE_CODES
        and (_under(d.pointer, row.pointer) or _under(d.pointer, effect.pointer))
    )


def undo_findings(effect: Effect, diagnostics: Iterable[Diagnostic]) -> list[Diagnostic]:
    """The unsafe findings about compensating ``effect`` (it has no row of its own: the row
    that registers it is the forward effect's, and its findings are the forward effect's)."""
    return sorted(
        d for d in diagnostics if d.code in UNSAFE_CODES and _under(d.pointer, effect.pointer)
    )


def _flag(codes: set[str], *which: str) -> list[Line]:
    return [Line(f"{code} {_BROKEN[code]}", "unsafe") for code in which if code in codes]


def _row_title(spec: Spec, row: Row, effect: Effect, codes: set[str]) -> tuple[Line, ...]:
    where = f"transitions[{row.index}]: {row.state} --{row.event}--> {row.next_state}"
    if spec.document is not None:
        where += f", line {spec.document.locate(row.pointer)[0]}"
    return _title(effect, [Line(where, "muted")], codes)


def _undo_title(spec: Spec, row: Row, forward: Effect, undo: Effect) -> list[Line]:
    where = f"undoes {forward.name} (registered by transitions[{row.index}]), run in "
    lines = [Line(where + _compensate_states(spec), "muted")]
    if spec.document is not None:
        line = spec.document.locate(undo.pointer)[0]
        lines.append(Line(f"effects.{undo.name}, line {line}", "muted"))
    return lines


def _compensate_states(spec: Spec) -> str:
    names = [s.name for s in spec.states.values() if s.kind == "compensate"]
    return " or ".join(names) or "a compensate state"


def _title(effect: Effect, where: list[Line], codes: set[str]) -> tuple[Line, ...]:
    lines = [Line(effect.name, "title"), *where]
    if codes:
        lines.append(Line("UNSAFE: flagged by ratchet validate", "unsafe"))
        for code in sorted(codes):
            lines += wrap(f"{code} {CODES[code]}", 2 * WIDTH, "unsafe")
    return tuple(lines)


#: The codes that break the operation ID, or the record written before the call.
_ID_CODES = ("E501", "E502", "E503", "E516", "W517", "E505")


def _write_lines(row: Row, effect: Effect, codes: set[str]) -> list[Line]:
    lines = [Line("1 · write ahead", "title"), Line("version v → v+1 (compare-and-set)")]
    if "E505" not in codes:
        lines.append(Line("pending record, attempt counted"))
    if effect.approval is not None:
        lines.append(Line(f"approval {effect.approval} consumed"))
    if row.compensation is not None and row.compensation.effect is not None:
        lines.append(Line(f"undo {row.compensation.effect} registered"))
    if row.idempotency_key:
        key = ", ".join(row.idempotency_key)
        lines += wrap(f"operation ID = sha256({key})", WIDTH, "code")
    elif "E501" not in codes:
        lines.append(Line("no idempotency key: no stable operation ID", "unsafe"))
    return lines + _flag(codes, *_ID_CODES)


def _call_lines(effect: Effect, codes: set[str]) -> list[Line]:
    lines = [Line("2 · call sent", "title")]
    lines += wrap(f"{effect.adapter}.{effect.operation}({', '.join(effect.args)})", WIDTH, "code")
    if {"E501", "E502"} & codes:
        lines.append(Line("a new operation ID on every attempt", "unsafe"))
    else:
        lines.append(Line("idempotency key = the operation ID"))
    policy = f"up to {effect.retry.max_attempts} attempts"
    if effect.timeout is not None:
        policy += f" · timeout {duration(effect.timeout)}"
    return [*lines, Line(policy, "note")]


def _undo_write_lines(forward: Effect, undo: Effect) -> list[Line]:
    return [
        Line("1 · write ahead", "title"),
        Line("version v → v+1 (compare-and-set)"),
        Line("the registered undo: pending record, attempt counted"),
        *wrap(f"operation ID = sha256({forward.name}'s operation ID, {undo.name})", WIDTH, "code"),
    ]


def _undo_done_lines(spec: Spec, forward: Effect, undo: Effect, codes: set[str]) -> list[Line]:
    lines = [Line("4 · receipt + undo committed", "title")]
    if undo.receipt:
        lines.append(Line(f"receipt {undo.receipt} stored, operation done"))
    elif "E513" not in codes:
        lines.append(Line("operation done, no receipt kept", "unsafe"))
    lines += wrap(
        f"{forward.name} recorded undone; the run stays in {_compensate_states(spec)}", WIDTH
    )
    lines.append(Line("version v+1 → v+2", "plain"))
    lines.append(Line("one transaction", "note"))
    return lines


def _done_lines(row: Row, codes: set[str]) -> list[Line]:
    lines = [Line("4 · receipt + move committed", "title")]
    if row.receipt:
        lines.append(Line(f"receipt {row.receipt} stored, operation done"))
    elif "E513" not in codes:
        lines.append(Line("operation done, no receipt kept", "unsafe"))
    lines.append(Line(f"{row.state} → {row.next_state}, version v+1 → v+2"))
    lines.append(Line("one transaction", "note"))
    return lines + _flag(codes, "E513")


_COMMIT = [
    Line("3 · provider commits", "title"),
    Line("the change is made, under the operation ID"),
]


def _steps(b: Builder, row: Row, effect: Effect, codes: set[str]) -> list[str]:
    """The four durable steps, each drawn unsafe when a finding breaks it."""
    steps = [
        ("seq_unsafe" if codes & set(_ID_CODES) else "seq", _write_lines(row, effect, codes)),
        ("seq_unsafe" if codes & {"E501", "E502"} else "seq", _call_lines(effect, codes)),
        ("seq", _COMMIT),
        ("seq_unsafe" if "E513" in codes else "seq", _done_lines(row, codes)),
    ]
    return [b.node(role, *lines) for role, lines in steps]


def _undo_steps(
    b: Builder, spec: Spec, forward: Effect, undo: Effect, codes: set[str]
) -> list[str]:
    """The four durable steps of a compensating effect."""
    steps = [
        ("seq", _undo_write_lines(forward, undo)),
        ("seq", _call_lines(undo, codes)),
        ("seq", _COMMIT),
        ("seq_unsafe" if "E513" in codes else "seq", _undo_done_lines(spec, forward, undo, codes)),
    ]
    return [b.node(role, *lines) for role, lines in steps]


def _blind(codes: set[str]) -> list[str]:
    """The codes that turn a reconcile into retry-and-hope."""
    return [code for code in ("E504", "E505", "E501", "E502") if code in codes]


def _window_lines(then: str, blind: list[str]) -> list[list[Line]]:
    """The four windows: what has happened when the crash falls there, and the recovery."""
    w1 = [
        Line("W1 · crash before the request", "title"),
        Line("pending + attempt on record; nothing sent", "note"),
    ]
    w2 = [
        Line("W2 · request in flight", "title"),
        Line("crash or timeout: the outcome is unknown", "note"),
    ]
    w3 = [
        Line("W3 · provider committed, reply lost", "title"),
        Line("the change is made; nobody here knows", "note"),
    ]
    w4 = [
        Line("W4 · receipt stored, checkpoint missing", "title"),
        Line("crash after the commit, before the run goes on", "note"),
        Line("recovery: resume: the store says done →"),
        Line(f"skip the call, {then}"),
    ]
    if blind:
        unsafe = [Line(f"{code} {_BROKEN[code]}", "unsafe") for code in blind]
        w1 += [
            Line("recovery: call again, unasked"),
            Line("(harmless here: nothing was sent)", "note"),
        ]
        w2 += [*unsafe, Line("recovery: retry and hope: may duplicate", "unsafe")]
        w3 += [*unsafe, Line("recovery: retry and hope: a second change", "unsafe")]
    else:
        w1 += [
            Line("recovery: resume finds the call on record,"),
            Line("reconciles: not found → same-ID retry"),
        ]
        w2 += [
            Line("recovery: reconcile by operation ID:"),
            Line("found → done · not found → same-ID retry"),
        ]
        w3 += [Line("recovery: reconcile finds it:"), Line("done, no new call")]
    return [w1, w2, w3, w4]


def _windows(b: Builder, steps: list[str], moved_on: str, then: str, codes: set[str]) -> list[str]:
    """Add the four windows beside ``steps``, with the edges where each recovery rejoins;
    ``then`` says where the run goes on after W4."""
    blind = _blind(codes)
    role = "window_unsafe" if blind else "window"
    w1, w2, w3, w4 = _window_lines(then, blind)
    windows = [b.node("window", *w1), b.node(role, *w2), b.node(role, *w3), b.node("window", *w4)]
    falls = ("crash", "crash / timeout", "reply lost", "crash")
    for step, window, label in zip(steps, windows, falls, strict=True):
        b.edge(step, window, "crash", Line(label, "note"))

    def back(
        window: str,
        step: str,
        label: str,
        *,
        unsafe: bool = False,
        up: bool = False,
        long: bool = False,
    ) -> None:
        # An edge back up the sequence must not pull the layout: it would turn the column over.
        # A long one bends around the next window; its label is placed after the layout.
        kind = "recover_unsafe" if unsafe else "recover"
        lines = [Line(label, "note")] if label else []
        b.edge(window, step, kind, *lines, constraint=not up, external_label=long)

    _write, call, _commit, done = steps
    first, second, third, fourth = windows
    if blind:
        back(first, call, "call again")
        back(second, call, "retry and hope", unsafe=True, up=True)
        # Unlabelled: its label would land outside the cluster; the window and the legend say it.
        back(third, call, "", unsafe=True, up=True)
    else:
        back(first, call, "same-ID retry")
        back(second, call, "not found → same-ID retry", up=True)
        back(second, done, "found → done", long=True)
        back(third, done, "found → done, no new call")
    back(fourth, moved_on, "skip, continue")
    return windows


def _sequence(b: Builder, entry: str, steps: list[str], moved_on: str) -> list[str]:
    b.edge(entry, steps[0], "enter")
    for tail, head in zip(steps, [*steps[1:], moved_on], strict=True):
        b.edge(tail, head, "seq")
    return [entry, *steps, moved_on]


def _undo_cluster(b: Builder, spec: Spec, row: Row, undo: Effect, found: list[Diagnostic]) -> None:
    """The crash windows of ``undo``, the compensating effect ``row`` registers."""
    forward = spec.effects[row.external_effect or ""]
    codes = {d.code for d in undo_findings(undo, found)}
    where = _compensate_states(spec)
    entry = b.node(
        "entry",
        Line(f"in {where}", "title"),
        Line(f"performs {undo.name}, undoing {forward.name}", "muted"),
    )
    steps = _undo_steps(b, spec, forward, undo, codes)
    done = dict.fromkeys(
        r.next_state
        for r in spec.transitions
        if r.event == "ok" and r.state in spec.states and spec.states[r.state].kind == "compensate"
    )
    moved_on = b.node(
        "moved_on",
        Line("the next undo, newest first", "title"),
        Line(f"none left: ok → {' or '.join(done) or 'the ok row'}", "muted"),
    )
    chain = _sequence(b, entry, steps, moved_on)
    windows = _windows(b, steps, moved_on, "go on to the next undo", codes)
    b.cluster(
        "row_unsafe" if codes else "row",
        _title(undo, _undo_title(spec, row, forward, undo), codes),
        [*chain, *windows],
    )


def crash_windows_graph(
    spec: Spec, diagnostics: Iterable[Diagnostic] = (), effect: str | None = None
) -> Graph:
    """The crash windows of every effect row of ``spec``, then of every compensating effect a
    row registers (or only those of ``effect``), with what ``diagnostics`` flag drawn unsafe."""
    found = list(diagnostics)
    title = [
        Line(f"{spec.name} v{spec.spec_version}: crash windows", "title"),
        Line(
            "each effect's durable steps, where a crash can fall, and how the run recovers", "muted"
        ),
    ]
    b = Builder("flow", tuple(title))
    for row, eff in effect_rows(spec):
        if effect is not None and eff.name != effect:
            continue
        codes = {d.code for d in findings(row, eff, found)}
        entry = b.node(
            "entry", Line(f"enters {row.state}", "title"), Line(f"performs {eff.name}", "muted")
        )
        steps = _steps(b, row, eff, codes)
        moved_on = b.node(
            "moved_on", Line(row.next_state, "title"), Line("the run moves on", "muted")
        )
        chain = _sequence(b, entry, steps, moved_on)
        windows = _windows(b, steps, moved_on, f"continue to {row.next_state}", codes)
        b.cluster(
            "row_unsafe" if codes else "row",
            _row_title(spec, row, eff, codes),
            [*chain, *windows],
        )
    for row, undo in compensation_rows(spec):
        if effect is None or undo.name == effect:
            _undo_cluster(b, spec, row, undo, found)
    b.explain("node", "seq", "a durable step")
    b.explain("node", "window", "a crash window and its recovery")
    b.explain("node", "seq_unsafe", "a step ratchet validate flags as unsafe")
    b.explain("node", "window_unsafe", "a window whose recovery may duplicate")
    b.explain("edge", "seq", "the sequence")
    b.explain("edge", "crash", "where the crash (or lost reply) falls")
    b.explain("edge", "recover", "where the recovery rejoins")
    b.explain("edge", "recover_unsafe", "retry and hope: may duplicate")
    return b.graph()
