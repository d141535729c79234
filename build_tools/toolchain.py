"""Finding and running the C compiler: the one place that decides which executable runs.

`find_executable` finds and checks every tool tilejit runs (the C compiler here and in
`tilejit.compiler`, nvcc in `tilejit.cuda_compiler`); `c_compiler` applies the
`TILEJIT_CC` / `cc` / `gcc` rule. `run` and `compile_and_link` build the core and the
wrapper.

Importing this module costs a few `os` calls: a warm-cache kernel compile in a new
process asks it for the compiler, and shutil or subprocess are only imported when a
command actually runs.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from . import env

__all__ = [
    "ToolNotFoundError",
    "c_compiler",
    "compile_and_link",
    "compiler_env",
    "find_executable",
    "run",
]

_LDFLAGS = ("-shared", "-pthread")
_LIBS = ("-ldl",)


class ToolNotFoundError(LookupError):
    """No usable executable: the message says which one and how to point tilejit to it."""


def find_executable(name: str) -> str | None:
    """Return the executable file `name` names, or None when there is none.

    A name holding a `/` is a path, checked as it is; a bare name is looked up on `PATH`.
    Either way the result is a regular file this process may execute.

    Example:
        >>> find_executable("cc")
        '/usr/bin/cc'
        >>> find_executable("/nonexistent/nvcc") is None
        True
    """

    def runnable(path: str) -> bool:
        return os.path.isfile(path) and os.access(path, os.X_OK)

    if os.sep in name:
        return name if runnable(name) else None
    for directory in (env.text("PATH") or os.defpath).split(os.pathsep):
        candidate = os.path.join(directory or ".", name)
        if runnable(candidate):
            return candidate
    return None


def configured_cc() -> str:
    """Return `$TILEJIT_CC` stripped ("" when unset): part of every cache key it affects."""
    return env.text("TILEJIT_CC")


def c_compiler() -> list[str]:
    """Return the C compiler command: `$TILEJIT_CC` (shell-split), else `cc`, else `gcc`.

    Raises `ToolNotFoundError` when the chosen compiler is not an executable file; an
    explicitly set `TILEJIT_CC` is never silently replaced by another compiler.

    Example:
        >>> os.environ["TILEJIT_CC"] = "clang -fcolor-diagnostics"; c_compiler()
        ['clang', '-fcolor-diagnostics']
    """
    return _compiler("TILEJIT_CC", "C", ("cc", "gcc"))


def cxx_compiler() -> list[str]:
    """Return the C++ compiler command for C++ CPU kernels: `$TILEJIT_CXX` (shell-split),
    else `c++`, `g++` or `clang++`; the same rules as `c_compiler`."""
    return _compiler("TILEJIT_CXX", "C++", ("c++", "g++", "clang++"))


def _compiler(variable: str, language: str, defaults: tuple[str, ...]) -> list[str]:
    configured = env.text(variable)
    if configured:
        command = env.command(variable)
        if not command:
            raise env.BadValue(variable, configured, "a compiler command")
        if find_executable(command[0]) is None:
            raise ToolNotFoundError(
                f"no {language} compiler found: {variable}={configured!r} names {command[0]!r},"
                f" which is not an executable file (set {variable} to a working compiler)"
            )
        return command
    for name in defaults:
        if find_executable(name) is not None:
            return [name]
    raise ToolNotFoundError(f"no {language} compiler found: set {variable} (none of "
                            f"{', '.join(defaults)} is on PATH)")


def compiler_env() -> dict[str, str]:
    """The environment compilers run in: the C locale keeps diagnostics in English and
    ASCII whatever the user's locale, so tilejit can parse them."""
    return {**os.environ, "LC_ALL": "C"}


def _log(verbose: bool, message: str) -> None:
    if verbose:
        print(f"tilejit: {message}", file=sys.stderr, flush=True)


def run(command: list[str], verbose: bool) -> None:
    """Run a build command; raise `RuntimeError` with the command and its output on failure."""
    import shlex
    import subprocess

    _log(verbose, shlex.join(command))
    try:
        done = subprocess.run(
            command,
            check=False,
            capture_output=True,
            text=True,
            errors="replace",
            env=compiler_env(),
        )
    except OSError as exc:
        raise RuntimeError(
            f"tilejit: cannot run the C compiler ({exc}); set TILEJIT_CC to a working one\n"
            f"  command: {shlex.join(command)}"
        ) from exc
    output = (done.stderr + done.stdout).strip()
    if done.returncode != 0:
        raise RuntimeError(
            f"tilejit: C compiler failed with exit status {done.returncode}\n"
            f"  command: {shlex.join(command)}\n{output}"
        )
    if output:
        _log(verbose, output)


def compile_and_link(
    sources: list[Path],
    include_dirs: list[Path],
    cflags: tuple[str, ...],
    output: Path,
    workdir: Path,
    verbose: bool,
    link_args: tuple[str, ...] = (),
) -> None:
    """Compile `sources` in parallel into `workdir` and link them into the shared library
    `output`, followed by `link_args` (libraries, rpaths). Raises `RuntimeError`."""
    from concurrent.futures import ThreadPoolExecutor

    try:
        cc = c_compiler()
    except ToolNotFoundError as exc:
        raise RuntimeError(f"tilejit: {exc}") from None
    includes = [f"-I{directory}" for directory in include_dirs]
    commands = []
    objects = []
    for index, source in enumerate(sources):
        # The index keeps two sources with one stem (a.c and the generated a.c) apart.
        obj = workdir / f"{index}-{source.stem}.o"
        commands.append([*cc, *cflags, *includes, "-c", str(source), "-o", str(obj)])
        objects.append(str(obj))
    # Translation units compile in parallel: the Cython output is the slowest and the core
    # files finish beside it, so a cold build costs about one file's compile time.
    with ThreadPoolExecutor(max_workers=max(1, min(len(commands), os.cpu_count() or 1))) as pool:
        for future in [pool.submit(run, command, verbose) for command in commands]:
            future.result()
    run([*cc, *_LDFLAGS, "-o", str(output), *objects, *link_args, *_LIBS], verbose)
