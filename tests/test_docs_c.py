"""The pages' C, C++ and shell examples (README.md, docs/*.md) run as a reader runs them,
by the conventions in _markdown: in a directory whose path has a space, with a C compiler
(`cc`) and a `python` that imports this checkout's tilejit. For each page with such
examples, its Python examples run in order up to its last shell example (printing what a
reader copies from), its C programs are saved under the names its shell lines compile,
its shell lines run in one shell (the `cc` on PATH adds warnings as errors and
AddressSanitizer with UndefinedBehaviorSanitizer, where the compiler has them), and what
each prints is compared with the ```text block after it; every program a shell block runs
runs again from `/`. Blocks marked no-run are checked, not run: their shell syntax, and
the tilejit commands, options, files and extras they name."""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from _markdown import Block, code_blocks, matches, run_block
from conftest import subprocess_env

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SOURCES = ("c", "cpp")

# The shell blocks that are not run, by page and first line, and why.
NOT_RUN = {
    ("README.md", 'pip install torch==2.13.0 . && python -m tilejit demo'):
        "installs tilejit and torch from the network",
    ("README.md", 'pip install torch==2.13.0 -e ".[test]" && python -m pytest'):
        "installs the test extra, then runs the whole suite (25 minutes)",
    ("README.md", "bash .ci/torch-range"): "downloads 3 GB of torch wheels per release",
    ("README.md", 'pip install ".[jax]" && python -m tilejit demo'):
        "installs tilejit and JAX from the network; .ci/run runs it in a venv without torch",
    ("README.md", 'pip install -e ".[jax]" pytest && python -m pytest tests/test_jax.py'):
        "installs JAX from the network; .ci/run runs it in a venv without torch",
    ("docs/cli.md", "python -m tilejit demo"):
        "compiles and runs every demo kernel; --target cuda needs a GPU, --tilelang TileLang",
    ("docs/cli.md", 'pip install -e ".[bench]"'):
        "installs the bench extra; the bench runs for minutes",
    ("docs/cli.md", ("python -m tilejit bench --target cuda        # on a machine with a "
                     "GPU and a CUDA build of torch")):
        "needs a GPU; the fake driver's run takes minutes",
    ("docs/cupy.md", ('pip install "tilejit[cupy]"   # or the CuPy wheel of your CUDA: '
                      'cupy-cuda12x, cupy-cuda13x')):
        "installs a package (CuPy's wheel for a CUDA, of no use without a GPU)",
    ("docs/gpu-check.md", (".ci/gpu gpu-check-out     # or: python -m tilejit gpu-check "
                           "gpu-check-out (needs a GPU)")):
        "needs a GPU and 8 minutes; tests/test_gpu_check.py runs its dry run",
    ("docs/jax.md", ('pip install "tilejit[jax]"      # jax[cpu] (JAX\'s CPU build), and '
                     'what jax.export needs')):
        "installs a package",
    ("docs/tilelang.md", 'pip install torch==2.13.0 "tilejit[tilelang]"'): "installs packages",
    ("docs/torch-compile.md",
     "g++ -std=c++20 run_model.cpp -I$T/include -I$T/include/torch/csrc/api/include \\"):
        "builds against libtorch's C++ API for minutes; tests/test_torch_native.py (slow) "
        "builds the page's loader and runs it on an AOTInductor package",
}


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _blocks(path: Path) -> list[Block]:
    return code_blocks(path.read_text(), None)


def _runnable(block: Block) -> bool:
    return block.language in (*SOURCES, "sh") and not block.no_run


RUN_PAGES = [p for p in PAGES if any(_runnable(b) for b in _blocks(p))]


def _source_name(blocks: list[Block], i: int) -> tuple[str, Block]:
    """The file a reader saves C or C++ block ``i`` as: the one the next shell block
    compiles, and that block."""
    for block in blocks[i + 1:]:
        if block.language == "sh":
            found = re.search(r"(?<![\w./-])([\w-]+\.(?:c|cpp|cc))(?![\w.])", block.code)
            assert found, f"line {block.line}: compiles no file for the block at line " \
                          f"{blocks[i].line}"
            return found.group(1), block
    raise AssertionError(f"no shell block compiles the block at line {blocks[i].line}")


def _expected(blocks: list[Block], i: int) -> str | None:
    """What shell block ``i`` prints: the ```text block right after it."""
    if i + 1 < len(blocks) and blocks[i + 1].language == "text":
        return blocks[i + 1].code.rstrip("\n")
    return None


def _commands(code: str) -> list[str]:
    """The command lines of a shell block, continuation lines joined."""
    return [line.strip() for line in code.replace("\\\n", " ").splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


_PLACEHOLDER = re.compile(r'^(\w+)="([^"]+)"[ \t]+#.*\bprinted\b.*$', re.MULTILINE)


def _substituted(code: str, printed: list[str], where: str) -> str:
    """``code`` with each placeholder assignment given the value the page printed."""
    def value(match: re.Match) -> str:
        tail = match.group(2).rstrip("/").rsplit("/", 1)[-1]
        copied = [line for line in printed if line.rstrip("/").endswith("/" + tail)]
        assert copied, f"{where}: {match.group(1)}: the page printed no path ending " \
                       f"/{tail} to copy ({printed})"
        return f"{match.group(1)}={shlex.quote(copied[-1])}"
    return _PLACEHOLDER.sub(value, code)


def _assignments(code: str) -> list[str]:
    """The variable assignments of a shell block (a later block's shell has them)."""
    return [line for line in code.splitlines() if re.match(r"^\w+=\S", line)]


def _from_elsewhere(command: str, work: Path) -> str | None:
    """``command`` run from another directory, if it runs a program built in ``work``:
    the program and the paths of ``work`` it names made absolute."""
    words = command.split()
    program = work / words[0]
    if "$" in words[0] or not program.is_file() or not os.access(program, os.X_OK):
        return None
    absolute = [shlex.quote(str(program))]
    for word in words[1:]:
        if re.fullmatch(r"[\w./-]+", word) and (work / word).exists():
            word = shlex.quote(str(work / word))
        absolute.append(word)
    return " ".join(absolute)


def _strict_cc(bin_dir: Path, work: Path) -> None:
    """A `cc` for the reader's shell: the system's, with warnings as errors and, where it
    has them, AddressSanitizer and UndefinedBehaviorSanitizer."""
    probe = work.parent / "probe.c"
    probe.write_text("int main(void) { return 0; }\n")
    sanitize = "-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
    done = subprocess.run(["cc", *sanitize.split(), str(probe), "-o", str(probe) + ".out"],
                          capture_output=True, check=False)
    flags = "-Wall -Wextra -Werror" + (f" {sanitize}" if done.returncode == 0 else "")
    (bin_dir / "cc").write_text(f'#!/bin/sh\nexec {shutil.which("cc")} {flags} "$@"\n')
    (bin_dir / "cc").chmod(0o755)


def _shell(script: str, cwd: Path | str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-e", "-c", script], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300, check=False)


@pytest.mark.parametrize("path", RUN_PAGES, ids=_name)
def test_examples_run_as_written(path, tmp_path, monkeypatch):
    if shutil.which("cc") is None:
        pytest.skip("no C compiler (cc): the pages' C examples are built with one")
    blocks = _blocks(path)
    last = max(i for i, b in enumerate(blocks) if _runnable(b))
    python = "\n".join(b.code for b in blocks[:last] if b.language == "python")
    if re.search(r"^\s*(?:import|from) torch\b", python, re.MULTILINE):
        pytest.importorskip("torch", exc_type=ImportError)
    # The reader's directory, with a space; the examples' temporary directories in it.
    work = tmp_path / "docs reader"
    work.mkdir()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # `python` in the reader's shell is this interpreter, run by its own path: a symlink
    # elsewhere would lose the venv it belongs to (Python finds pyvenv.cfg beside it).
    shim = bin_dir / "python"
    shim.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n')
    shim.chmod(0o755)
    _strict_cc(bin_dir, work)
    env = subprocess_env(PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.chdir(work)
    monkeypatch.setattr(tempfile, "tempdir", str(work))
    namespace: dict = {"__name__": f"docs.{path.stem}"}
    printed: list[str] = []
    assigned: list[str] = []
    elsewhere_runs = 0
    for i, block in enumerate(blocks[:last + 1]):
        where = f"{_name(path)}, line {block.line}"
        if block.language == "python":
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                run_block(block, _name(path), namespace)
            printed += out.getvalue().splitlines()
        elif block.language in SOURCES and not block.no_run:
            name, _ = _source_name(blocks, i)
            (work / name).write_text(block.code)
        elif block.language == "sh" and not block.no_run:
            code = _substituted(block.code, printed, where)
            prelude = "\n".join(assigned)
            done = _shell(f"{prelude}\n{code}", work, env)
            assert done.returncode == 0, f"{where}: exit status {done.returncode}\n{done.stderr}"
            expected = _expected(blocks, i)
            if expected is not None:
                got = done.stdout.rstrip("\n")
                assert matches(expected, got), f"{where}: printed {got!r}, the page says " \
                                               f"{expected!r}"
            assigned += _assignments(code)
            # The programs it built run from anywhere: not from the reader's directory.
            for command in _commands(code):
                elsewhere = _from_elsewhere(command, work)
                if elsewhere is None:
                    continue
                elsewhere_runs += 1
                again = _shell("\n".join([*assigned, elsewhere]), "/", env)
                assert again.returncode == 0, f"{where}: from /: {elsewhere}\n{again.stderr}"
                if expected is not None:
                    assert matches(expected, again.stdout.rstrip("\n")), (
                        f"{where}: from /, printed {again.stdout!r}")
    if any(b.language in SOURCES and not b.no_run for b in blocks):
        assert elsewhere_runs, "the page builds a program, but no shell line runs it"


# ---- Examples that are not run ----------------------------------------------------------

def _extras() -> set[str]:
    """The extras pyproject.toml defines (read without tomllib, which Python 3.9 lacks)."""
    text = (ROOT / "pyproject.toml").read_text()
    table = text.split("[project.optional-dependencies]\n", 1)[1].split("\n[", 1)[0]
    return set(re.findall(r"^([\w-]+)\s*=", table, re.MULTILINE))


_EXTRAS = _extras()


def _tilejit_help(command: str) -> str:
    done = subprocess.run([sys.executable, "-m", "tilejit", command, "--help"],
                          capture_output=True, text=True, env=subprocess_env(), timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _check_not_run(block: Block, where: str) -> None:
    """A shell block that is not run: it parses, and what it names of tilejit exists."""
    done = subprocess.run(["bash", "-n", "-c", block.code], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, f"{where}: {done.stderr}"
    for command in _commands(block.code):
        for part in re.split(r"&&|;", command):
            words = part.split("#")[0].split()
            if words[:3] == ["python", "-m", "tilejit"] and len(words) > 3:
                usage = _tilejit_help(words[3])
                for option in (w for w in words[4:] if w.startswith("--")):
                    assert option.split("=")[0] in usage, f"{where}: tilejit {words[3]} " \
                                                          f"has no {option}"
            elif words[:1] in (["python"], ["bash"]) and len(words) > 1 and \
                    not words[1].startswith("-"):
                assert (ROOT / words[1]).is_file(), f"{where}: no file {words[1]}"
            elif words[:2] == ["pip", "install"]:
                for extras in re.findall(r"(?:tilejit|\.)\[([\w,]+)\]", part):
                    unknown = set(extras.split(",")) - _EXTRAS
                    assert not unknown, f"{where}: no extra {sorted(unknown)} in pyproject.toml"


def test_each_example_that_is_not_run_says_why_and_names_what_exists():
    seen = set()
    for path in PAGES:
        blocks = _blocks(path)
        for i, block in enumerate(blocks):
            where = f"{_name(path)}, line {block.line}"
            if block.language in SOURCES:
                # A program is run with the shell block that builds it, or marked as not.
                _, builder = _source_name(blocks, i)
                assert block.no_run == builder.no_run, (
                    f"{where}: marked no-run {block.no_run}, its build (line {builder.line}) "
                    f"{builder.no_run}")
            elif block.language == "sh" and block.no_run:
                key = (_name(path), block.code.splitlines()[0])
                assert key in NOT_RUN, f"{where}: not run, and NOT_RUN does not say why: {key}"
                seen.add(key)
                _check_not_run(block, where)
    assert set(NOT_RUN) == seen, f"NOT_RUN names blocks no page has: {set(NOT_RUN) - seen}"


def test_the_pages_have_c_and_shell_examples_that_run():
    assert {_name(p) for p in RUN_PAGES} >= {"README.md", "docs/export.md",
                                            "docs/bound-launches.md", "docs/cli.md"}
