"""A migration's apply or rollback interrupted at one of its windows, as ``ratchet check
--migrate-to`` runs it: :func:`migrating` (in-process, or in a child process killed with SIGKILL
by :func:`kill_at`), and the windows of a population (:func:`windows`): each commit the migration
makes, its end, and each run it reads to move.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import event

from ..errors import MigrationRefused, RatchetError
from ..evolve import migrate
from ..evolve.mapping import VersionMapping, mapping_from_text
from ..spec.model import Spec
from ..spec.validate import load_stored_spec
from ..store.store import Store
from .population import die, store_at

BY = "ratchet-check"  # who the check's migrations record as having migrated
MIGRATION = "mig_check"  # the migration the rollback phase rolls back
PHASES = ("apply", "rollback")


@dataclass(frozen=True)
class MigrationCase:
    example: str
    phase: str
    window: str
    #: What the window is, in words ("as T-9010401's move is written").
    what: str = ""

    @property
    def name(self) -> str:
        return f"{self.example}:{self.phase}:{self.window}"

    @property
    def strategy(self) -> str:
        """Ratchet's own (the naive strategy is never migrated): one result per case."""
        return "ratchet"


@dataclass(frozen=True)
class Versions:
    """The two versions of a migration check, with their texts and the mapping."""

    old: Spec
    old_text: str
    new: Spec
    new_text: str
    mapping_text: str | None = None

    @property
    def mapping(self) -> VersionMapping | None:
        return None if self.mapping_text is None else mapping_from_text(self.mapping_text)

    @property
    def by_digest(self) -> dict[str, Spec]:
        return {self.old.digest: self.old, self.new.digest: self.new}


# -- the migration, interrupted ---------------------------------------------------------------


@dataclass
class Interrupted:
    """What one migration did until it was stopped: its commits (each named by what it wrote),
    the runs it read to move, and what it reported (None: it died first)."""

    commits: list[str | None] = field(default_factory=list)
    read: list[str] = field(default_factory=list)
    applied: migrate.Applied | None = None


def migrating(
    store: Store,
    versions_: Versions,
    phase: str,
    *,
    die_at: int | None = None,
    die: Callable[[], None] = die,
    race: Callable[[str], None] | None = None,
    again: bool = False,
) -> Interrupted:
    """Run the phase's migration on ``store``: ``die`` as its ``die_at``-th commit is about to
    be sent (``0``: once it is done, before it reports), ``race(run_id)`` between reading each
    run and writing it. ``again``: the migration run again after a crash (a new apply, or the
    same rollback: one with nothing left to roll back is no error)."""
    seen = Interrupted()

    def on_commit(_connection: Any) -> None:
        seen.commits.append(seen.read[-1] if seen.read else None)
        if die_at == len(seen.commits):
            die()

    def on_read(run_id: str) -> None:
        seen.read.append(run_id)
        if race is not None:
            race(run_id)

    now = store.clock.now()
    event.listen(store.engine, "commit", on_commit)
    try:
        if phase == "apply":
            new, text, mapping = versions_.new, versions_.new_text, versions_.mapping
            seen.applied = migrate.apply(
                store,
                new,
                text,
                BY,
                now,
                mapping=mapping,
                only_ready=True,
                migration=None if again else MIGRATION,
                interrupt=on_read,
            )
        else:
            try:
                seen.applied = migrate.rollback(
                    store, versions_.new.name, MIGRATION, BY, now, interrupt=on_read
                )
            except MigrationRefused:
                if not again:
                    raise
                seen.applied = migrate.Applied(MIGRATION)
    finally:
        event.remove(store.engine, "commit", on_commit)
    if die_at == 0:
        die()
    return seen


def windows(folder: Path, versions_: Versions, example: str, phase: str) -> list[MigrationCase]:
    """The phase's windows on the population in ``folder``, from a run of it on a copy: each
    commit, the end, and each run read to move."""
    with tempfile.TemporaryDirectory(prefix="ratchet-migrate-") as tmp:
        trial = Path(tmp) / "trial"
        shutil.copytree(folder, trial)
        with store_at(trial) as store:
            seen = migrating(store, versions_, phase)
            keys = {r: store.get_run(r).business_key for r in seen.read}
    moved = "move back" if phase == "rollback" else "move"
    found = [
        MigrationCase(
            example,
            phase,
            f"commit-{n}",
            f"as {keys[run]}'s {moved} is written" if run else "as the new version is saved",
        )
        for n, run in enumerate(seen.commits, 1)
    ]
    found.append(MigrationCase(example, phase, "after", "once all is written, before it reports"))
    found += [
        MigrationCase(
            example,
            phase,
            f"raced:{keys[run]}",
            f"another process carries {keys[run]} on between the read and the write",
        )
        for run in seen.read
    ]
    return found


# -- the killed process -----------------------------------------------------------------------


def kill_at(folder: Path, phase: str, at: int, versions_: Versions) -> None:
    """Run the phase's migration in a child process killed with SIGKILL at commit ``at``."""
    (folder / "old.yaml").write_text(versions_.old_text, encoding="utf-8")
    (folder / "new.yaml").write_text(versions_.new_text, encoding="utf-8")
    mapping = []
    if versions_.mapping_text is not None:
        (folder / "mapping.yaml").write_text(versions_.mapping_text, encoding="utf-8")
        mapping = [str(folder / "mapping.yaml")]
    child = subprocess.run(
        [
            sys.executable,
            "-m",
            __name__,
            str(folder),
            phase,
            str(at),
            *mapping,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if child.returncode != -signal.SIGKILL:
        raise RatchetError(
            f"the migrating process was not killed (exit {child.returncode}): "
            f"{child.stderr.strip()[-400:]}"
        )


def _child(argv: list[str]) -> None:
    """``python -m ratchet_runner.check.interrupted FOLDER PHASE AT [MAPPING]``: run the phase's
    migration on the population in FOLDER (``old.yaml``, ``new.yaml`` beside it) and die by
    SIGKILL as commit AT is about to be sent (0: once all is written)."""
    folder, phase, at, *mapping = argv
    root = Path(folder)

    def killed() -> None:
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)

    texts = [(root / name).read_text(encoding="utf-8") for name in ("old.yaml", "new.yaml")]
    given = Versions(
        load_stored_spec(texts[0]),
        texts[0],
        load_stored_spec(texts[1]),
        texts[1],
        Path(mapping[0]).read_text(encoding="utf-8") if mapping else None,
    )
    with store_at(root) as store:
        migrating(store, given, phase, die_at=int(at), die=killed)


if __name__ == "__main__":  # the child process of a killed migration case
    _child(sys.argv[1:])
