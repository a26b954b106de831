"""A run is driven by the spec version it started under, read back from the store: a check added
to Ratchet since (a stricter schema, a new lint) must not strand it. Only a stored text that no
longer builds into a spec is refused."""

from __future__ import annotations

import pytest
from sqlalchemy import update

from ratchet_runner.adapters.practice import PracticeWorld
from ratchet_runner.engine.deciding import decide
from ratchet_runner.errors import SpecError
from ratchet_runner.spec.validate import load_stored_spec, validate_text
from ratchet_runner.store.store import Store
from ratchet_runner.store.tables import spec_versions
from tests.conftest import MakeRunner, spec_and_text

#: The refund's input with ``reason`` no longer required: its refund argument reads an optional
#: field, which a lint added later refuses (E314), while the run needs nothing else of it.
OPTIONAL_REASON = (
    "required: [ticket, order, amount, currency, reason]",
    "required: [ticket, order, amount, currency]",
)


def _store_text(store: Store, digest: str, text: str) -> None:
    with store.engine.begin() as conn:
        conn.execute(
            update(spec_versions).where(spec_versions.c.digest == digest).values(text=text)
        )


def test_a_run_pinned_to_a_version_a_newer_check_refuses_is_still_driven_to_its_end(
    store: Store, world: PracticeWorld, make_runner: MakeRunner
) -> None:
    spec, text = spec_and_text("refund")
    world.seed(spec.examples["T-90104"].world)
    started, _ = make_runner().start(spec, text, spec.examples["T-90104"].input)
    older = text.replace(*OPTIONAL_REASON)
    assert older != text
    assert not validate_text(older).ok()  # what Ratchet checks today refuses it
    _store_text(store, started.spec_digest, older)

    runner = make_runner()  # a new process: it reads the version back from the store
    assert runner.spec_of(started).name == "refund"
    decided = decide(runner, started.id, "approve", "agent-7", "agent")
    assert decided.changed
    final = runner.advance(started.id)
    assert (final.state, final.status) == ("refunded", "done")
    assert len(world.changes()) == 1


def test_a_stored_text_that_no_longer_builds_a_spec_is_refused() -> None:
    with pytest.raises(SpecError):
        load_stored_spec("name: broken\nstates: 3\n", "spec abc (stored)")
