"""The stable diagnostic codes, one line each.

A code never changes meaning once published; a retired code is never reused. ``E`` codes are
errors (the spec is rejected), ``W`` codes are warnings (reported; fatal only with ``--strict``).
``docs/reference/lint-codes.md`` documents each with a failing and a fixed example, and a test
keeps the two lists equal.
"""

from __future__ import annotations

CODES: dict[str, str] = {
    # E1xx: the file cannot be read as a safe YAML document
    "E100": "the file cannot be read",
    "E101": "the file is not UTF-8",
    "E102": "the file is larger than the size cap",
    "E103": "the document nests deeper than the nesting cap",
    "E104": "the file is not well-formed YAML",
    "E105": "YAML anchors, aliases and merge keys are not allowed",
    "E106": "a mapping has the same key twice",
    "E107": "YAML tags are not allowed",
    "E108": "the file holds no document",
    "E109": "the file holds more than one document",
    "E110": "the top level is not a mapping",
    "E111": "a number is too long",
    "E112": "a mapping key is not a plain scalar",
    # E2xx: the document does not match the spec schema
    "E201": "unknown field",
    "E202": "a required field is missing",
    "E203": "a value has the wrong type",
    "E204": "a value is not allowed",
    "E205": "the input schema is not a valid JSON Schema",
    "E206": "an example's input does not match the input schema",
    # E3xx: references and expressions
    "E301": "unknown state",
    "E302": "unknown effect",
    "E303": "unknown approval",
    "E304": "unknown adapter",
    "E305": "an expression does not compile",
    "E306": "an expression names something that does not exist",
    "E307": "an expression calls a function that does not exist",
    "E308": "unknown effect argument",
    "E309": "an effect names an operation its adapter does not have",
    "E310": "an effect's arguments are not those its operation takes",
    "E311": "a receipt field the operation does not return",
    "E312": "an effect reconciles with a lookup its operation's contract does not name",
    "E313": "an expression compares or computes with values of types that do not go together",
    "E314": "a business key or an effect argument reads an input field that is not required",
    "E315": "an approval's evidence names an effect the spec does not declare",
    "E316": "an approval's evidence relates runs by an input field the schema does not declare",
    # E4xx / W4xx: the state graph
    "W401": "a state cannot be reached from the start state",
    "E402": "a non-terminal state has no way out",
    "E403": "the spec has no terminal state",
    "E404": "a terminal state has outgoing rows",
    "E405": "two rows for the same state and event cannot be told apart",
    "E406": "the event cannot happen in that state",
    "E407": "an event name collides with a name the runner, the state machine or Python uses",
    # E5xx / W5xx: effect safety
    "E501": "an effect row has no idempotency key",
    "E502": "an idempotency key is built from unstable values",
    "E503": "an idempotency key leaves out the effect's arguments",
    "E504": "retry and hope: an effect's ambiguous outcome has no reconcile lookup",
    "E505": "retry and hope: an effect row has no durable pending write",
    "E506": "an effect or compensate state has no row for refused or exhausted",
    "E507": "more than one retry owner for one dependency",
    "W508": "nested retries multiply past the call bound",
    "E509": "a saga's forward effect says nothing about compensation",
    "E510": "an approval does not bind all of its effect's arguments",
    "E511": "an approval has no expiry",
    "W512": "a row that ends in an operator queue has no operator_action",
    "E513": "an effect row names no receipt",
    "E514": "a state performs more than one effect",
    "E515": "an effect that needs approval is reached without one",
    "E516": "an idempotency key does not name the effect",
    "W517": "an idempotency key does not name the business key",
    "W518": "a row ends a saga compensated or cancelled with a change still in place",  # arriving
    "E519": "an approval is on an effect that only runs as a compensation",
    "W520": "an approved change that is never undone keeps old approvals under the default pin",
}


#: The checks arriving: each warning code that becomes an error, under the same number, in the
#: version named (a new check that would reject a spec valid yesterday is a warning for one minor
#: version first; docs/reference/lint-codes.md, "How a check changes level").
ARRIVING: dict[str, tuple[str, str]] = {"W518": ("E518", "0.2.0")}


def is_warning(code: str) -> bool:
    return code.startswith("W")
