"""The how-tos, the CLI reference and the README, followed literally: every command they show
runs, from a fresh home, and prints what they say it prints.

Each page runs in a shell of its own (``bash``, one process, so ``cd`` and ``export`` carry on
from one command to the next, as in a terminal), in a fresh folder that stands for the top of the
checkout (a copy of ``specs/``, ``examples/`` and ``tests/fixtures/``: the docs say to run from
there), with ``ratchet`` and ``python`` of this environment on ``PATH`` and no ``RATCHET_*``
variable set, so the store and the practice world are the default ones under ``.ratchet``, new.
The README is followed as a new user follows it after ``make demo``: with no ``ratchet`` on
``PATH``, and this environment as the checkout's ``.venv`` (where ``make demo`` installs it).

What runs, and what is compared:

* Every ```sh and ```console block, in page order. In a ```sh block each line is a command (a
  line ending in ``\\`` goes on on the next one; comments are the shell's); each must exit 0. In
  a ```console block, each ``$ COMMAND`` line is a command and the lines after it, up to the next
  ``$``, are what it prints (stdout and stderr as a terminal shows them, in order), compared
  whole after normalising what differs from run to run (below). It may exit non-zero only when
  what it is shown to print is a refusal (``ratchet: R...``, ``Error: R...``), a located finding
  (``FILE:LINE:COL: CODE``), an invalid verdict or an interruption, or when the next command is
  ``echo $?``, which then shows the status.
* In the expected lines, a line ``...`` (or ``…``) stands for any number of lines, and ``...``
  (or ``…``) inside a line for any text on that line.
* A command ending in ``&`` runs in the background, as in a shell: its output is compared as soon
  as it matches (at most :data:`BACKGROUND_WAIT` seconds), and the next command waits until then
  (a background command shown to print nothing is not waited for). What it prints later is not
  compared (a terminal would interleave it with the next commands' output).
* An HTML comment on the line before a block says more (``<!-- docs-test: ... -->``):
  ``skip: WHY`` — the block is not run (a command that takes minutes, or that needs a machine the
  test does not have), and WHY says so;
  ``file PATH`` — the block is a file the reader is told to write: it is written to ``PATH``
  (from the shell's current folder);
  ``second shell`` — the block runs in another terminal, in a new shell started in the first
  shell's current folder with none of its exports (a server, a worker); the page goes on once it
  has printed what the block shows. It is stopped when the page ends;
  ``output`` (or ``output, exit N``) — the block, of any language, is what the command just
  before it prints (a ```console command shown with no output of its own), and N its exit status.
* Run IDs, digests, times, durations in seconds and lease owners (``host:pid:nonce``) differ from
  run to run, and are normalised on both sides before the comparison: the docs may show any.
  The shell's own report of a command killed by a signal (bash's ``Killed``) is not compared.

Where a page cannot run as written here, :data:`SUBSTITUTIONS` says what the test runs instead,
and why (a host name, a shared environment); no ``pip install`` runs otherwise. The pages are
followed :data:`AT_ONCE` at a time, each in its own shell and folder. ``run-a-worker-pool.md``
runs against the PostgreSQL of ``RATCHET_TEST_PG`` (in a schema of its own), and is skipped
without one; it shows no output, so only its commands' exit statuses are checked.
"""

from __future__ import annotations

import contextlib
import difflib
import itertools
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import tomllib
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import ROOT, postgres_url, require_program

DOCS = ROOT / "docs"
README = ROOT / "README.md"
PAGES = [*sorted((DOCS / "how-to").glob("*.md")), DOCS / "reference" / "cli.md", README]
#: A command that draws with Graphviz's dot (an image format): its page needs it installed.
_DRAWS = re.compile(r"ratchet diagram [^\n]*(\.(svg|png|pdf)\b|--format (svg|png|pdf))")
#: What a page needs of the checkout, copied into its folder (the docs run from the checkout's top).
CHECKOUT = ("specs", "examples", "tests/fixtures")
#: How long one command may take, and how long a background command may take to print what the
#: page shows, in seconds.
COMMAND_TIMEOUT = 120.0
BACKGROUND_WAIT = 15.0
#: How many pages are followed at once (each is mostly processes starting up, and waiting).
AT_ONCE = 3
#: The ports the pages' servers listen on: ``ratchet practice serve`` by default, and the
#: embedding example's application.
PORTS = (8765, 8080)

#: ``bash`` as a terminal starts it: with Ctrl-C (SIGINT) not ignored, even when this process
#: was started with it ignored (as a background job is).
SHELL = [
    sys.executable,
    "-c",
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "os.execvp('bash', ['bash', '--noprofile', '--norc', *sys.argv[1:]])",
]

MARKER = re.compile(r"<!--\s*docs-test:\s*(.*?)\s*-->")
#: What a shown output may be when its command exits non-zero.
FAILURE_SHOWN = re.compile(
    r"^(ratchet: [A-Z]\d{3}\b|Error: [A-Z]\d{3}\b|\S+:\d+:\d+: [EWBV]\d{3}\b|interrupted at "
    r"|.*: invalid$)",
    re.M,
)
NORMALISE = [
    (re.compile(r"\brun_[0-9a-f]{16}\b"), "run_<id>"),
    (re.compile(r"\b[0-9a-f]{64}\b"), "<digest>"),
    (re.compile(r"\bdigest [0-9a-f]{12}\b"), "digest <digest>"),
    (re.compile(r"\b\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:\.\d+)?Z?"), "<time>"),
    (re.compile(r"\b[\w.-]+:\d+:[0-9a-f]{8}\b"), "<host:pid:nonce>"),
    (re.compile(r"\b\d+(?:\.\d+)? s\b"), "<n> s"),
    # a time from now, in days and hours or hours and minutes ("in 2d 23h", "in 24h 0m")
    (re.compile(r"\bin \d+[dh] \d+[hm]\b"), "in <duration>"),
]
WILDCARD = re.compile(r"\.\.\.|…")
#: The shell's own report of a command killed by a signal: each shell words it its own way.
SHELL_REPORT = re.compile(r"^bash: line \d+: +\d+ [A-Z][a-z]+(?: \(core dumped\))? +.*\n?", re.M)


def _plugin_site(sandbox: Path) -> str:
    return str(sandbox.parent / "site")


#: Per page, a command as the page shows it -> what the test runs instead, and why.
SUBSTITUTIONS: dict[str, dict[str, str]] = {
    # The page's store is a PostgreSQL the test does not have, and a binding of its own: the test
    # gives it RATCHET_TEST_PG (a schema of its own) and the shipped practice binding. The worker
    # runs on each machine until stopped: here, in the background until the page ends.
    "run-a-worker-pool.md": {
        "export RATCHET_DB=postgresql+psycopg://ratchet@db.internal:5432/ratchet": (
            "export RATCHET_DB={pg}"
        ),
        "export RATCHET_BINDINGS=/etc/ratchet/production.toml": (
            "export RATCHET_BINDINGS=$PWD/specs/practice.toml"
        ),
        "ratchet worker --concurrency 4": "ratchet worker --concurrency 4 &",
    },
    # pip would install the plugin into the environment every test shares: the test puts the
    # same package and its entry point (what pip writes) into a folder of its own on PYTHONPATH.
    # tests/integration/test_plugin.py installs the real wheel in a fresh environment.
    "write-an-adapter-plugin.md": {
        "pip install ./examples/plugin-mailer": "export PYTHONPATH={site}",
    },
}


# -- reading a page --------------------------------------------------------------------------------


@dataclass
class Command:
    """One command of a page: where it is, what it is, and what the page shows it prints (None:
    not shown, and it must exit 0)."""

    line: int
    text: str
    shown: list[str] | None = None
    checks_status: bool = False  # the next command is `echo $?`
    status: int | None = None  # the exit status an `output` marker gives

    @property
    def background(self) -> bool:
        return bool(re.search(r"(?<!&)&\s*(#.*)?$", self.text))


@dataclass
class Block:
    line: int
    kind: str  # "run", "file" or "second shell"
    commands: list[Command] = field(default_factory=list)
    path: str = ""
    body: str = ""


def _joined(lines: list[tuple[int, str]]) -> Iterator[tuple[int, str]]:
    """Lines with a trailing backslash joined to the next, as the shell reads them."""
    pending: tuple[int, str] | None = None
    for number, line in lines:
        if pending is not None:
            number, line = pending[0], pending[1] + "\n" + line
            pending = None
        if line.endswith("\\"):
            pending = (number, line)
            continue
        yield number, line
    if pending is not None:
        yield pending


def _sh_commands(start: int, body: list[str]) -> list[Command]:
    lines = [(start + i, line) for i, line in enumerate(body)]
    return [
        Command(number, text)
        for number, text in _joined(lines)
        if text.strip() and not text.lstrip().startswith("#")
    ]


def _console_commands(start: int, body: list[str]) -> list[Command]:
    commands: list[Command] = []
    continued = False
    for i, line in enumerate(body):
        if line.startswith("$ ") or continued:
            text = line[2:] if line.startswith("$ ") else line
            if continued:
                commands[-1].text += "\n" + text
            else:
                commands.append(Command(start + i, text, shown=[]))
            continued = line.endswith("\\")
        elif commands:
            assert commands[-1].shown is not None
            commands[-1].shown.append(line)
    for before, after in itertools.pairwise(commands):
        before.checks_status = after.text.strip() == "echo $?"
    return commands


def blocks(page: Path) -> list[Block]:
    """The blocks of ``page`` the test runs or writes, in order (see the module's docstring)."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found, i = [], 0
    while i < len(lines):
        if not lines[i].startswith("```"):
            i += 1
            continue
        language, start = lines[i][3:].strip(), i + 1
        end = next(j for j in range(start, len(lines)) if lines[j].startswith("```"))
        body = lines[start:end]
        i = end + 1
        before = next((line for line in reversed(lines[: start - 1]) if line.strip()), "")
        marker = MARKER.search(before)
        note = marker.group(1) if marker else ""
        if note.startswith("skip:"):
            assert note[5:].strip(), f"{page.name}:{start}: say why the block is skipped"
            continue
        if note.startswith("file "):
            found.append(Block(start, "file", path=note[5:].strip(), body="\n".join(body) + "\n"))
        elif note.startswith("output"):
            status = re.fullmatch(r"output(?:, exit (\d+))?", note)
            assert status, f"{page.name}:{start}: write `output` or `output, exit N`"
            last = found[-1].commands[-1] if found and found[-1].commands else None
            assert last is not None, f"{page.name}:{start}: output of what?"
            assert not last.shown, f"{page.name}:{start}: the command shows its output already"
            last.shown = body
            last.status = int(status.group(1)) if status.group(1) else None
        elif language in ("sh", "console"):
            assert note in ("", "second shell"), f"{page.name}:{start}: unknown marker {note!r}"
            parse = _console_commands if language == "console" else _sh_commands
            found.append(Block(start, note or "run", commands=parse(start + 1, body)))
        else:
            assert not note, f"{page.name}:{start}: a marker on a ```{language} block"
    return found


# -- comparing -------------------------------------------------------------------------------------


def normalised(text: str) -> list[str]:
    lines = [line.rstrip() for line in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    result = []
    for line in lines:
        for pattern, replacement in NORMALISE:
            line = pattern.sub(replacement, line)
        result.append(line)
    return result


def matches(shown: list[str], printed: str) -> bool:
    """Whether ``printed`` is what ``shown`` says, wildcards and normalisation included."""
    parts = []
    for line in normalised("\n".join(shown)):
        if line.strip() in ("...", "…"):
            parts.append(r"(?:[^\n]*\n)*?")
        else:
            parts.append("[^\n]*".join(re.escape(p) for p in WILDCARD.split(line)) + r"\n")
    actual = "".join(f"{line}\n" for line in normalised(printed))
    return re.fullmatch("".join(parts), actual) is not None


# -- running a page --------------------------------------------------------------------------------


class Terminal:
    """One page's shell, fed one command at a time, each command's output kept in a file."""

    def __init__(self, folder: Path, harness: Path, env: dict[str, str]) -> None:
        self.folder, self.harness, self.env = folder, harness, env
        self.count = 0
        self.others: list[subprocess.Popen[bytes]] = []
        with (harness / "shell.err").open("wb") as errors:
            self.shell = subprocess.Popen(
                SHELL,
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=errors,
                cwd=folder,
                env=env,
                start_new_session=True,
            )

    def run(self, text: str) -> tuple[int, Path]:
        """Run ``text`` in the shell: its exit status, and the file its output goes to."""
        self.count += 1
        out, status = self.harness / f"out.{self.count}", self.harness / f"rc.{self.count}"
        script = (
            f"{{ {text}\n}} > {out} 2>&1 < /dev/null\n"
            f"__rc=$?; pwd > {self.harness}/cwd; echo $__rc > {status}.tmp; "
            f"mv {status}.tmp {status}; (exit $__rc)\n"
        )
        assert self.shell.stdin is not None
        self.shell.stdin.write(script.encode("utf-8"))
        self.shell.stdin.flush()
        deadline = time.monotonic() + COMMAND_TIMEOUT
        while not status.exists():
            if self.shell.poll() is not None:
                raise AssertionError(f"the shell ended ({self.shell.returncode}) at {text!r}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{text!r} did not end in {COMMAND_TIMEOUT:.0f} s")
            time.sleep(0.02)
        return int(status.read_text()), out

    @property
    def cwd(self) -> Path:
        saved = self.harness / "cwd"
        return Path(saved.read_text().strip()) if saved.exists() else self.folder

    def second_shell(self, commands: list[str]) -> Path:
        """Start ``commands`` in a new shell in the current folder: the file its output goes to."""
        self.count += 1
        out = self.harness / f"out.{self.count}"
        with out.open("wb") as sink:
            self.others.append(
                subprocess.Popen(
                    [*SHELL, "-c", "\n".join(commands)],
                    stdin=subprocess.DEVNULL,
                    stdout=sink,
                    stderr=subprocess.STDOUT,
                    cwd=self.cwd,
                    env=self.env,
                    start_new_session=True,
                )
            )
        return out

    def close(self) -> None:
        processes = [self.shell, *self.others]
        if self.shell.stdin is not None:
            self.shell.stdin.close()
        for process in processes:
            _signal_group(process, signal.SIGTERM)
        deadline = time.monotonic() + 5
        for process in processes:
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(process, signal.SIGKILL)
                process.wait()


def _signal_group(process: subprocess.Popen[bytes], signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signum)


def _wait_for(out: Path, shown: list[str]) -> str:
    """What a background command printed, once it is what ``shown`` says (or time is up)."""
    deadline = time.monotonic() + BACKGROUND_WAIT
    while True:
        printed = out.read_text(encoding="utf-8", errors="replace") if out.exists() else ""
        if matches(shown, printed) or time.monotonic() > deadline:
            return printed
        time.sleep(0.05)


def _where(page: Path, command: Command) -> str:
    shown = page.relative_to(ROOT) if page.is_relative_to(ROOT) else page
    return f"{shown}:{command.line}: $ {command.text}"


def _compare(page: Path, command: Command, printed: str) -> None:
    assert command.shown is not None
    if not matches(command.shown, printed):
        diff = difflib.unified_diff(
            normalised("\n".join(command.shown)),
            normalised(printed),
            "shown",
            "printed",
            lineterm="",
        )
        raise AssertionError(f"{_where(page, command)}\n" + "\n".join(diff))


def _check_status(page: Path, command: Command, status: int, printed: str) -> None:
    if command.status is not None:
        assert status == command.status, f"{_where(page, command)}\nexited {status}:\n{printed}"
        return
    if status == 0 or command.checks_status:
        return
    shown = "\n".join(command.shown or [])
    if command.shown is not None and FAILURE_SHOWN.search(shown):
        return
    raise AssertionError(f"{_where(page, command)}\nexited {status}:\n{printed}")


def _substituted(page: Path, text: str, values: dict[str, str]) -> str:
    for written, instead in SUBSTITUTIONS.get(page.name, {}).items():
        if text.split("#")[0].strip() == written:
            return instead.format(**values)
    # never into the environment the tests share, whatever a page comes to say
    assert not re.match(r"\s*(python3? -m )?pip3? install", text), f"{page.name}: {text}"
    return text


def follow(page: Path, folder: Path, values: dict[str, str], on_path: bool = True) -> None:
    """Run every block of ``page`` in ``folder`` as a reader would, checking what each shows:
    with this environment's ``ratchet`` on ``PATH``, or (``on_path`` false) with none."""
    harness = folder.parent / "harness"
    harness.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RATCHET_")}
    path = env.get("PATH", "").split(os.pathsep)
    if on_path:
        path.insert(0, str(Path(sys.executable).parent))
    else:
        path = [entry for entry in path if not (Path(entry or ".") / "ratchet").exists()]
    env.update(PATH=os.pathsep.join(path), PYTHONUNBUFFERED="1", LC_ALL="C.UTF-8")
    env.pop("PYTHONPATH", None)
    terminal = Terminal(folder, harness, env)
    try:
        for block in blocks(page):
            if block.kind == "file":
                (terminal.cwd / block.path).write_text(block.body, encoding="utf-8")
            elif block.kind == "second shell":
                out = terminal.second_shell([c.text for c in block.commands])
                shown = [line for c in block.commands for line in c.shown or []]
                if shown:
                    last = block.commands[-1]
                    _compare(page, Command(last.line, last.text, shown), _wait_for(out, shown))
            else:
                for command in block.commands:
                    status, out = terminal.run(_substituted(page, command.text, values))
                    if command.background:
                        printed = _wait_for(out, command.shown or [])
                    else:
                        printed = out.read_text(encoding="utf-8", errors="replace")
                        printed = SHELL_REPORT.sub("", printed)
                    _check_status(page, command, status, printed)
                    if command.shown is not None:
                        _compare(page, command, printed)
    finally:
        terminal.close()


# -- what a page needs -----------------------------------------------------------------------------


def _checkout(folder: Path) -> None:
    """The parts of the checkout the pages use, copied (the pages write into them)."""
    for name in CHECKOUT:
        shutil.copytree(
            ROOT / name,
            folder / name,
            ignore=shutil.ignore_patterns("__pycache__", ".ratchet", "*.db", "build", "*.egg-info"),
        )


def _tutorial_draft(folder: Path) -> None:
    """``scratch/return_label.yaml`` as the tutorial's step 6 leaves it (the CLI reference shows
    what ``validate`` says of it)."""
    tutorial = (DOCS / "tutorial" / "01-your-first-spec.md").read_text(encoding="utf-8")
    draft = re.search(r"<!-- ratchet-spec: invalid[^>]*-->\n```yaml\n(.*?)```", tutorial, re.S)
    assert draft is not None
    (folder / "scratch").mkdir()
    (folder / "scratch" / "return_label.yaml").write_text(draft.group(1), encoding="utf-8")


def _install_plugin(site: Path) -> None:
    """What ``pip install ./examples/plugin-mailer`` puts in site-packages: the package, and its
    distribution's metadata with the entry point that registers the adapter kind."""
    plugin = ROOT / "examples" / "plugin-mailer"
    project = tomllib.loads((plugin / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    shutil.copytree(
        plugin / "ratchet_mailer",
        site / "ratchet_mailer",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    info = site / f"ratchet_mailer-{project['version']}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n",
        encoding="utf-8",
    )
    points = project["entry-points"]
    (info / "entry_points.txt").write_text(
        "".join(
            f"[{group}]\n" + "".join(f"{name} = {target}\n" for name, target in entries.items())
            for group, entries in points.items()
        ),
        encoding="utf-8",
    )


def _port_free(port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _param(page: Path) -> object:
    marks = [pytest.mark.postgres] if page.name == "run-a-worker-pool.md" else []
    shown = page.relative_to(DOCS) if page.is_relative_to(DOCS) else page.relative_to(ROOT)
    return pytest.param(page, id=str(shown), marks=marks)


_PORT_LOCKS = {port: threading.Lock() for port in PORTS}


def _follow_page(page: Path, place: Path) -> float:
    """Follow ``page`` in a fresh checkout under ``place``: how long it took, in seconds."""
    began = time.monotonic()
    if _DRAWS.search(page.read_text(encoding="utf-8")):
        require_program("dot")
    folder = place / "checkout"
    folder.mkdir()
    _checkout(folder)
    values = {"site": _plugin_site(folder), "pg": ""}
    if page.name == "cli.md":
        _tutorial_draft(folder)
    if page.name == "write-an-adapter-plugin.md":
        _install_plugin(Path(values["site"]))
    if page.name == "run-a-worker-pool.md":
        values["pg"] = f"'{postgres_url()}'"
    if page == README:  # after `make demo`: the environment in .venv, and no ratchet on PATH
        if sys.prefix == sys.base_prefix:
            pytest.skip("the README runs what `make demo` installs in .venv: run in a venv")
        (folder / ".venv").symlink_to(sys.prefix, target_is_directory=True)
    text = page.read_text(encoding="utf-8")
    ports = [port for port in PORTS if f":{port}" in text]
    with contextlib.ExitStack() as held:  # one page at a time on a port
        for port in ports:
            held.enter_context(_PORT_LOCKS[port])
            # The page before on this port may leave its server a moment after its shell.
            deadline = time.monotonic() + 10
            while not _port_free(port) and time.monotonic() < deadline:
                time.sleep(0.1)
            if not _port_free(port):
                pytest.skip(f"port {port}, which the page uses, is taken")
        follow(page, folder, values, on_path=page != README)
    return time.monotonic() - began


@pytest.fixture(scope="module")
def followed(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[Path, Future[float]]]:
    """Every page the session's tests ask for, followed :data:`AT_ONCE` at a time (each in its
    own shell and folder), the slowest first: each test waits for its own."""
    wanted = [
        item.callspec.params["page"]
        for item in request.session.items
        if isinstance(item, pytest.Function)
        and item.originalname == "test_the_page_runs_as_written_and_shows_what_it_prints"
    ]
    wanted.sort(key=lambda page: -sum(len(b.commands) for b in blocks(page)))
    with ThreadPoolExecutor(AT_ONCE) as pool:
        futures = {
            page: pool.submit(_follow_page, page, tmp_path_factory.mktemp(page.stem))
            for page in wanted
        }
        try:
            yield futures
        finally:
            for future in futures.values():
                future.cancel()


@pytest.mark.parametrize("page", [_param(page) for page in PAGES])
def test_the_page_runs_as_written_and_shows_what_it_prints(
    page: Path, followed: dict[Path, Future[float]]
) -> None:
    followed[page].result()


# -- the conventions themselves ------------------------------------------------------------------


def test_every_substitution_is_for_a_command_its_page_shows() -> None:
    for name, substitutions in SUBSTITUTIONS.items():
        [page] = [page for page in PAGES if page.name == name]
        shown = {c.text.split("#")[0].strip() for b in blocks(page) for c in b.commands}
        assert set(substitutions) <= shown, name


def test_every_page_runs_at_least_one_command() -> None:
    for page in PAGES:
        assert any(b.commands for b in blocks(page)), page.name


def test_the_comparison_takes_wildcards_and_normalises_what_differs_between_runs() -> None:
    printed = (
        "run run_f016f8867aa74658 · refund T-90104 · proposed (waiting)\n"
        "  v2   leased     by ratchet approve db1:4242:9f3a21c0\n"
        "  until 2026-12-03 03:59:41Z · digest b836840de0cc · wait 0.527 s\n"
        "one\ntwo\n"
    )
    shown = [
        "run run_0123456789abcdef · refund T-90104 · proposed (waiting)",
        "  v2   leased     by ratchet approve vm:1:00000000",
        "  until 2030-01-01 00:00:00Z · digest 000000000000 · wait 1 s",
        "...",
    ]
    assert matches(shown, printed)
    assert matches([*shown[:3], "one", "t…"], printed)
    assert not matches([*shown[:3], "one"], printed)  # the whole output, not a prefix
    assert not matches([*shown[:2], "  until … · digest 000000000000 · wait 2 ms", "..."], printed)
    assert not matches(["run run_0123456789abcdef · refund T-90105 ...", "..."], printed)


def test_a_command_may_fail_only_where_the_page_shows_it_failing() -> None:
    page = PAGES[0]
    refused = Command(1, "ratchet approve X", shown=["ratchet: R302 no run ..."])
    _check_status(page, refused, 1, "")
    with pytest.raises(AssertionError, match="exited 1"):
        _check_status(page, Command(1, "ratchet runs", shown=["no runs"]), 1, "")
    with pytest.raises(AssertionError, match="exited 1"):
        _check_status(page, Command(1, "ratchet runs"), 1, "")


def _follow_text(tmp_path: Path, text: str) -> None:
    page = tmp_path / "page.md"
    page.write_text(text, encoding="utf-8")
    folder = tmp_path / "checkout"
    folder.mkdir()
    follow(page, folder, {})


SHELL_PAGE = """
<!-- docs-test: file note.txt -->
```text
hello
```

```console
$ mkdir sub && cd sub
$ pwd
…/checkout/sub
$ cat ../note.txt
hello
$ export X=1
$ echo "$X" && echo oops >&2
1
oops
$ false
$ echo $?
1
$ (sleep 0.3; echo late) &
late
```

<!-- docs-test: skip: it would fail -->
```sh
false
```

<!-- docs-test: second shell -->
```console
$ echo "X is ${X:-unset} in $(basename "$PWD")"
X is unset in sub
```
"""


def test_a_page_runs_in_one_shell_with_files_background_and_second_shells(tmp_path: Path) -> None:
    _follow_text(tmp_path, SHELL_PAGE)


@pytest.mark.parametrize(
    ("wrong", "right"),
    [
        ("hello\n```\n\n```console", "hellO\n```\n\n```console"),  # a file's text
        ("1\noops\n$ false", "1\n$ false"),  # a line left out
        ("$ echo $?\n1", "$ echo $?\n0"),  # the status
        ("late\n```", "early\n```"),  # a background command's output
        ("X is unset", "X is 1"),  # the second shell has the first one's exports
        ("skip: it would fail -->", "-->"),  # a command that fails in a ```sh block
    ],
)
def test_a_page_whose_commands_do_not_do_what_it_says_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, wrong: str, right: str
) -> None:
    monkeypatch.setitem(globals(), "BACKGROUND_WAIT", 1.0)  # what never comes, sooner
    assert wrong in SHELL_PAGE
    with pytest.raises(AssertionError):
        _follow_text(tmp_path, SHELL_PAGE.replace(wrong, right))
