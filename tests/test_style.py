"""Formatting and lint checks the project holds itself to (CONTRIBUTING.md)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# Tooling, formatters and linters: left out by `pytest -m "not slow"` (CONTRIBUTING.md).
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent


def _run(cmd):
    result = subprocess.run(cmd, check=False, cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, f"{' '.join(map(str, cmd))}\n{result.stdout}\n{result.stderr}"


def _tool(name):
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed: pip install -e '.[test]' installs it")
    return path


def test_ruff():
    _run([sys.executable, "-m", "ruff", "check", "tilejit", "build_tools", "tests"])


def test_cython_lint():
    _run([_tool("cython-lint"), "--max-line-length", "100",
          *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "wrapper").glob("*.p*"))])


def test_clang_format():
    sources = sorted(str(p.relative_to(ROOT)) for pattern in
                     ("core/src/*.[ch]", "core/include/tilejit/*.h", "core/tests/*.[ch]",
                      "core/fuzz/*.c")
                     for p in ROOT.glob(pattern))
    _run([_tool("clang-format"), "--dry-run", "-Werror", *sources])
