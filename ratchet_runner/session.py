"""The one composition root: what a command, ``ratchet check`` or a benchmark opens to work.

A :class:`Session` is a context manager. It opens, on first use, the store (from a URL, or the
default store under the home: a practice store), the command's clock (``RATCHET_NOW`` on a
practice store, else the system clock; or one the caller gives), and the practice world under
the home; :meth:`Session.runner` is the one place a :class:`~ratchet_runner.engine.runner.Runner`
is built. On exit it closes every store (and every adapter) it opened, also when the body raised.

A runner's adapters resolve through the session's **binding** (:mod:`ratchet_runner.binding.files`):
the file given (``bindings``), else ``$RATCHET_BINDINGS``, else ``ratchet.toml`` beside the spec
(``spec``), else ``ratchet.toml`` in the working directory. Without one, only a practice store
runs a spec's adapters as their kinds (the practice world); on any other store every run is
refused before it is created, and a run found there is not driven.


A front end that lets runs be started another way than the effect protocol (the naive strategy
of ``ratchet run --naive`` and ``ratchet check --compare naive``) gives the session its step
chooser (``steps``): every runner the session builds then drives such a run the way it was
started. A worker pool is made over :meth:`Session.runner_factory`
(``Pool(session.runner_factory(), concurrency=2)``). So the session sits beside the worker and
the read models, below every front end.

Over 400 lines, as one concern: everything a front end opens is put together here and nowhere
else (store, clock, practice world, binding and its resolution, runners), so that no other
module composes parts of the house.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from .adapters.practice import PracticeWorld, check_fixture
from .adapters.practice.http import PracticeServer
from .binding.check import admit, check, kinds_unserved, unbound
from .binding.files import find, load, place_for, searched
from .binding.resolve import bound, refusing, spec_kinds
from .clock import Clock, SystemClock
from .engine.audit import acting_from as acting
from .engine.resolution import SPEC_KINDS, Resolution
from .engine.runner import Runner
from .errors import StoreError
from .settings import ENV_DB
from .store.dialects import redact, sqlite_url
from .store.home import command_clock, home_folder
from .store.store import Store

if TYPE_CHECKING:
    from .binding.files import Binding
    from .binding.implementations import Place
    from .engine.runner import AdapterFactory, Interrupt, RunnerFactory, RunnerOptions, StepKind
    from .store.context import RunContext
    from .store.records import RunRecord

#: The practice world's file, and the default store's, under the home.
WORLD_FILE, STORE_FILE = "practice.db", "ratchet.db"


LOG = logging.getLogger(__name__)


@contextlib.contextmanager
def acting_from(via: str, address: str) -> Iterator[None]:
    """Within the block, every decision and operator action records ``via`` and ``from``: the
    origin a front end (the service's API, its console, a webhook) gives what it does."""
    with acting(via, address):
        yield


def _to_stderr(line: str) -> None:
    """Where the session says what it did when nobody said where (the command line does)."""
    LOG.info("%s", line)


class Session:
    """What one command works with, opened when first asked for and closed on exit.

    ``db`` is the store's URL; ``None`` is the default store, created as a practice store: SQLite
    beside the practice world under ``home`` when one is given, else ``$RATCHET_DB``, else SQLite
    under ``$RATCHET_HOME`` (default ``./.ratchet``). ``home`` is where the practice world lives
    (default: ``$RATCHET_HOME``, else ``./.ratchet``). ``clock``, when given, is the
    clock of every runner (``RATCHET_NOW`` is then not consulted); else each store's command clock
    (:func:`~ratchet_runner.store.home.command_clock`, read from ``environ``). ``bindings``: the
    binding file to resolve adapters through (default: looked for, see the module docstring;
    ``spec``: the spec file, beside which ``ratchet.toml`` is looked for). ``steps``: which
    step performs each effect in every runner the session builds (default: the effect protocol
    for every effect); the command line, the service and ``ratchet check`` give the naive
    strategy's (:func:`ratchet_runner.review.naive.step_for`), so that a run started naive stays
    naive whichever of them drives it."""

    def __init__(
        self,
        db: str | None = None,
        *,
        home: Path | None = None,
        clock: Clock | None = None,
        environ: Mapping[str, str] | None = None,
        bindings: str | Path | None = None,
        spec: str | Path | None = None,
        steps: StepKind | None = None,
    ) -> None:
        self.url = db
        self.steps = steps
        self.home = home
        self._given_clock = clock
        self._environ = os.environ if environ is None else environ
        self._bindings, self._spec_path = bindings, spec
        self._binding: tuple[Binding | None] | None = None  # (found,) once looked for
        self._store: Store | None = None
        self._clock: Clock | None = None
        self._world: PracticeWorld | None = None
        self._opened: list[Store] = []
        self._runners: list[Runner] = []
        self._place: Place | None = None  # where adapters are made; closed on exit
        self._world_clock: Clock | None = None  # the practice world's clock, when not the system's

    # -- the context ----------------------------------------------------------------------------

    def __enter__(self) -> Session:
        return self

    def __exit__(
        self,
        _type: type[BaseException] | None,
        _value: BaseException | None,
        _traceback: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close every adapter and store this session opened, newest first (each even if another
        fails)."""
        made = self._place.made if self._place is not None else []
        while made:
            closing = getattr(made.pop(), "close", None)
            if callable(closing):
                with contextlib.suppress(Exception):  # a pool that will not close stops nothing
                    closing()
        failed: BaseException | None = None
        while self._opened:
            try:
                self._opened.pop().close()
            except Exception as exc:
                failed = failed or exc
        self._store, self._clock = None, None
        if failed is not None:
            raise failed

    # -- what a command opens -------------------------------------------------------------------

    @property
    def store(self) -> Store:
        """The session's store, opened on first use."""
        if self._store is None:
            self._store = self.open_store()
        return self._store

    @property
    def clock(self) -> Clock:
        """The session's clock (for the session's store): see the class."""
        if self._given_clock is not None:
            return self._given_clock
        if self._clock is None:
            self._clock = self.clock_for(self.store)
        return self._clock

    @property
    def world(self) -> PracticeWorld:
        """The practice world under the home, opened (and created) on first use: read-only when
        the home cannot be written (then it is read, never changed)."""
        if self._world is None:
            self._world = PracticeWorld(home_folder(self.home) / WORLD_FILE)
            if self._world_clock is not None:
                self._tie_world(self._world_clock)
        return self._world

    def _tie_world(self, clock: Clock) -> None:
        """Run the practice world by the runners' clock when it is not the system clock
        (``RATCHET_NOW``, a fake clock): its late commits fall due, and its slow replies pass,
        as that clock moves, so that a runner waiting out a provider's commit window by it sees
        what the provider made meanwhile."""
        self._world_clock = clock
        if self._world is not None:
            self._world.now = clock.now
            self._world.sleep = clock.sleep

    def writable_world(self) -> PracticeWorld:
        """The practice world, checked before anything that changes it is written elsewhere:
        not read-only, not corrupt, with room on its disk (a
        :class:`~ratchet_runner.errors.StoreError` that says which). Adapters are made on it,
        fixtures seeded, faults injected."""
        world = self.world
        world.ready()
        return world

    @property
    def binding(self) -> Binding | None:
        """The binding the session resolves adapters through (found and read on first use;
        :class:`~ratchet_runner.errors.BindingInvalid` for a file that is no binding), or None
        when no binding file is given or found."""
        if self._binding is None:
            path = find(self._bindings, spec=self._spec_path, environ=self._environ)
            self._binding = (None if path is None else load(path),)
        return self._binding[0]

    def open_store(self) -> Store:
        """Another connection to the session's store (one per worker thread), closed on exit.
        The default store is created as a practice store; a store named by URL is not. The
        default store's URL is built from the home's path (which may hold ``?`` or ``%``); when
        the store is there and the home cannot be written (a read-only mount), it is opened for
        reading: the read commands work, a change is refused by the database."""
        url, create = self.store_url()
        store = Store(url, practice=self.url is None, create=create)
        self._opened.append(store)
        return store

    def store_url(self) -> tuple[str | None, bool]:
        """The URL of the session's store (None: ``$RATCHET_DB``, or the default), and whether
        it may be written: the default store under a home that cannot be written is opened for
        reading."""
        url, create = self.url, True
        if url is None and (self.home is not None or not os.environ.get(ENV_DB)):
            folder = home_folder(self.home)
            path = folder / STORE_FILE
            read_only = path.exists() and not (
                os.access(folder, os.W_OK) and os.access(path, os.W_OK)
            )
            url, create = sqlite_url(path, read_only=read_only), not read_only
        return url, create

    def clock_for(self, store: Store) -> Clock:
        """The clock commands on ``store`` run by: the session's given clock, else
        ``RATCHET_NOW`` on a practice store (every event then also records the real time), else
        the system clock. ``RATCHET_NOW`` on another store is refused (:class:`UsageError`)."""
        if self._given_clock is not None:
            return self._given_clock

        clock, overridden = command_clock(self._environ, store.is_practice, redact(store.url))
        store.stamp_real_time = overridden
        return clock

    # -- the runner -----------------------------------------------------------------------------

    def runner(
        self,
        *,
        store: Store | None = None,
        adapters: AdapterFactory | None = None,
        interrupt: Interrupt | None = None,
        marks: RunContext | None = None,
        options: RunnerOptions | None = None,
    ) -> Runner:
        """A runner on ``store`` (default: the session's) with its clock and the session's
        ``steps``; its adapters resolve through the session's binding (:meth:`resolution`)
        unless ``adapters`` is given (then nothing is recorded on the runs it starts, and it
        drives any run); ``marks``: what every run it starts keeps in its context (the naive
        strategy's :data:`~ratchet_runner.review.naive.MARKS`); ``options``: how it works (a pool
        passes its own). The one place a Runner is built."""
        on = self.store if store is None else store
        resolution: Resolution | None = None
        if adapters is None:
            adapters, resolution = self.resolution(on)
        clock = self.clock if store is None else self.clock_for(on)
        if not isinstance(clock, SystemClock):
            self._tie_world(clock)
        made = Runner(
            on,
            adapters,
            clock,
            interrupt=interrupt,
            steps=self.steps,
            marks=marks,
            options=options,
            resolution=resolution,
        )
        self._runners.append(made)
        return made

    def runner_factory(self, adapters: AdapterFactory | None = None) -> RunnerFactory:
        """Runners for a worker pool (``Pool(session.runner_factory(), concurrency=2)``): each
        call opens its own store (a worker thread's connections), so a worker started while the
        database is down waits for it instead of failing here. ``RATCHET_NOW`` on a store that
        is not a practice store is refused here, once (:class:`UsageError`)."""
        if self._environ.get("RATCHET_NOW"):
            self.clock_for(self.store)

        def make(*, options: RunnerOptions) -> Runner:
            return self.runner(store=self.open_store(), adapters=adapters, options=options)

        return make

    def reset(self, everything: bool = False, practice: bool = False) -> None:
        """Empty the practice world; with ``everything``, the store too; with ``practice`` as
        well, declare that store a practice store (``ratchet reset``). The practice world is
        checked first and the store emptied before it, so that a world or a store that cannot be
        changed (read-only, corrupt, a full disk) stops the reset before either is emptied."""
        world = self.writable_world()
        if everything:
            self.store.reset()
            if practice:
                self.store.mark_practice()
        world.reset()

    def practice_server(self, host: str = "127.0.0.1", port: int = 0) -> PracticeServer:
        """The practice world served over HTTP on ``host``:``port`` (0: a free port), listening
        once made (``ratchet practice serve``)."""
        return PracticeServer(self.writable_world(), host, port)

    def resolution(self, store: Store | None = None) -> tuple[AdapterFactory, Resolution]:
        """How a runner on ``store`` (default: the session's) resolves adapters, with the
        admission check a spec passes before a run of it is created: through the session's
        binding; else, on a practice store, the spec's kinds in the practice world; else not at
        all (every run refused before it is created, none driven)."""
        on = self.store if store is None else store
        binding = self.binding
        if self._place is None:
            self._place = place_for(binding, self.writable_world, self._environ)
        place, looked = self._place, searched(self._spec_path)
        if binding is not None:
            return bound(binding, place), Resolution(
                stamp=binding.stamp,
                admit=lambda spec: admit(check(spec, binding, place)),
                semantics=lambda adapter: binding.semantics_of(adapter.name),
            )
        if on.is_practice():
            return spec_kinds(place), Resolution(
                stamp=SPEC_KINDS, admit=lambda spec: admit(kinds_unserved(spec, looked))
            )
        why = (
            f"no binding file was found (looked for {looked}), and the store {redact(on.url)} is "
            "not a practice store: only a practice store runs a spec's adapters as their kinds"
        )
        return refusing(why), Resolution(missing=why, admit=lambda spec: admit(unbound(spec, why)))

    # -- practising ------------------------------------------------------------------------------

    def practice_setup(
        self,
        fixture: Mapping[str, Any] | None,
        faults: Sequence[tuple[str, str]],
        say: Callable[[str], None] = _to_stderr,
    ) -> Callable[[RunRecord, bool], None]:
        """The hook a starting run calls before it is driven (``before_drive``): a run just
        created gets the example's practice world ``fixture``; either way each ``(effect, kind)``
        of ``faults`` is injected into that effect's next call, which meets it rather than a
        fault of the fixture's (``say`` notes that the run already existed, when faults are
        given for it). A fixture the practice world cannot use
        is refused here, before any run is created (:class:`~ratchet_runner.errors.WorldError`),
        and so is a practice world that cannot be written (read-only, corrupt, its disk full: a
        :class:`~ratchet_runner.errors.StoreError`). Should seeding fail all the same once the
        run exists (the disk filled up in between), the error names the run, which was not
        driven, and how to go on."""
        if fixture:
            check_fixture(fixture)
        if (fixture or faults) and (home_folder(self.home) / WORLD_FILE).exists():
            self.writable_world()  # one not made yet is made (and checked) with the adapters

        def prepare(started: RunRecord, created: bool) -> None:
            try:
                if faults and not created:
                    say("note: the run already existed; --fault applies to its next calls")
                for effect, kind in faults:  # first: the next call meets them, not the fixture's
                    self.world.add_fault(effect, kind)
                if created and fixture:
                    self.world.seed(dict(fixture))
            except StoreError as exc:
                if not created:
                    raise
                raise StoreError(
                    f"run {started.id} was created, but its practice world could not be seeded: "
                    f"{exc.message}. The run was not driven. Once the practice world can be "
                    f"written, cancel the run (ratchet ops cancel {started.id}) and start the "
                    "work under another business key, or start over (ratchet reset --all)"
                ) from None

        return prepare

    # -- practising recovery --------------------------------------------------------------------

    def kill_at(
        self, target: str | None, say: Callable[[str], None] = _to_stderr
    ) -> Interrupt | None:
        """The ``--interrupt POINT[:EFFECT]`` hook: SIGKILL this process at the point named. No
        call is in flight at any of the points, so the leases this session's runners hold are
        given back first, and ``ratchet resume`` can go on at once; a real crash leaves them
        behind, and others wait until they run out. ``say`` tells where the process ended."""
        if target is None:
            return None
        point, _, effect = target.partition(":")

        def fires(reached: str, reached_effect: str) -> bool:
            return reached == point and effect in ("", reached_effect)

        def interrupt(reached: str, reached_effect: str) -> None:
            if fires(reached, reached_effect):
                say(f"interrupted at {point} of {reached_effect}: the process ends here (SIGKILL)")
                self._release_leases()
                sys.stdout.flush()
                sys.stderr.flush()
                os.kill(os.getpid(), signal.SIGKILL)

        interrupt.fires = fires  # type: ignore[attr-defined]
        return interrupt

    def _release_leases(self) -> None:
        for made in self._runners:
            for lease in made.leases.held():
                with contextlib.suppress(Exception):
                    made.store.release(lease.run_id, lease.token)
