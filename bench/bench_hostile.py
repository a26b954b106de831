"""Every file of the hostile corpus is rejected quickly and in little memory (target: < 2 s and
< 200 MB each, end to end). Baseline, measured in the same run: ``ratchet --version``, the cost of
starting the command at all."""

from __future__ import annotations

from bench.harness import RATCHET, ROOT, Row, Section, run_child

CORPUS = ROOT / "tests" / "corpus"
TARGET_SECONDS = 2.0
TARGET_MB = 200.0


def run(quick: bool = False) -> Section:
    section = Section(
        "Rejecting hostile specs",
        "Each file of `tests/corpus/`, validated by the `ratchet` command in its own process.",
        baseline_name="`ratchet --version`",
    )
    start = run_child([RATCHET, "--version"])
    files = sorted(p for p in CORPUS.iterdir() if p.is_file())
    worst_time: tuple[float, str] = (0.0, "")
    worst_rss: tuple[float, str] = (0.0, "")
    failures = []
    for path in files:
        child = run_child([RATCHET, "validate", "-q", str(path)])
        if child.returncode != 1 or "Traceback" in child.stderr:
            failures.append(path.name)
        worst_time = max(worst_time, (child.seconds, path.name))
        worst_rss = max(worst_rss, (child.max_rss_mb, path.name))
    section.rows = [
        Row(
            f"slowest of {len(files)} files ({worst_time[1]})",
            worst_time[0],
            "s",
            start.seconds,
            f"< {TARGET_SECONDS} s",
            worst_time[0] < TARGET_SECONDS,
        ),
        Row(
            f"largest peak RSS ({worst_rss[1]})",
            worst_rss[0],
            "MB",
            start.max_rss_mb,
            f"< {TARGET_MB:.0f} MB",
            worst_rss[0] < TARGET_MB,
        ),
        Row(
            "files not rejected cleanly (exit 1, no traceback)",
            float(len(failures)),
            "files",
            None,
            "0",
            not failures,
        ),
    ]
    return section
