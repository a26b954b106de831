"""The booking saga survives a real process exit (SIGKILL) before each request, after each
request and after each receipt of each step, compensations included: no hold, confirmation or
release is ever made twice."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import ROOT

RATCHET = str(Path(sys.executable).with_name("ratchet"))
POINTS = ("before-write", "after-write", "after-receipt")
REFUSED = {"hold_flight": 1, "hold_hotel": 1, "release": 2}  # confirm_refused, to its end
HAPPY = {"hold_flight": 1, "hold_hotel": 1, "confirm": 1}
CASES = [
    *[
        ("confirm_refused", "TRIP-1003", e, p)
        for e in ("hold_flight", "hold_hotel", "release_hotel", "release_flight")
        for p in POINTS
    ],
    *[("confirm_refused", "TRIP-1003", "confirm_itinerary", p) for p in POINTS[:2]],
    *[("happy", "TRIP-1001", "confirm_itinerary", p) for p in POINTS],
]


def ratchet(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RATCHET_HOME": str(home)}
    env.pop("RATCHET_DB", None)
    return subprocess.run(
        [RATCHET, *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120
    )


def drive(home: Path, example: str, trip: str, interrupt: str) -> int:
    """Run a booking example to its end, interrupting the first command that reaches
    ``interrupt``; every later command runs without it. Returns how many processes were killed."""
    steps = [
        ["run", "specs/booking.yaml", "--example", example],
        ["approve", trip, "--as", "agent-3", "--role", "travel_agent"],
        ["resume", trip],
        ["resume", trip],
    ]
    kills = 0
    for step in steps:
        flag = ["--interrupt", interrupt] if kills == 0 else []
        done = ratchet(home, *step, *flag)
        if done.returncode == -9:
            kills += 1
            assert "interrupted at" in done.stderr
            done = ratchet(home, "resume", trip)
        assert done.returncode == 0 or "not waiting for a decision" in done.stderr, done.stderr
    return kills


@pytest.mark.slow
@pytest.mark.parametrize(("example", "trip", "effect", "point"), CASES)
def test_a_killed_process_at_any_point_of_any_step_makes_no_change_twice(
    tmp_path: Path, example: str, trip: str, effect: str, point: str
) -> None:
    home = tmp_path / "home"
    assert drive(home, example, trip, f"{point}:{effect}") == 1
    trace = json.loads(ratchet(home, "trace", trip, "--json").stdout)
    final = "released" if example == "confirm_refused" else "confirmed"
    assert (trace["state"], trace["status"]) == (final, "done")
    world = json.loads(ratchet(home, "effects", "--json").stdout)
    operations = Counter(c["operation"] for c in world["changes"])
    assert operations == (REFUSED if example == "confirm_refused" else HAPPY)
    ids = [c["operation_id"] for c in world["changes"]]
    assert len(ids) == len(set(ids))
    holds = {
        c["operation"]: c["result"]["hold_id"] for c in world["changes"] if "hold" in c["operation"]
    }
    releases = [c["args"]["hold_id"] for c in world["changes"] if c["operation"] == "release"]
    expected = [holds["hold_hotel"], holds["hold_flight"]] if example == "confirm_refused" else []
    assert releases == expected
