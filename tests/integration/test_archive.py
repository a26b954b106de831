"""``ratchet prune --archive`` and ``ratchet archive verify | show``: the pruned runs' histories
kept as compressed, chained JSONL. A trace shown from the archive alone is the trace the store
showed before the prune; changing, removing, inserting or moving any one line fails ``verify``
and names the line; a write cut off by a crash is cut away by the next prune, whose chain goes
on."""

from __future__ import annotations

import gzip
import json
import time
from pathlib import Path
from typing import Any

import pytest

from ratchet_runner.adapters.practice import PracticeWorld
from ratchet_runner.clock import FakeClock
from ratchet_runner.evolve.archive import Writer, members, verify
from ratchet_runner.evolve.history import export_runs
from ratchet_runner.review import trace as traces
from ratchet_runner.store.store import Store
from tests.conftest import MakeRunner, run_cli
from tests.integration.test_prune import DAY, refunds


def lines_of(path: Path) -> list[bytes]:
    with gzip.open(path, "rb") as file:
        return [line for line in file.read().split(b"\n") if line]


def rewrite(path: Path, lines: list[bytes]) -> None:
    path.write_bytes(gzip.compress(b"\n".join(lines) + b"\n"))


@pytest.fixture
def archived(
    make_runner: MakeRunner,
    world: PracticeWorld,
    store: Store,
    store_url: str,
    clock: FakeClock,
    tmp_path: Path,
    capsys: Any,
) -> tuple[Path, dict[str, list[str]], Store]:
    """Three refunds done and pruned with --archive (a batch each): the archive, and each
    run's trace before the prune."""
    clock.advance(time.time() - DAY - clock.now())  # the runs finished yesterday
    done = refunds(make_runner, world, range(7401, 7404))
    before = {rid: traces.lines(store.get_run(rid), store.history(rid)) for rid in done.values()}
    archive = tmp_path / "pruned.jsonl.gz"
    code, out, err = run_cli(
        capsys,
        "prune",
        "--finished-before",
        "0s",
        "--batch",
        "1",
        "--archive",
        str(archive),
        "--db",
        store_url,
    )
    assert code == 0, err
    assert out.startswith("pruned 3 run(s)")
    return archive, before, store


def test_a_trace_from_the_archive_alone_is_the_one_the_store_showed_before_the_prune(
    archived: tuple[Path, dict[str, list[str]], Store], capsys: Any
) -> None:
    archive, before, store = archived
    # the opening, a member per batch, and the close
    assert len(list(members(archive.read_bytes()))) == 5
    code, out, _ = run_cli(capsys, "archive", "verify", str(archive))
    assert (code, out.strip()) == (0, f"{archive}: 3 run history(ies), 1 prune(s) closed")
    for run_id, lines in before.items():
        code, out, _ = run_cli(capsys, "archive", "show", str(archive), run_id)
        assert out.splitlines()[1:] == lines[1:]  # every event, as the store showed it
        assert [e.kind for e in store.history(run_id)] == ["pruned"]
        assert str(archive) in store.history(run_id)[0].data["archive"]
    key = store.get_run(next(iter(before))).business_key
    assert run_cli(capsys, "archive", "show", str(archive), key)[0] == 0
    code, _out, err = run_cli(capsys, "archive", "show", str(archive), "T-0")
    assert (code, "holds no run 'T-0'" in err) == (1, True)


@pytest.mark.parametrize("how", ["changed", "removed", "inserted", "moved"])
def test_tampering_with_any_one_line_fails_verify_and_names_the_line(
    archived: tuple[Path, dict[str, list[str]], Store], how: str, capsys: Any
) -> None:
    archive, _before, _store = archived
    original = lines_of(archive)
    assert len(original) == 5  # opened, three histories, closed
    for index in range(len(original)):
        lines = list(original)
        if how == "changed":
            lines[index] = lines[index].replace(b"}", b"} ", 1)  # one byte more
        elif how == "removed":
            del lines[index]
        elif how == "inserted":
            lines.insert(index, original[(index + 1) % len(original)])
        elif index + 1 < len(lines):  # moved: swapped with the next
            lines[index], lines[index + 1] = lines[index + 1], lines[index]
        else:
            continue
        rewrite(archive, lines)
        found = verify(archive)
        assert not found.ok, (how, index)
        named = " ".join(found.problems)
        assert f":{index + 1}:" in named or f":{index + 2}:" in named, (how, index, named)
        code, _out, err = run_cli(capsys, "archive", "verify", str(archive))
        assert code == 1
        assert "ratchet:" in err


def test_a_write_cut_off_by_a_crash_is_cut_away_and_the_next_prune_goes_on(
    archived: tuple[Path, dict[str, list[str]], Store],
    make_runner: MakeRunner,
    world: PracticeWorld,
    capsys: Any,
) -> None:
    archive, before, store = archived
    # an export names a pruned run's archive; it never exports the tombstone as a history
    code, _out, err = run_cli(capsys, "export", next(iter(before)), "-o", "-", "--db", store.url)
    assert (code, f"its history is in {archive}" in err) == (1, True)
    fresh = list(refunds(make_runner, world, range(7411, 7413)).values())
    writer = Writer.open(archive)
    writer.write(export_runs(store, fresh[:1]))  # a batch whose process then died ...
    raw = archive.read_bytes()
    archive.write_bytes(raw[: len(raw) - 7])  # ... while its member was being written
    found = verify(archive)  # its prune never closed: said, with where it opened
    assert (found.ok, found.cut, found.histories) == (False, True, 3)
    assert "ends inside the prune opened at line 6" in found.problems[0]
    again = Writer.open(archive)  # the next prune: the cut member goes, the chain goes on
    again.write(export_runs(store, fresh[1:]))
    again.close()
    found = verify(archive)
    # the stopped prune closed as stopped, then the next one's opening, history and close
    assert (found.ok, found.cut, found.histories, found.closed) == (True, False, 4, 3)
    lines = [json.loads(line) for line in lines_of(archive)]
    assert "closed" in lines[-1]


def test_a_prune_cut_whole_from_the_end_is_found_against_the_store(
    archived: tuple[Path, dict[str, list[str]], Store],
    make_runner: MakeRunner,
    world: PracticeWorld,
    store_url: str,
    capsys: Any,
) -> None:
    """A second prune goes on the same archive; cutting it whole from the file's end leaves a
    whole chain (the archive alone cannot tell), but the store's tombstones name the archive
    their runs went to, and ``verify --db`` finds the runs missing."""
    archive, _before, _store = archived
    first = lines_of(archive)
    refunds(make_runner, world, range(7404, 7406))
    assert (
        run_cli(
            capsys, "prune", "--finished-before", "0s", "--archive", str(archive), "--db", store_url
        )[0]
        == 0
    )
    code, out, _ = run_cli(capsys, "archive", "verify", str(archive), "--db", store_url)
    assert (code, out.strip()) == (
        0,
        f"{archive}: 5 run history(ies), 2 prune(s) closed; 5 tombstone(s) in the store name it",
    )
    rewrite(archive, first)  # the second prune cut from the end: the chain is still whole
    assert verify(archive).ok
    code, out, err = run_cli(capsys, "archive", "verify", str(archive), "--db", store_url, "--json")
    assert code == 1
    found = json.loads(out)
    assert found["tombstones_naming_it"] == 5
    said = "2 pruned run(s) whose tombstones name this archive are not in it"
    assert said in found["problems"][0]
    code, _out, err = run_cli(capsys, "archive", "verify", str(archive), "--db", store_url)
    assert code == 1
    assert "the prunes that wrote them were cut from its end" in err


@pytest.mark.parametrize("what", ["a store", "text", "a gzip of something else"])
def test_prune_refuses_an_archive_file_that_is_not_one_and_leaves_it_whole(
    make_runner: MakeRunner,
    world: PracticeWorld,
    store: Store,
    store_url: str,
    clock: FakeClock,
    tmp_path: Path,
    capsys: Any,
    what: str,
) -> None:
    """Pruning with ``--archive`` naming a file that is not an archive (a backup of the store,
    a text file, another gzip) is refused before anything is pruned, and the file is left as it
    was; ``archive verify`` says it is not an archive (it said "ok" before)."""
    clock.advance(time.time() - DAY - clock.now())
    done = refunds(make_runner, world, range(7501, 7503))
    target = tmp_path / "not-an-archive"
    if what == "a store":
        target.write_bytes(b"SQLite format 3\x00" + bytes(4096))
    elif what == "text":
        target.write_text("my notes\n", encoding="utf-8")
    else:
        target.write_bytes(gzip.compress(b'{"hello": "world"}\n'))
    before = target.read_bytes()
    code, _out, err = run_cli(
        capsys, "prune", "--finished-before", "0s", "--archive", str(target), "--db", store_url
    )
    assert code == 1
    assert "R200" in err
    assert "is not an archive of ratchet prune" in err
    assert "nothing was pruned" in err
    assert target.read_bytes() == before
    assert all(store.get_run(rid).context.get("pruned") is None for rid in done.values())
    code, _out, err = run_cli(capsys, "archive", "verify", str(target))
    assert code == 1
    said = "the first line does not start the chain" if what.startswith("a gzip") else "not gzip"
    assert said in err


def test_prune_into_a_folder_that_does_not_exist_says_so_and_prunes_nothing(
    make_runner: MakeRunner,
    world: PracticeWorld,
    store: Store,
    store_url: str,
    clock: FakeClock,
    tmp_path: Path,
    capsys: Any,
) -> None:
    clock.advance(time.time() - DAY - clock.now())
    done = refunds(make_runner, world, range(7601, 7602))
    for target in (tmp_path / "no-such-folder" / "x.jsonl.gz", tmp_path):
        code, _out, err = run_cli(
            capsys, "prune", "--finished-before", "0s", "--archive", str(target), "--db", store_url
        )
        assert code == 1, err
        assert "internal error" not in err
        assert "ratchet:" in err
    assert all(store.get_run(rid).context.get("pruned") is None for rid in done.values())
