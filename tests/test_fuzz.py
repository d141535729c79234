"""The core's fuzz targets in the test command: core/fuzz/fuzz_core.c (the host layer,
signatures, calls) and core/fuzz/fuzz_open.c (opening exports). Built with clang's
libFuzzer, AddressSanitizer and UndefinedBehaviorSanitizer, the first runs for about a
minute and the second for a third of that, from the committed seed corpora
(core/fuzz/corpus, core/fuzz/corpus_open); any finding (a crash, a leak, undefined
behaviour, a hang, a broken promise of a target) fails the test. ``make -C core fuzz``
runs them longer.

Without clang (and its libFuzzer runtime) the test is skipped, except under CI
(``CI`` set), where that is a failure: CI installs clang first (.ci/run).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import Background

# Tooling, a minute of fuzzing: left out by `pytest -m "not slow"` (CONTRIBUTING.md).
pytestmark = pytest.mark.slow

CORE = Path(__file__).resolve().parent.parent / "core"
# TILEJIT_FUZZ_SECONDS changes how long the test command fuzzes.
FUZZ_SECONDS = int(os.environ.get("TILEJIT_FUZZ_SECONDS", "60"))


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def _clang_with_libfuzzer(tmp_path: Path) -> tuple[str | None, str]:
    """clang's path when it links a libFuzzer target, else None and why not."""
    clang = shutil.which("clang")
    if clang is None:
        return None, "clang is not installed"
    probe = tmp_path / "probe.c"
    probe.write_text("#include <stddef.h>\n#include <stdint.h>\n"
                     "int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) "
                     "{ (void)d; (void)n; return 0; }\n")
    result = subprocess.run([clang, "-fsanitize=fuzzer,address,undefined", str(probe), "-o",
                             str(tmp_path / "probe")], capture_output=True, text=True,
                            check=False, timeout=300)
    if result.returncode != 0:
        return None, f"clang cannot link a libFuzzer target:\n{result.stderr[-2000:]}"
    return clang, ""


def _require_clang(tmp_path: Path) -> str:
    """clang with libFuzzer, or a skip (a failure under CI)."""
    clang, why = _clang_with_libfuzzer(tmp_path)
    if clang is None:
        message = (f"{why}; the fuzz test needs clang with libFuzzer (Debian/Ubuntu: "
                   "apt-get install clang libclang-rt-dev)")
        if _in_ci():
            pytest.fail(message)
        pytest.skip(message)
    return clang


@pytest.mark.parametrize(("ci", "outcome"), [("true", pytest.fail.Exception),
                                             ("1", pytest.fail.Exception),
                                             ("", pytest.skip.Exception),
                                             ("false", pytest.skip.Exception)])
def test_missing_clang_fails_only_under_ci(tmp_path, monkeypatch, ci, outcome):
    monkeypatch.setenv("CI", ci)
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(outcome, match="clang is not installed"):
        _require_clang(tmp_path)


def _fuzzing(work: Path):
    """Both targets through ``make fuzz``: the core's (FUZZ_SECONDS) and opening exports
    (a third of that), new inputs into a private corpus (the committed seeds are only
    read); or why they cannot run."""
    clang, why = _clang_with_libfuzzer(work)
    if clang is None:
        return why
    if shutil.which("make") is None:
        return "make is required to build the fuzz target"
    return (["make", "-C", str(CORE), "fuzz", f"FUZZ_CC={clang}", f"FUZZ_TIME={FUZZ_SECONDS}",
             f"FUZZ_OPEN_TIME={OPEN_SECONDS}", f"FUZZ_CORPUS={work / 'corpus'}",
             f"FUZZ_OPEN_CORPUS={work / 'corpus_open'}"], None, None)


OPEN_SECONDS = max(FUZZ_SECONDS // 3, 1)
FUZZING = Background(_fuzzing, timeout=FUZZ_SECONDS + OPEN_SECONDS + 900)


@pytest.mark.background(FUZZING)
def test_fuzz_target_runs_clean(tmp_path):
    result = FUZZING.result()
    if isinstance(result, str):  # the reasons _require_clang gives, skipped or failed
        _require_clang(tmp_path)
        pytest.fail(result)
    output = result.stdout + result.stderr
    artifacts = re.findall(r"Test unit written to (\S+)", output)
    assert result.returncode == 0, (f"a fuzz target found something (input: {artifacts})\n"
                                    f"{output[-8000:]}")
    executed = re.findall(r"stat::number_of_executed_units: (\d+)", output)
    assert len(executed) == 2 and all(int(n) > 0 for n in executed), output[-3000:]
