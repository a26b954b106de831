"""The command line's serving commands: ``worker``, ``serve``, ``token`` and ``practice serve``
(:mod:`.main` adds them to its group).

The commands that run until they are stopped, and the operator tokens of the service: each
parses its options and hands them to the library (the worker pool, the HTTP service, the
practice providers' server), as the rest of the command line does. Light to
import: the library modules a command uses are imported when it runs.
"""

from __future__ import annotations

import json
import logging
import signal
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from . import database
from .logs import log_options
from .options import (
    JSON_OPTION,
    RUN_COMMAND,
    SECONDS,
    How,
    echo_lines,
    emit_json,
    lease_option,
    named,
    open_session,
    with_options,
)

if TYPE_CHECKING:
    from ..worker.passes import PassReport
    from ..worker.pool import PoolReport

Json = dict[str, Any]


def listening(port: int) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The ``--host`` and ``--port`` options of a command that serves (``port``: its default)."""
    host_option = click.option(
        "--host", default="127.0.0.1", show_default=True, help="The address to listen on."
    )
    port_option = click.option(
        "--port",
        default=port,
        show_default=True,
        type=click.IntRange(0, 65535),
        help="The port to listen on; 0 picks a free one (the line printed says which).",
    )
    return lambda command: host_option(port_option(command))


@click.command()
@click.option("--once", is_flag=True, help="One pass, then exit (for cron).")
@click.option(
    "--concurrency",
    default=1,
    type=click.IntRange(min=1),
    show_default=True,
    help="Worker threads in this process (several processes on several machines "
    "may share one PostgreSQL store).",
)
@click.option(
    "--poll",
    default=1.0,
    show_default=True,
    type=SECONDS,
    help="How long between two looks for work when nothing wakes the worker (a signal, a "
    "decision, a new run or a due timer wakes it at once): a duration (500ms, 30s, 5m) or "
    "seconds.",
)
@click.option(
    "--listen-db",
    "listen_db",
    metavar="URL",
    envvar="RATCHET_LISTEN_DB",
    help="PostgreSQL: listen for wake-ups over a connection to URL, the same database reached "
    "directly, when --db goes through a transaction-pooling proxy (which cannot carry LISTEN). "
    "Env: RATCHET_LISTEN_DB.",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    help="Serve Prometheus metrics on this port (GET /metrics): the runs' series, read from the "
    "store at each scrape, and this worker's effect call latency.",
)
@click.option(
    "--metrics-host",
    default="127.0.0.1",
    show_default=True,
    help="With --metrics-port: the address to listen on.",
)
@database.retention_options
@with_options(
    *RUN_COMMAND,
    lease=lease_option(
        help="How long a claimed run stays leased without a heartbeat (a duration, 30s or 2m, or "
        "seconds): above 0, at least (the longest effect timeout + 1 s) / 0.9 (a lease is "
        "counted on for 90 % of its length, and a call is started only when that outlasts its "
        "timeout by 1 s). The worker refuses to start if it is too short for a live run's spec.",
    ),
)
@log_options
def worker(
    once: bool,
    concurrency: int,
    poll: float,
    listen_db: str | None,
    metrics_port: int | None,
    metrics_host: str,
    prune_every: str | None,
    prune_age: str | None,
    how: How,
) -> None:
    """Fire due timers and advance runnable runs under leases until stopped, or --once.

    An idle worker wakes at once when another process leaves a run to the workers (a new run,
    a signal or a decision given with --leave-to-workers, a lease given back) and when a timer
    falls due; it looks for work every --poll seconds as well. PostgreSQL: it listens for
    notifications (LISTEN), and checks at start that one of its own arrives, else warns and
    polls; SQLite: it looks whether the database file changed every 10 ms.

    Runs are claimed with leases (FOR UPDATE SKIP LOCKED on PostgreSQL) that a heartbeat keeps
    alive and that expire by the database's clock; every commit is fenced by the lease, so a
    worker paused past its lease changes nothing when it wakes. Each timer fires once and never
    early. SIGTERM or Ctrl-C: finish the current step, release the leases, exit.

    A run that started under another binding than the worker's is left, unchanged, to a worker
    that has it; a worker with no binding at all, on a store that is not a practice store,
    warns on stderr when it starts and parks each run it claims whose spec declares adapters,
    for a person (docs/reference/bindings.md).

    A --lease too short for the spec of a live run (one not done or cancelled) is refused at
    start (exit status 2), naming the spec, its effect and the --lease it needs; a run of a spec
    met later that needs a longer lease is left, unchanged, to a worker that has one, with a
    warning once per spec version (docs/explanation/leases.md).

    With --prune-every, a thread of the worker prunes the runs finished longer ago than
    --prune-finished-before, at start and every interval (with --once: once, after the pass),
    a small batch per transaction, as ratchet prune does.
    """
    from ..worker.passes import lease_refusal, unbound_warning, worker_pass
    from ..worker.pool import Pool
    from ..worker.pruner import Pruner

    retention = database.retention(prune_every, prune_age)
    with open_session(how.db, how.bindings) as session:
        if once:
            runner = session.runner()
            refused = lease_refusal(runner, how.lease_seconds)
            if refused is not None:
                raise refused
            warning = unbound_warning(runner)
            if warning is not None:
                logging.getLogger("ratchet_runner.worker.pool").warning("%s", warning)
            passed = worker_pass(runner, lease_seconds=how.lease_seconds)
            if retention is not None:
                Pruner(session.open_store, session.clock, *retention, threading.Event()).once()
            if how.as_json:
                click.echo(json.dumps(passed.to_json(), ensure_ascii=False))
                return
            out, err = pass_lines(passed)
            echo_lines(out)
            echo_lines(err, err=True)
            return
        pool = Pool(
            session.runner_factory(),
            concurrency=concurrency,
            lease_seconds=how.lease_seconds,
            poll=poll,
            listen_url=listen_db,
            refuse_short_lease=True,
        )
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: pool.stop.set())
        pool.note(f"{concurrency} thread(s); SIGTERM or Ctrl-C stops")
        exporter = None
        if metrics_port is not None:
            from ..serve.metrics import serve_metrics

            exporter = serve_metrics(session, metrics_host, metrics_port)
            pool.note(f"metrics on {exporter.url}")
        if retention is not None:
            every, age = retention
            Pruner(session.open_store, session.clock, every, age, pool.stop).start()
            pool.note(f"pruning runs finished over {prune_age} ago, every {prune_every}")
        try:
            report = pool.run()
        finally:
            if exporter is not None:
                exporter.close()
    if how.as_json:
        emit_json(pool_json(pool.owner, report))
    else:
        logging.getLogger("ratchet_runner.worker.pool").info("%s", pool_line(report))


@click.command("serve")
@listening(8080)
@click.option(
    "--config",
    "config",
    metavar="FILE",
    help="The service's configuration: its operators and trusted proxies (default: "
    "$RATCHET_SERVE_CONFIG, else ratchet-serve.toml in the working directory).",
)
@click.option(
    "--spec",
    "specs",
    metavar="FILE",
    multiple=True,
    help="A spec whose runs POST /api/runs may start (repeat for several).",
)
@click.option(
    "--workers",
    default=0,
    show_default=True,
    type=click.IntRange(0, 64),
    help="Worker threads to run in the service's process (0: leave runs to 'ratchet worker').",
)
@with_options("db", "bindings")
@log_options
def serve_command(
    host: str, port: int, config: str | None, specs: tuple[str, ...], workers: int, how: How
) -> None:
    """Serve the operator console and the HTTP API: runs, their traces and effects, the queue,
    approve, reject and operator actions, for operators who authenticate with their token.

    \b
      /          the console in a browser: sign in with your token (queue, runs, specs)
      GET  /api/runs  /api/runs/RUN  /api/runs/RUN/trace  /api/runs/RUN/effects  /api/queue
      POST /api/runs  /api/runs/RUN/approve  /api/runs/RUN/reject  /api/runs/RUN/ops/ACTION
      POST /hooks/SENDER (signed webhooks)   GET /healthz  /readyz  /metrics

    A decision is made as the authenticated operator, in a role they hold that the spec allows,
    and recorded with the request's address; the run is then left to the workers. Create an
    operator with 'ratchet token'. The routes are in docs/reference/http-api.md.
    """
    from ..serve.run import serve

    serve(
        host=host,
        port=port,
        db=how.db,
        bindings=how.bindings,
        config=config,
        specs=specs,
        workers=workers,
        say=logging.getLogger("ratchet_runner.serve.run").info,
    )


@click.command("token")
@click.argument("name", callback=named())
@click.option(
    "--role",
    "roles",
    required=True,
    multiple=True,
    help="A role the operator holds (repeat for several).",
)
@click.option(
    "--token-file",
    metavar="FILE",
    type=click.Path(dir_okay=False, writable=True),
    help="Write the token to FILE (readable by its owner only) instead of showing it.",
)
@JSON_OPTION
def token_command(name: str, roles: tuple[str, ...], token_file: str | None, as_json: bool) -> None:
    """Make a bearer token for operator NAME of 'ratchet serve'.

    Prints the configuration entry on stdout (append it to ratchet-serve.toml: it keeps only the
    token's SHA-256) and the token itself on stderr, once, or into --token-file: give it to NAME,
    keep it nowhere else.
    """
    from ..serve.operators import config_entry, new_token, save_token
    from ..settings import MAX_NAME, name_problem

    for role in roles:
        problem = name_problem(role, MAX_NAME)
        if problem is not None:
            raise click.BadParameter(problem, param_hint="--role")
    token, digest = new_token()
    if token_file is not None:
        save_token(token_file, token)
    if as_json:
        made: dict[str, Any] = {
            "name": name,
            "roles": list(roles),
            "token": token,
            "token_sha256": digest,
        }
        if token_file is not None:  # it is in the file, and nowhere else
            made = {**made, "token": None, "token_file": token_file}
        click.echo(json.dumps(made, ensure_ascii=False))
        return
    click.echo(config_entry(name, roles, digest))
    if token_file is None:
        click.echo(f"token for {name} (shown once): {token}", err=True)
    else:
        click.echo(f"token for {name} written to {token_file}", err=True)


@click.group()
def practice() -> None:
    """The practice world: its providers served over HTTP."""


@practice.command("serve")
@listening(8765)
@JSON_OPTION
@log_options
def serve(host: str, port: int, as_json: bool) -> None:
    """Serve the practice world's providers (payments, warehouse, travel, the generic service,
    noop) as an HTTP JSON API, over the same practice database the commands use.

    \b
      POST /SERVICE/OPERATION                 JSON arguments; the operation ID in Idempotency-Key
      GET  /SERVICE/operations/OPERATION_ID   the lookup: 200 and the receipt, or 404

    Prints the URL on stdout (with --json: {"url": ..., "practice_world": ...}) once it listens;
    SIGTERM or Ctrl-C stops it. The routes, statuses and faults are in
    docs/reference/adapters.md ("The practice world over HTTP").
    """
    from ..session import Session

    with Session() as session:
        server = session.practice_server(host, port)
        shown = {"url": server.url, "practice_world": str(session.world.path)}
        click.echo(json.dumps(shown) if as_json else server.url)
        logging.getLogger("ratchet_runner.adapters.practice.http").info(
            "%s",
            f"serving the practice world {session.world.path} at {server.url}; "
            "SIGTERM or Ctrl-C stops",
        )
        server.serve_until_signalled()
    logging.getLogger("ratchet_runner.adapters.practice.http").info("stopped")


#: The commands, as :mod:`.main` adds them to the group.
COMMANDS = (worker, serve_command, token_command, practice)


# -- what a worker shows ------------------------------------------------------------------------


def pass_lines(report: PassReport) -> tuple[list[str], list[str]]:
    """``ratchet worker --once``: the lines for stdout (timers, runs) and for stderr (failures,
    the tally)."""
    out = [
        f"timer  {f.timer.event:<8} run {f.timer.run_id} ({f.outcome})" for f in report.fired
    ] + [f"run    {moved.id} -> {moved.state} ({moved.status})" for moved in report.advanced]
    err = [f"failed {run_id}: {error}" for run_id, error in report.failed]
    err += [f"left   {run_id}: {reason}" for run_id, reason in report.left]
    err.append(f"{len(report.fired)} timer(s) fired, {len(report.advanced)} run(s) advanced")
    return out, err


def pool_json(owner: str, report: PoolReport) -> Json:
    """What a worker pool did, when it stops (``ratchet worker --json``)."""
    return {
        "owner": owner,
        "runs_advanced": report.advanced,
        "fenced": report.fenced,
        "timers_fired": report.timers,
        "failed": [{"run": r, "error": e} for r, e in report.failed],
        "store_outages": report.outages,
        "store_unreachable_seconds": round(report.unreachable_seconds, 2),
        "store_unreachable": report.unreachable,
        "left_to_other_binding": report.left,
        "left_for_a_longer_lease": report.left_for_lease,
    }


def pool_line(report: PoolReport) -> str:
    outages = ""
    if report.outages:
        outages = (
            f"; the store was unreachable {report.outages} time(s), "
            f"{report.unreachable_seconds:.1f} s in all"
            + (", and still was when the worker stopped" if report.unreachable else "")
        )
    left = f", {report.left} left to a worker with their binding" if report.left else ""
    if report.left_for_lease:
        left += f", {report.left_for_lease} left to a worker with a longer --lease"
    return (
        f"stopped: {report.advanced} run(s) advanced, {report.timers} timer(s) "
        f"fired, {report.fenced} fenced{left}{outages}"
    )
