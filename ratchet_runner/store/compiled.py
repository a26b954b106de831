"""Statements compiled once and run on the driver's cursor: the hot path's writes and reads.

Through a SQLAlchemy :class:`~sqlalchemy.engine.Connection`, every statement pays for setting
up an execution context, constructing its parameters from the compiled form, running the
connection's events and wrapping the result: on SQLite, several times what the driver takes to
run it. The store's commits run the same handful of statements again and again, so
:class:`Compiled` compiles a SQLAlchemy statement once for the dialect and keeps its SQL text,
the order of its parameters and the way each is bound (a ``JSON`` column's value encoded as
SQLAlchemy encodes it, a literal's value as compiled); :meth:`Compiled.run` then hands the text
and a tuple to the cursor. The statements themselves stay SQLAlchemy's, defined once where the
store defines them; only their execution skips the layers above the driver.

A driver's error is raised as SQLAlchemy raises it (:func:`execute`: the same
:class:`~sqlalchemy.exc.IntegrityError` or :class:`~sqlalchemy.exc.OperationalError` with the
driver's error as ``orig``), so that the store reads every failure the same way whichever path
ran the statement.
"""

from __future__ import annotations

import weakref
from collections import namedtuple
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from typing import Any, TypeAlias, cast

from sqlalchemy import Connection, Engine
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.compiler import SQLCompiler

#: How one parameter is bound: its name, what converts its value (None: as it is), and the value
#: it has when none is given (a literal the statement was built with).
_Slot = tuple[str, Callable[[Any], Any] | None, Any]
_NO_VALUE = object()


class Compiled:
    """``statement`` compiled once for ``dialect``: :attr:`sql`, and what :meth:`params` binds
    (by position for SQLite's ``?``, by name for psycopg's ``%(name)s``)."""

    def __init__(
        self, statement: ClauseElement, dialect: Dialect, keys: Sequence[str] = ()
    ) -> None:
        """``keys``: the names of the parameters it is run with, which choose the columns of an
        ``INSERT`` given none (as :meth:`~sqlalchemy.engine.Connection.execute` chooses)."""
        compiled = cast(SQLCompiler, statement.compile(dialect=dialect, column_keys=list(keys)))
        self.sql = compiled.string
        self._error: type[Exception] = dialect.loaded_dbapi.Error
        #: The names the SQL text gives its parameters (None: they go by position).
        self._named: tuple[str, ...] | None = None
        order = compiled.positiontup
        if order is None:  # a named style (psycopg's %(name)s)
            order = list(compiled.binds)
            escaped = compiled.escaped_bind_names
            self._named = tuple(escaped.get(name, name) for name in order)
        slots: list[_Slot] = []
        for name in order:
            bind = compiled.binds[name]
            process = bind.type.dialect_impl(dialect).bind_processor(dialect)
            value = bind.effective_value if not bind.required else _NO_VALUE
            slots.append((name, process, value))
        self._slots = tuple(slots)
        self._dialect = dialect
        self._types = [column.type for column in getattr(statement, "exported_columns", ())]
        self._readers: tuple[Callable[[Any], Any] | None, ...] | None = None

    def params(self, given: Mapping[str, Any]) -> Any:
        """The statement's parameters from ``given`` (by name) and its literals: a tuple in
        order, or for a named style a dict by the names its text gives them."""
        values: list[Any] = []
        for name, process, literal in self._slots:
            value = given[name] if name in given or literal is _NO_VALUE else literal
            values.append(value if process is None else process(value))
        if self._named is not None:
            return dict(zip(self._named, values, strict=True))
        return tuple(values)

    def run(self, cursor: Any, given: Mapping[str, Any]) -> Result:
        """Run the statement on the driver's ``cursor`` with ``given``."""
        execute(cursor, self.sql, self.params(given), self._error)
        return Result(cursor, self._read_as(cursor))

    def _read_as(self, cursor: Any) -> tuple[Callable[[Any], Any] | None, ...]:
        """How each column of a row it returns is read (SQLite's ``JSON`` text decoded, ...), as
        SQLAlchemy reads it, given the types the driver says (found at its first run)."""
        if self._readers is None:
            described = cursor.description or ()
            self._readers = tuple(
                kind.dialect_impl(self._dialect).result_processor(self._dialect, column[1])
                for kind, column in zip(self._types, described, strict=False)
            )
        return self._readers


def execute(cursor: Any, sql: str, params: Any, error: type[Exception]) -> Any:
    """``cursor.execute(sql, params)``; the driver's ``error`` (its base class) raised as
    SQLAlchemy raises it running ``sql``: an :class:`~sqlalchemy.exc.IntegrityError` for a
    constraint, an :class:`~sqlalchemy.exc.OperationalError` for a locked or full database, and
    so on, with the driver's error as ``orig``."""
    try:
        return cursor.execute(sql, params)
    except error as exc:
        raise DBAPIError.instance(sql, params, exc, error) from exc


class Result:
    """What a statement run on the driver returned: as much of SQLAlchemy's
    :class:`~sqlalchemy.engine.CursorResult` as the store's writes read; each row's columns
    read as ``columns`` says (none: as the driver gives them)."""

    def __init__(self, cursor: Any, columns: Sequence[Callable[[Any], Any] | None] = ()) -> None:
        self._cursor = cursor
        self._columns = columns if any(columns) else ()
        self.rowcount: int = cursor.rowcount

    def _read(self, found: Any) -> tuple[Any, ...]:
        if self._columns:
            found = [
                v if read is None else read(v) for read, v in zip(self._columns, found, strict=True)
            ]
        return tuple(found)

    def _row(self, found: Any) -> Any:
        named = _row_type(tuple(d[0] for d in self._cursor.description))
        return named._make(self._read(found))

    def first(self) -> Any:
        """The first row (its columns by name too), or None."""
        found = self._cursor.fetchone()
        return None if found is None else self._row(found)

    def fetchall(self) -> list[Any]:
        return [self._row(found) for found in self._cursor.fetchall()]

    def scalar(self) -> Any:
        """The first column of the first row, or None."""
        found = self._cursor.fetchone()
        return None if found is None else self._read(found)[0]


@lru_cache(maxsize=64)
def _row_type(names: tuple[str, ...]) -> Any:
    """A row's class for the columns ``names``: a tuple whose columns are attributes too, with
    the ``_mapping`` of SQLAlchemy's rows."""
    base = namedtuple("Row", names, rename=True)  # type: ignore[misc]
    return type("Row", (base,), {"__slots__": (), "_mapping": property(base._asdict)})


class Driven:
    """A write transaction on the driver's connection ``raw``: it runs SQLAlchemy statements as
    :meth:`~sqlalchemy.engine.Connection.execute` does (each compiled once, :class:`Compiled`),
    and driver SQL as :meth:`~sqlalchemy.engine.Connection.exec_driver_sql` does, so that the
    store's writes run on either unchanged. Beginning and ending the transaction is its
    owner's."""

    def __init__(
        self, raw: Any, dialect: Dialect, statements: Statements, info: dict[Any, Any] | None = None
    ) -> None:
        self.raw = raw
        #: What the pool keeps with the connection (SQLAlchemy's ``Connection.info``).
        self.info: dict[Any, Any] = {} if info is None else info
        self.dialect = dialect
        self._statements = statements
        self._error: type[Exception] = dialect.loaded_dbapi.Error

    def execute(
        self, statement: ClauseElement, params: Mapping[str, Any] | Sequence[Mapping[str, Any]] = {}
    ) -> Result:
        """Run ``statement`` with ``params`` (a list: once per row, as ``executemany``)."""
        if isinstance(params, Mapping):
            compiled = self._statements.compiled(statement, params)
            return compiled.run(self.raw.cursor(), params)
        if not params:
            raise ValueError("executemany with no rows")
        compiled = self._statements.compiled(statement, params[0])
        rows = [compiled.params(row) for row in params]
        cursor = self.raw.cursor()
        try:
            cursor.executemany(compiled.sql, rows)
        except self._error as exc:
            raise DBAPIError.instance(compiled.sql, rows, exc, self._error) from exc
        return Result(cursor)

    def exec_driver_sql(self, sql: str, params: Any = ()) -> Result:
        return Result(execute(self.raw.cursor(), sql, params, self._error))


class Statements:
    """Each statement's :class:`Compiled` forms, by the parameter names it is run with, made on
    first use and kept while the statement is (a statement built for one write is compiled for
    it and forgotten with it)."""

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect
        self._forms: weakref.WeakKeyDictionary[ClauseElement, dict[frozenset[str], Compiled]]
        self._forms = weakref.WeakKeyDictionary()

    def driven(self, raw: Any, info: dict[Any, Any] | None = None) -> Driven:
        """The driver's connection ``raw`` running statements compiled here (``info``: what
        the pool keeps with it)."""
        return Driven(raw, self.dialect, self, info)

    def compiled(self, statement: ClauseElement, params: Mapping[str, Any]) -> Compiled:
        keys = frozenset(params)
        forms = self._forms.get(statement)
        if forms is None:
            forms = self._forms[statement] = {}
        found = forms.get(keys)
        if found is None:
            found = forms[keys] = Compiled(statement, self.dialect, sorted(keys))
        return found


#: Where a store's write runs: a SQLAlchemy connection, or the driver's through :class:`Driven`.
Executes: TypeAlias = Connection | Driven


#: The engine's events a listener may watch the writes by (``begin`` has SQLite's writer's own).
_WATCHED = (
    "before_execute",
    "after_execute",
    "before_cursor_execute",
    "after_cursor_execute",
    "commit",
    "rollback",
)


def observed(engine: Engine, own_begin: int = 0) -> bool:
    """Whether anything listens to ``engine``'s statements or transactions (``own_begin``: how
    many ``begin`` listeners are the store's own): then the hot path goes through SQLAlchemy,
    so that the listener sees every statement."""
    dispatch = engine.dispatch
    return (
        len(dispatch.begin) > own_begin
        or any(getattr(dispatch, name) for name in _WATCHED)
        or bool(engine.dialect.dispatch.handle_error)
    )
