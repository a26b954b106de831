"""The HTTP adapter (:mod:`.adapter`): an effect's operation sent to a real provider over HTTP,
on httpx, as a binding describes it (:mod:`.settings`), under one deadline a call
(:mod:`.transport`), every outcome classified at the boundary (:mod:`.classify`), secrets read
from the environment or files and never shown (:mod:`.secrets`)."""

from __future__ import annotations

from .adapter import MAX_REPLY_BYTES, HttpAdapter, lookup_semantics

__all__ = ["MAX_REPLY_BYTES", "HttpAdapter", "lookup_semantics"]
