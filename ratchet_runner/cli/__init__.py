"""The ``ratchet`` command line (:mod:`.main`): a thin shell that parses, calls the library, and
formats. ``ratchet_runner.cli:main`` is the console script; ``cli`` is the click group."""

from __future__ import annotations

from .main import cli, main

__all__ = ["cli", "main"]
