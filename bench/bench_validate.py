"""How long a 2,000-row spec takes to validate (target: under 1 s).

Baseline, measured in the same run: parsing the same file with libyaml (``yaml.CSafeLoader``),
the least any YAML validator must do. Ratchet does that and more (locations, the safety checks,
the schema, CEL compilation, every lint).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import yaml

from bench.generate import big_spec
from bench.harness import RATCHET, Row, Section, best_of, run_child

ROWS = 2000
TARGET_SECONDS = 1.0

# Measured in a fresh interpreter: the first validation, after imports, one-time set-up included.
_FIRST_CALL = """
import sys, time
from ratchet_runner.spec.validate import validate_path
start = time.perf_counter()
report = validate_path(sys.argv[1])
elapsed = time.perf_counter() - start
assert report.ok(), report.diagnostics[:3]
print(elapsed)
"""


def run(quick: bool = False) -> Section:
    from ratchet_runner.spec.expressions import compile_expression
    from ratchet_runner.spec.validate import validate_path

    section = Section.of(f"Validating a {ROWS:,}-row spec", __doc__, "libyaml parse")
    repeat = 3 if quick else 7
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.yaml"
        text = big_spec(ROWS)
        path.write_text(text, encoding="utf-8")
        parse = best_of(lambda: yaml.load(text, Loader=yaml.CSafeLoader), repeat)

        def fresh() -> None:
            compile_expression.cache_clear()
            report = validate_path(path)
            assert report.ok(), report.diagnostics[:3]

        in_process = best_of(fresh, repeat)
        first = sorted(_first_call(path) for _ in range(3 if quick else 5))[1]
        cli = sorted(run_child([RATCHET, "validate", "-q", str(path)]).seconds for _ in range(3))[1]

    section.rows = [
        Row(
            "validate_path, warm process",
            in_process,
            "s",
            parse,
            f"< {TARGET_SECONDS} s",
            in_process < TARGET_SECONDS,
        ),
        Row(
            "validate_path, first call in a new process",
            first,
            "s",
            parse,
            f"< {TARGET_SECONDS} s",
            first < TARGET_SECONDS,
        ),
        Row("`ratchet validate` end to end (interpreter start and imports too)", cli, "s", parse),
    ]
    return section


def _first_call(path: Path) -> float:
    import subprocess

    out = subprocess.run(
        [sys.executable, "-c", _FIRST_CALL, str(path)], capture_output=True, text=True, check=True
    )
    return float(out.stdout.strip())
