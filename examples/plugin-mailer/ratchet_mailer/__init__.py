"""ratchet-mailer: an example Ratchet adapter plugin that puts e-mails in an outbox, once each.

The outbox is a small SQLite file that the binding names (``outbox = "/var/lib/app/outbox.db"``),
standing for a mail provider that keeps a record of what it accepted. :class:`OutboxMailer`
implements the adapter protocol of ``ratchet_runner``:

- ``call`` sends (``send_email``) with the operation ID as the idempotency key: the first request
  under an ID puts the e-mail in the outbox; the same ID again returns the first result, and puts
  nothing more; the same ID with other arguments is escalated to a person (the key was reused);
- ``lookup`` (``find_email``) says what the outbox holds under an operation ID. It reads the same
  file, so a process that starts after another one died in the middle of a send finds what that
  one sent, and Ratchet reconciles instead of sending again.

It declares what it implements (``operations``, ``lookups``), the receipt field each returns
(``receipts``, ``lookup_receipts``) and what its provider does with a second request under one
operation ID (``semantics``: it deduplicates) on the class, so ``ratchet validate --bindings``
checks a spec against it without making one. Installing the distribution registers it under the
entry-point group ``ratchet.adapters`` as the kind ``outbox_mailer``.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

from ratchet_runner import (
    Call,
    Done,
    Escalate,
    Found,
    LookupFailed,
    LookupResult,
    NotFound,
    Outcome,
    Refused,
    Semantics,
)
from ratchet_runner.errors import BindingError

__all__ = ["OutboxMailer"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS outbox (
    operation_id TEXT PRIMARY KEY,  -- the idempotency key
    message_id   TEXT NOT NULL,
    recipient    TEXT NOT NULL,
    subject      TEXT NOT NULL,
    arguments    TEXT NOT NULL,     -- the request's arguments, as canonical JSON
    sender       TEXT NOT NULL,
    accepted_at  REAL NOT NULL
)
"""


def _canonical(args: Mapping[str, Any]) -> str:
    return json.dumps(args, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


class OutboxMailer:
    """E-mails put in an outbox file, once per operation ID.

    Settings (the binding's table): ``outbox``, the SQLite file (required; created when
    missing; a relative path is taken from the working directory); ``sender``, the From address
    (default ``noreply@example.com``). A wrong setting is a ``BindingError`` naming it."""

    #: The operations this adapter implements, the lookups it answers, and the receipt field
    #: each returns (what a spec's row must name: ``receipt: id``).
    operations = ("send_email",)
    lookups = ("find_email",)
    receipts: ClassVar[Mapping[str, str]] = {"send_email": "id"}
    lookup_receipts: ClassVar[Mapping[str, str]] = {"find_email": "id"}

    @staticmethod
    def semantics(operation: str, lookup: str | None = None) -> Semantics:
        """The outbox keeps one e-mail per operation ID (its primary key): a second request
        under an ID returns the first result, whatever the timing. A static method, so that
        ``ratchet validate --bindings`` can ask the class without making a mailer."""
        return Semantics(dedupe=True)

    def __init__(self, settings: Mapping[str, Any]) -> None:
        unknown = sorted(set(settings) - {"outbox", "sender"})
        if unknown:
            raise BindingError(f"outbox_mailer: unknown setting(s) {', '.join(unknown)}")
        outbox, sender = settings.get("outbox"), settings.get("sender", "noreply@example.com")
        if not isinstance(outbox, str) or not outbox:
            raise BindingError("outbox_mailer: setting 'outbox' (the outbox file) is required")
        if not isinstance(sender, str) or "@" not in sender:
            raise BindingError(f"outbox_mailer: setting 'sender' must be an address: {sender!r}")
        self.path = Path(outbox)
        self.sender = sender
        with self._db() as db:
            db.execute(_SCHEMA)

    def __repr__(self) -> str:
        return f"OutboxMailer({str(self.path)!r})"

    @contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        """One transaction on the outbox, holding its write lock from the start."""
        db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        try:
            db.execute("BEGIN IMMEDIATE")
            yield db
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        finally:
            db.close()

    # -- the adapter protocol ---------------------------------------------------------------

    def call(self, request: Call) -> Outcome:
        """Put the e-mail ``request`` describes in the outbox, once per operation ID."""
        if request.operation not in self.operations:
            return Escalate(
                f"outbox_mailer has no operation {request.operation!r}", possibly_applied=False
            )
        to, subject = request.args.get("to"), request.args.get("subject")
        if not isinstance(to, str) or "@" not in to:
            return Refused(f"not an e-mail address: {to!r}", {"to": to})
        if not isinstance(subject, str) or not subject:
            return Refused("an e-mail needs a subject", {"subject": subject})
        arguments = _canonical(request.args)
        with self._db() as db:
            row = db.execute(
                "SELECT message_id, recipient, arguments FROM outbox WHERE operation_id = ?",
                (request.operation_id,),
            ).fetchone()
            if row is None:
                message_id = f"msg-{request.operation_id[:16]}"
                db.execute(
                    "INSERT INTO outbox VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (
                        request.operation_id,
                        message_id,
                        to,
                        subject,
                        arguments,
                        self.sender,
                        time.time(),
                    ),
                )
                return Done({"id": message_id, "to": to})
        if row[2] != arguments:  # the key was used before, for another e-mail
            return Escalate(
                "idempotency key reused with other arguments",
                {"operation_id": request.operation_id, "sent": json.loads(row[2])},
                possibly_applied=True,
            )
        return Done({"id": row[0], "to": row[1]})  # the first result: nothing sent again

    def lookup(self, operation: str, operation_id: str, effect: str = "") -> LookupResult:
        """What the outbox holds under ``operation_id``: found, or not."""
        if operation not in self.lookups:
            return LookupFailed(f"outbox_mailer has no lookup {operation!r}")
        with self._db() as db:
            row = db.execute(
                "SELECT message_id, recipient FROM outbox WHERE operation_id = ?", (operation_id,)
            ).fetchone()
        return NotFound() if row is None else Found({"id": row[0], "to": row[1]})

    # -- for people ---------------------------------------------------------------------------

    def sent(self) -> list[dict[str, Any]]:
        """Every e-mail in the outbox, oldest first."""
        with self._db() as db:
            rows = db.execute(
                "SELECT operation_id, message_id, recipient, subject FROM outbox "
                "ORDER BY accepted_at"
            ).fetchall()
        keys = ("operation_id", "message_id", "to", "subject")
        return [dict(zip(keys, row, strict=True)) for row in rows]
