"""The C core's own test suite (core/tests), plain and under AddressSanitizer.

The C tests need no Python; running them from pytest keeps one test command.
"""

import shutil
import subprocess
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parent.parent / "core"


# The sanitizer build is slow: left out by `pytest -m "not slow"` (CONTRIBUTING.md).
@pytest.mark.parametrize("target", ["test", pytest.param("asan", marks=pytest.mark.slow)])
def test_core(target):
    if shutil.which("make") is None:
        pytest.fail("make is required to build the C tests")
    result = subprocess.run(["make", "-C", str(CORE), target], check=False, capture_output=True,
                            text=True, timeout=600)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    last = [line for line in output.splitlines() if " passed, " in line]
    assert last and last[-1].endswith(" 0 failed"), output[-3000:]
