"""``ratchet check`` over HTTP: a spec's adapters that its binding binds to ``http``, reached
through the real HTTP adapter and a real socket.

:func:`over_http` reads the binding found for the spec (``--bindings``, ``$RATCHET_BINDINGS``, or
beside the spec) and says how a check reaches each adapter: ``http`` over the wire, ``practice``
and ``noop`` in-process (the case's practice world, by the adapter's kind, as without a binding); a
``python`` factory or a plugin is refused, since what it reaches cannot be given a fresh practice
world with faults injected per case. For each case, :func:`served` serves the case's practice world
over HTTP on 127.0.0.1 (a free port) for the whole case, so that the provider outlives the crash;
its slow reply waits on the case's fake clock, so nothing sleeps. Each process of the case (the one
that crashes, the one that resumes) makes its own HTTP adapters (:func:`reaching`) with
:func:`~ratchet_runner.binding.implementations.make`, as a run makes them, from the binding's
settings with two changes: ``base_url`` on the case's server (its path kept) and the effect header
the server injects faults by. A check never calls the host a binding names.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ..adapters.base import Adapter
from ..adapters.practice import PracticeWorld
from ..adapters.practice.http import EFFECT_HEADER, PracticeServer
from ..binding import implementations
from ..binding.files import Binding, find, load, place_for
from ..binding.implementations import Place
from ..clock import FakeClock
from ..errors import UsageError
from ..session import WORLD_FILE, Session
from ..spec.model import Adapter as AdapterSpec
from ..spec.model import Spec

#: The implementations a check runs in-process, in the case's practice world (by the adapter's
#: kind, as without a binding); ``http`` goes over the wire; any other is refused.
IN_PROCESS = ("practice", "noop")


@dataclass(frozen=True)
class OverHttp:
    """How a check reaches a spec's adapters that its binding binds to ``http``: through the
    HTTP adapter each entry's settings make, against the case's practice server."""

    binding: Binding
    http: tuple[str, ...]  # the spec's adapters bound to http, in the spec's order
    in_process: tuple[str, ...]  # the others (practice, noop): the practice world, in-process
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ, compare=False)

    @property
    def file(self) -> str:
        """The binding file, as found (for ``--bindings FILE`` in a reproduce command)."""
        return str(self.binding.path)

    def describe(self) -> str:
        """``payments over HTTP (binding practice-http, specs/http.toml)``: the header line."""
        said = f"{', '.join(self.http)} over HTTP"
        if self.in_process:
            said += f"; {', '.join(self.in_process)} in-process"
        return f"{said} (binding {self.binding.name}, {self.file})"

    def settings(self, adapter: str, url: str) -> dict[str, Any]:
        """The entry's settings with ``base_url`` on the practice server at ``url`` (its path
        kept) and the effect header the server injects faults by."""
        settings = dict(self.binding.entries[adapter].settings)
        path = urlsplit(str(settings.get("base_url", ""))).path
        return {**settings, "base_url": url + path, "effect_header": EFFECT_HEADER}

    def make(self, adapter: AdapterSpec, url: str, place: Place) -> Adapter:
        """The HTTP adapter for ``adapter``, made as a run makes it, calling ``url``."""
        return implementations.make("http", self.settings(adapter.name, url), adapter, place)

    def place(self, world: Callable[[], PracticeWorld]) -> Place:
        """Where the adapters of one process of a case are made (see :func:`close_adapters`)."""
        return place_for(self.binding, world, self.environ)

    def prove(self, spec: Spec) -> None:
        """Make each HTTP adapter once (never called), so that a setting or a secret it cannot
        be made with is a :class:`~ratchet_runner.errors.BindingError` before any case."""
        place = self.place(no_world)
        try:
            for name in self.http:
                self.make(spec.adapters[name], "http://127.0.0.1:9", place)
        finally:
            close_adapters(place)

    def to_json(self) -> dict[str, Any]:
        return {
            "binding": self.binding.name,
            "file": self.file,
            "http": list(self.http),
            "in_process": list(self.in_process),
        }


def over_http(
    spec: Spec,
    spec_path: str,
    bindings: str | Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> OverHttp | None:
    """How the binding found for the spec (``bindings``, ``$RATCHET_BINDINGS``, or beside the
    spec) has a check reach its adapters: over HTTP when it binds some to ``http``; None when it
    binds none (or there is no binding): every case in-process. A :class:`UsageError`, naming
    the file, line and adapter, for an adapter bound to a ``python`` factory or a plugin: what
    it reaches cannot be given a fresh practice world with faults injected per case."""
    environ = os.environ if environ is None else environ
    path = find(bindings, spec=spec_path, environ=environ)
    if path is None:
        return None
    binding = load(path)
    entries = [(name, binding.entries[name]) for name in spec.adapters if name in binding.entries]
    for name, entry in entries:
        if entry.implementation not in ("http", *IN_PROCESS):
            what = "a python factory" if entry.implementation == "python" else "a plugin"
            raise UsageError(
                f"{binding.path}:{entry.line}: adapter {name!r} is bound to implementation "
                f"{entry.implementation!r} ({what}), which ratchet check cannot run: each case "
                "needs a fresh practice world with faults injected into it, which check serves "
                'over HTTP (implementation = "http") or in-process ("practice", "noop"). '
                "Check with a binding that binds it to one of those"
            )
    http = tuple(name for name, entry in entries if entry.implementation == "http")
    if not http:
        return None
    others = tuple(name for name in spec.adapters if name not in http)
    return OverHttp(binding, http, others, environ=environ)


@contextmanager
def served(home: str, wire: OverHttp | None) -> Iterator[PracticeServer | None]:
    """The case's practice world (under ``home``) served over HTTP on 127.0.0.1, a free port,
    for the whole case, when its adapters go over HTTP; else nothing."""
    if wire is None:
        yield None
        return
    server = PracticeServer(PracticeWorld(Path(home) / WORLD_FILE), "127.0.0.1", 0)
    server.world.sleep = FakeClock().sleep  # never a real sleep; each process's clock below
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
    )
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def no_world() -> PracticeWorld:
    """The world of a place whose adapters are all HTTP ones, which need none."""
    raise AssertionError("an HTTP adapter is made without a practice world")


@dataclass(frozen=True)
class HttpReach:
    """What one process of a case reaches its HTTP adapters with: the server's ``url``, and
    where its adapters are made (closed when the process is done)."""

    wire: OverHttp
    url: str
    place: Place


@contextmanager
def reaching(
    session: Session, wire: OverHttp | None, url: str | None
) -> Iterator[HttpReach | None]:
    """The HTTP adapters of one process of a case (the crashing one, the resuming one), closed
    when it is done; None when the case goes in-process."""
    if wire is None or url is None:
        yield None
        return
    http = HttpReach(wire, url, wire.place(lambda: session.world))
    try:
        yield http
    finally:
        close_adapters(http.place)


def close_adapters(place: Place) -> None:
    """Close the adapters made in ``place`` (their pooled connections)."""
    while place.made:
        closing = getattr(place.made.pop(), "close", None)
        if callable(closing):
            closing()
