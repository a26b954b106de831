"""The idempotency keys' checks (E5xx/W5xx): a key that names the work, the same on every attempt.

An effect's operation ID is made from its row's idempotency key; a key item that differs between
attempts, processes or machines (a time, an attempt number, a random value, a run's own ID) makes
each attempt a new operation, and a key that leaves out what tells two changes apart makes them
one. :mod:`ratchet_runner.spec.lint` registers the check in
:data:`ratchet_runner.spec.lint.CHECKS`.
"""

from __future__ import annotations

from collections.abc import Iterator

from ...errors import Diagnostic
from ..expressions import RUN_FIELDS
from ..model import Effect, Spec
from .support import at, col, effect_rows

#: Idempotency-key fields whose value differs between attempts, processes or machines.
UNSTABLE_KEY_FIELDS = frozenset(
    {"now", "time", "timestamp", "today", "attempt", "attempts", "random", "uuid", "nonce"}
)
#: Fields of ``run`` that differ between attempts, or between two runs for one business key.
UNSTABLE_RUN_FIELDS = frozenset({"id", "attempts", "started_at", "version", "state"})
#: What an idempotency-key item may start with.
KEY_HEADS = frozenset({"business_key", "effect", "args", "input", "receipts", "run"})

# -- idempotency keys ---------------------------------------------------------------------------


def _covered(effect: Effect, key: tuple[str, ...]) -> list[str]:
    """The effect's arguments the key names: all (``args``), by name, or by the same path."""
    if "args" in key:
        return list(effect.args)
    return [
        name
        for name, value in effect.args.items()
        if f"args.{name}" in key or (isinstance(value, str) and value.strip() in key)
    ]


def check_idempotency_keys(spec: Spec) -> Iterator[Diagnostic]:
    for row, effect in effect_rows(spec):
        key = row.idempotency_key
        if key is None:
            yield at(
                spec,
                row.pointer,
                "E501",
                f"the row performing {effect.name!r} has no idempotency_key, so nothing names "
                "the change: every retry and every recovery after a crash could make it again; "
                "add idempotency_key: [business_key, effect, args]",
            )
            continue
        pointer = col(row, "idempotency_key")
        for i, item in enumerate(key):
            yield from _key_item(spec, effect, item, f"{pointer}/{i}")
        covered = _covered(effect, key)
        left_out = [name for name in effect.args if name not in covered]
        if left_out:
            yield at(
                spec,
                pointer,
                "E503",
                f"the key leaves out {effect.name!r}'s argument{'s' if len(left_out) > 1 else ''} "
                f"{', '.join(left_out)}: a call with a "
                "changed argument would reuse the operation ID and be taken for the one already "
                "made; add 'args' to the key",
            )
        if "effect" not in key:
            yield at(
                spec,
                pointer,
                "E516",
                "the key does not name the effect: another effect called with equal arguments "
                f"would get the same operation ID as {effect.name!r} and be skipped as already "
                "done; add 'effect' to the key",
            )
        if not _names_the_work(effect, key):
            yield at(
                spec,
                pointer,
                "W517",
                f"the key does not name the business key: two runs calling {effect.name!r} with "
                "equal arguments (two tickets refunding 9.95 on one order) would share one "
                "operation ID, and the second change would be taken for the first; add "
                "'business_key' to the key",
            )


def _names_the_work(effect: Effect, key: tuple[str, ...]) -> bool:
    """Whether the key ties the operation to one piece of work: the business key, an input
    field, or a receipt of an earlier step (directly or through an argument)."""
    if any(item == "business_key" or item.startswith(("input.", "receipts.")) for item in key):
        return True
    return any(
        isinstance(value, str) and ("receipts." in value or "business_key" in value)
        for value in effect.args.values()
    )


def _key_item(spec: Spec, effect: Effect, item: str, pointer: str) -> Iterator[Diagnostic]:
    head, _, rest = item.partition(".")
    field = rest.split(".")[0] if rest else ""
    if item == "run.id":
        yield at(
            spec,
            pointer,
            "E502",
            "'run.id' is new for every run, so a second run for the same business key would "
            "make the change again under a new operation ID: use business_key instead",
        )
    elif head in UNSTABLE_KEY_FIELDS or (head == "run" and field in UNSTABLE_RUN_FIELDS):
        yield at(
            spec,
            pointer,
            "E502",
            f"{item!r} differs between attempts, processes or machines, so every retry would "
            "get a new operation ID and make the change again: remove it and name the change "
            "by stable fields (business_key, effect, args)",
        )
    elif head not in KEY_HEADS or (head in ("business_key", "effect") and rest):
        yield at(
            spec,
            pointer,
            "E306",
            f"{item!r} is not a key field: use business_key, effect, args, args.NAME, "
            "input.FIELD or receipts.EFFECT.FIELD",
        )
    elif head == "args" and field and field not in effect.args:
        yield at(
            spec,
            pointer,
            "E308",
            f"effect {effect.name!r} has no argument {field!r}: name one of "
            f"{', '.join(effect.args) or 'none'}, or use 'args'",
        )
    elif head == "receipts" and field and field not in spec.effects:
        yield at(
            spec,
            pointer,
            "E302",
            f"unknown effect {field!r} in {item!r}: name an effect declared under effects:",
        )
    elif head == "run" and field not in RUN_FIELDS:
        yield at(
            spec,
            pointer,
            "E306",
            f"{item!r} is not a field of the run (fields: {', '.join(sorted(RUN_FIELDS))})",
        )
    elif head == "input" and field and not _declared_input(spec, field):
        yield at(
            spec,
            pointer,
            "E306",
            f"{item!r} names an input field the input schema does not declare: declare it "
            "under input.properties, or name a declared one",
        )


def _declared_input(spec: Spec, field: str) -> bool:
    props = spec.input_schema.get("properties") if isinstance(spec.input_schema, dict) else None
    return not isinstance(props, dict) or field in props
