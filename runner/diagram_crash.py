"""The ``crash-windows`` view: each effect row's durable sequence and where a crash can fall.

For every row that performs an effect, four steps top to bottom — (1) the write-ahead (version
bump, pending record, attempt counted), (2) the call sent, (3) the provider's commit, (4) the
receipt and the move committed together — and beside them the four windows a crash (or a lost
reply) can fall into, each with its one recovery and an edge back to where that recovery rejoins
the sequence (docs/explanation/crash-windows.md).

A row that validation flags (a missing or unstable idempotency key, no reconcile lookup, no
pending write, no receipt: the codes in :data:`UNSAFE_CODES`) is drawn in the unsafe colour with
its codes, and the windows it breaks show what recovery would really do: retry and hope.
"""

from __future__ import annotations

from collections.abc import Iterable

from .codes import CODES
from .diagram_model import Builder, Graph, Line, duration, wrap
from .errors import Diagnostic
from .spec import Effect, Row, Spec

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


def _flag(codes: set[str], *which: str) -> list[Line]:
    return [Line(f"{code} {_BROKEN[code]}", "unsafe") for code in which if code in codes]


def _row_title(spec: Spec, row: Row, effect: Effect, codes: set[str]) -> tuple[Line, ...]:
    where = f"row {row.index}: {row.state} --{row.event}--> {row.next_state}"
    if spec.document is not None:
        where += f" (line {spec.document.locate(row.pointer)[0]})"
    lines = [Line(effect.name, "title"), Line(where, "muted")]
    if codes:
        lines.append(Line("UNSAFE: flagged by ratchet validate", "unsafe"))
        for code in sorted(codes):
            lines += wrap(f"{code} {CODES[code]}", 2 * WIDTH, "unsafe")
    return tuple(lines)


def _steps(b: Builder, row: Row, effect: Effect, codes: set[str]) -> list[str]:
    key = ", ".join(row.idempotency_key) if row.idempotency_key else "nothing"
    write = [Line("1 · write ahead", "title"), Line("version v → v+1 (compare-and-set)")]
    if "E505" in codes:
        write.append(Line("no pending record is written", "unsafe"))
    else:
        write.append(Line("pending record, attempt counted"))
    if effect.approval is not None:
        write.append(Line(f"approval {effect.approval} consumed"))
    if row.compensation is not None and row.compensation.effect is not None:
        write.append(Line(f"undo {row.compensation.effect} registered"))
    write += wrap(f"operation ID = sha256({key})", WIDTH, "code")
    write += _flag(codes, "E501", "E502", "E503", "E516", "W517", "E505")

    args = ", ".join(effect.args)
    call = [Line("2 · call sent", "title")]
    call += wrap(f"{effect.adapter}.{effect.operation}({args})", WIDTH, "code")
    if {"E501", "E502"} & codes:
        call.append(Line("a new operation ID on every attempt", "unsafe"))
    else:
        call.append(Line("idempotency key = the operation ID"))
    policy = f"up to {effect.retry.max_attempts} attempts"
    if effect.timeout is not None:
        policy += f" · timeout {duration(effect.timeout)}"
    call.append(Line(policy, "note"))

    commit = [Line("3 · provider commits", "title"), Line("the change is made, once per ID")]

    done = [Line("4 · receipt + move committed", "title")]
    done.append(
        Line(f"receipt {row.receipt} stored, operation done")
        if row.receipt
        else Line("operation done, no receipt kept", "unsafe")
    )
    done.append(Line(f"{row.state} → {row.next_state}, version v+1 → v+2"))
    done.append(Line("one transaction", "note"))
    done += _flag(codes, "E513")

    roles = [
        "seq_unsafe" if codes & {"E501", "E502", "E503", "E516", "W517", "E505"} else "seq",
        "seq_unsafe" if {"E501", "E502"} & codes else "seq",
        "seq",
        "seq_unsafe" if "E513" in codes else "seq",
    ]
    return [
        b.node(role, *lines) for role, lines in zip(roles, (write, call, commit, done), strict=True)
    ]


def _blind(codes: set[str]) -> list[str]:
    """The codes that turn a reconcile into retry-and-hope."""
    return [code for code in ("E504", "E505", "E501", "E502") if code in codes]


def _windows(
    b: Builder, steps: list[str], moved_on: str, row: Row, codes: set[str]
) -> tuple[list[str], list[tuple[str, ...]]]:
    write, call, _commit, done = steps
    blind = _blind(codes)
    w1 = [
        Line("W1 · crash before the request", "title"),
        Line("pending + attempt on record; nothing sent", "note"),
    ]
    if blind:
        w1 += [
            Line("recovery: call again, unasked"),
            Line("(harmless here: nothing was sent)", "note"),
        ]
    else:
        w1 += [
            Line("recovery: resume finds the call on record,"),
            Line("reconciles: not found → same-ID retry"),
        ]
    w2 = [
        Line("W2 · request in flight", "title"),
        Line("crash or timeout: the outcome is unknown", "note"),
    ]
    w3 = [
        Line("W3 · provider committed, reply lost", "title"),
        Line("the change is made; nobody here knows", "note"),
    ]
    if blind:
        unsafe = [Line(f"{code} {_BROKEN[code]}", "unsafe") for code in blind]
        w2 += [*unsafe, Line("recovery: retry and hope: may duplicate", "unsafe")]
        w3 += [*unsafe, Line("recovery: retry and hope: a second change", "unsafe")]
    else:
        w2 += [
            Line("recovery: reconcile by operation ID:"),
            Line("found → done · not found → same-ID retry"),
        ]
        w3 += [Line("recovery: reconcile finds it:"), Line("done, no new call")]
    w4 = [
        Line("W4 · receipt stored, checkpoint missing", "title"),
        Line("crash after the commit, before the run goes on", "note"),
        Line("recovery: resume: the store says done →"),
        Line(f"skip the call, continue to {row.next_state}"),
    ]
    role = "window_unsafe" if blind else "window"
    windows = [b.node("window", *w1), b.node(role, *w2), b.node(role, *w3), b.node("window", *w4)]
    for step, window, label in zip(
        steps, windows, ("crash", "crash / timeout", "reply lost", "crash"), strict=True
    ):
        b.edge(step, window, "crash", Line(label, "note"))
    first, second, third, fourth = windows
    b.edge(
        first,
        call,
        "recover",
        Line("same-ID retry" if not blind else "call again", "note"),
        constraint=False,
    )
    if blind:
        b.edge(second, call, "recover_unsafe", Line("retry and hope", "note"), constraint=False)
        b.edge(
            third, call, "recover_unsafe", Line("retry: may duplicate", "note"), constraint=False
        )
    else:
        b.edge(second, call, "recover", Line("not found → same-ID retry", "note"), constraint=False)
        b.edge(second, done, "recover", Line("found → done", "note"), constraint=False)
        b.edge(third, done, "recover", Line("found → done, no new call", "note"), constraint=False)
    b.edge(fourth, moved_on, "recover", Line("skip, continue", "note"), constraint=False)
    ranks = [(step, window) for step, window in zip(steps, windows, strict=True)]
    del write
    return windows, ranks


def crash_windows_graph(
    spec: Spec, diagnostics: Iterable[Diagnostic] = (), effect: str | None = None
) -> Graph:
    """The crash windows of every effect row of ``spec`` (or only those performing ``effect``),
    with the rows that ``diagnostics`` flag drawn unsafe."""
    found = list(diagnostics)
    title = [
        Line(f"{spec.name} v{spec.spec_version}: crash windows", "title"),
        Line(
            "each effect's durable steps, where a crash can fall, and how the run recovers", "muted"
        ),
    ]
    b = Builder("flow", tuple(title))
    unsafe_any = False
    for row, eff in effect_rows(spec):
        if effect is not None and eff.name != effect:
            continue
        codes = {d.code for d in findings(row, eff, found)}
        unsafe_any = unsafe_any or bool(codes)
        entry = b.node(
            "entry", Line(f"enters {row.state}", "title"), Line(f"performs {eff.name}", "muted")
        )
        steps = _steps(b, row, eff, codes)
        moved_on = b.node(
            "moved_on", Line(row.next_state, "title"), Line("the run moves on", "muted")
        )
        chain = [entry, *steps, moved_on]
        for tail, head in zip(chain, chain[1:], strict=False):
            b.edge(tail, head, "seq")
        windows, ranks = _windows(b, steps, moved_on, row, codes)
        b.cluster(
            "row_unsafe" if codes else "row",
            _row_title(spec, row, eff, codes),
            [*chain, *windows],
            ranks,
        )
    b.explain("node", "seq", "a durable step")
    b.explain("node", "window", "a crash window and its recovery")
    if unsafe_any:
        b.explain("node", "window_unsafe", "unsafe: flagged by ratchet validate")
    b.explain("edge", "seq", "the sequence")
    b.explain("edge", "crash", "where the crash (or lost reply) falls")
    b.explain("edge", "recover", "where the recovery rejoins")
    if unsafe_any:
        b.explain("edge", "recover_unsafe", "retry and hope: may duplicate")
    return b.graph()
