"""The CPU compiler driver: find the system C compiler, identify it, and build kernels.

A CPU kernel becomes a shared library by one call of the system C compiler. This module
owns that call and the error it raises when the call fails: `CompileError` quotes the
first error of the compiler log together with the offending line of the user's source,
so a typo is found without reading a page of compiler output.

The module imports nothing heavy at import time: a warm-cache compile in a new process
only needs `find_cc` and `compiler_identity` (for the cache key), and the budget for the
whole warm path is a few milliseconds. Which compiler runs is decided by
`build_tools.toolchain`, the one finder of executables tilejit has.
"""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path

from ..native._build import scratch, toolchain

__all__ = ["CompileError", "compile_cpu", "compiler_identity", "default_flags", "find_cc",
           "find_cxx", "native_flags", "native_resolution"]

# The defaults come before the user's flags: with gcc and clang the last occurrence of an
# option wins, so a user's `-O3` or `-std=c17` overrides ours without any flag parsing.
_CPU_DEFAULT_FLAGS = ("-shared", "-fPIC", "-O2", "-std=gnu11")
_CXX_DEFAULT_FLAGS = ("-shared", "-fPIC", "-O2", "-std=gnu++17")

# A compile that has not finished in five minutes is stuck (a pathological template or a
# compiler waiting on a license server), and hanging the caller forever helps nobody.
_COMPILE_TIMEOUT_S = 300.0

# How many lines of the log after the first error line `str(CompileError)` shows. gcc
# prints the source excerpt and the caret right below the error, which is what a reader
# wants; the rest of the log stays available in `CompileError.log`.
_EXCERPT_MAX_LINES = 8

# gcc and clang: `file.c:12:5: error: ...` (also `fatal error`). The column is optional
# because some compilers (and `-fno-show-column`) omit it.
_GCC_ERROR_RE = re.compile(
    r"^(?P<file>[^\s:][^:\n]*?\.(?:c|cu|cc|cpp|cxx|h|cuh)):(?P<line>\d+):(?:(?P<col>\d+):)?"
    r" (?:fatal )?error\b",
    re.MULTILINE,
)
# nvcc and NVRTC: `kernel.cu(12): error: ...`.
_NVCC_ERROR_RE = re.compile(
    r"^(?P<file>[^\n(]*?\.(?:c|cu|cc|cpp|cxx|h|cuh))\((?P<line>\d+)\): (?:catastrophic )?error\b",
    re.MULTILINE,
)
# Any line that starts a new diagnostic ends the excerpt of the previous one.
_DIAGNOSTIC_START_RE = re.compile(r"^\S[^\n]*?(?::\d+(?::\d+)?: |\(\d+\): |: In function )")
# `#line 12 "file.c"` and gcc's own linemarker form `# 12 "file.c"`.
_LINE_DIRECTIVE_RE = re.compile(r'^\s*#\s*(?:line\s+)?(?P<line>\d+)(?:\s+"(?P<file>[^"]*)")?')


class CompileError(RuntimeError):
    """A kernel failed to compile, or no compiler could be run at all.

    Attributes:
        kernel_name: the kernel being compiled ("" when no kernel was involved yet).
        log: the compiler's full stdout and stderr.
        command: the exact command that ran, as a list of strings.
        source: the full source text handed to the compiler.
        returncode: the compiler's exit status (None when it never ran or timed out).
        lineno: the line of the first error in the user's numbering, or None.
        line_text: the text of that source line, or None.

    Example:
        >>> try:
        ...     compile_cpu("int f( {", "broken", None, Path("/tmp/broken.so"))
        ... except CompileError as err:
        ...     print(str(err).splitlines()[0])
        broken: compilation failed (cc exit 1)
    """

    def __init__(
        self,
        kernel_name: str = "",
        log: str = "",
        command: list[str] | tuple[str, ...] = (),
        source: str = "",
        returncode: int | None = None,
        reason: str | None = None,
    ) -> None:
        self.kernel_name = kernel_name
        self.log = log
        self.command = list(command)
        self.source = source
        self.returncode = returncode
        self.reason = reason
        self.lineno: int | None = None
        self.line_text: str | None = None
        super().__init__(self._render())

    def __reduce__(self):
        # The default reduction would call __init__ with the rendered message as the
        # kernel name; rebuilding from the fields keeps the error intact across processes.
        return (
            type(self),
            (self.kernel_name, self.log, self.command, self.source, self.returncode, self.reason),
        )

    def _render(self) -> str:
        if self.reason is not None:
            head = f"{self.kernel_name}: {self.reason}" if self.kernel_name else self.reason
        else:
            cc = os.path.basename(self.command[0]) if self.command else "compiler"
            head = f"{self.kernel_name}: compilation failed ({cc} exit {self.returncode})"
        parts = [head]
        match = _first_error(self.log)
        if match is not None:
            parts.append(_excerpt_from(self.log, match.start()))
            self.lineno = int(match.group("line"))
            self.line_text = _source_line(self.source, match.group("file"), self.lineno)
            if os.path.basename(match.group("file")).startswith("tilejit_glue_"):
                # The error is in what tilejit appended: the kernel's definition does not
                # match the prototype its signature implies. Say that, not "line 1".
                parts.append("  the kernel's definition does not match the prototype its "
                             "signature declares (JITKernel.c_prototype):")
                if self.line_text is not None:
                    parts.append(f"  {self.line_text.strip().rstrip(';')}")
            elif self.line_text is not None:
                parts.append(f"  line {self.lineno}: {self.line_text.strip()}")
        elif self.log.strip():
            # No located error (a linker failure, a crash): the end of the log is where
            # compilers put the reason.
            parts.append("\n".join(self.log.strip().splitlines()[-_EXCERPT_MAX_LINES:]))
        return "\n".join(parts)


def _first_error(log: str) -> re.Match[str] | None:
    """Return the match of the earliest located error in `log`, whatever its format."""
    found = [m for m in (_GCC_ERROR_RE.search(log), _NVCC_ERROR_RE.search(log)) if m]
    return min(found, key=lambda m: m.start()) if found else None


def _excerpt_from(log: str, start: int) -> str:
    """Return the error line at `start` and its following context lines."""
    lines = log[start:].splitlines()
    excerpt = [lines[0]]
    for line in lines[1:_EXCERPT_MAX_LINES]:
        if _DIAGNOSTIC_START_RE.match(line):
            break
        excerpt.append(line)
    return "\n".join(excerpt).rstrip()


def _source_line(source: str, file: str, lineno: int) -> str | None:
    """Return the text of line `lineno` of `file` as the compiler numbered it in `source`.

    The compiled text is a prelude followed by `#line 1 "<kernel>.c"` and the user's code,
    so the compiler reports user line numbers; replaying the line directives maps such a
    (file, line) pair back to the physical line. Without directives it is the physical line.
    """
    want = os.path.basename(file)
    current_file: str | None = None  # The compiled file itself, whatever its name.
    current_line = 1
    by_position: dict[tuple[str | None, int], str] = {}
    for text in source.splitlines():
        directive = _LINE_DIRECTIVE_RE.match(text)
        if directive is not None:
            current_line = int(directive.group("line"))
            if directive.group("file") is not None:
                current_file = os.path.basename(directive.group("file"))
            continue
        by_position.setdefault((current_file, current_line), text)
        current_line += 1
    if (want, lineno) in by_position:
        return by_position[(want, lineno)]
    if (None, lineno) in by_position:
        return by_position[(None, lineno)]
    return None


def find_cc() -> list[str]:
    """Return the C compiler command: `$TILEJIT_CC` (shell-split), else `cc`, else `gcc`.

    Raises `CompileError` when the chosen compiler cannot be found; an explicitly set
    `TILEJIT_CC` is never silently replaced by another compiler. The rule is
    `build_tools.toolchain.c_compiler`'s, which also builds the core and the wrapper.

    Example:
        >>> find_cc()
        ['cc']
        >>> os.environ["TILEJIT_CC"] = "clang -fcolor-diagnostics"; find_cc()
        ['clang', '-fcolor-diagnostics']
    """
    try:
        return toolchain.c_compiler()
    except toolchain.ToolNotFoundError as exc:
        raise CompileError(reason=str(exc)) from None


def find_cxx() -> list[str]:
    """The C++ compiler for C++ kernels: `$TILEJIT_CXX`, else `c++`, `g++`, `clang++`."""
    try:
        return toolchain.cxx_compiler()
    except toolchain.ToolNotFoundError as exc:
        raise CompileError(reason=str(exc)) from None


def default_flags(language: str) -> tuple[str, ...]:
    """The flags before the user's for a CPU kernel in `language` ("c" or "c++")."""
    return _CXX_DEFAULT_FLAGS if language == "c++" else _CPU_DEFAULT_FLAGS


_identity_lock = threading.Lock()
_identities: dict[tuple[str, ...], str] = {}


def compiler_identity(cc: list[str]) -> str:
    """Return the first line of `<cc> --version`, memoised per process.

    The identity is part of every artifact's cache key, so upgrading the compiler
    rebuilds kernels instead of reusing objects it might not have produced.

    Example:
        >>> compiler_identity(["gcc"])
        'gcc (Ubuntu 11.4.0-1ubuntu1~22.04) 11.4.0'
    """
    key = tuple(cc)
    with _identity_lock:
        known = _identities.get(key)
    if known is not None:
        return known
    import subprocess

    try:
        done = subprocess.run(
            [*cc, "--version"],
            check=False,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=60,
            env=toolchain.compiler_env(),
        )
        text = done.stdout if done.stdout.strip() else done.stderr
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        identity = lines[0] if done.returncode == 0 and lines else None
    except (OSError, subprocess.SubprocessError):
        identity = None
    if identity is None:
        # A compiler without `--version` still needs a stable identity that changes when
        # the binary does; its resolved path, size and modification time serve.
        identity = _binary_fingerprint(cc)
    with _identity_lock:
        return _identities.setdefault(key, identity)


_native_lock = threading.Lock()
_natives: dict[tuple[tuple[str, ...], tuple[str, ...]], str | None] = {}


def native_flags(flags) -> tuple[str, ...]:
    """The flags that tune the code for the CPU compiling it: ``-march=native``,
    ``-mcpu=native``, ``-mtune=native``."""
    return tuple(flag for flag in flags if flag.startswith("-m") and flag.endswith("=native"))


def native_resolution(cc: list[str], flags) -> str | None:
    """What ``-march=native`` (``-mcpu=``, ``-mtune=``) in ``flags`` means to ``cc`` on this
    machine, as text that two machines share exactly when the compiler makes the same code
    for both: GCC's ``-Q --help=target`` (the chosen CPU and every target option it turns
    on), clang's ``-###`` (its ``-target-cpu`` and ``-target-feature`` arguments). None
    when ``flags`` has no such flag; ``"unresolved"`` when the compiler says neither (a
    kernel so built is never shared). Memoised per process.

    Example:
        >>> native_resolution(["gcc"], ["-O3", "-march=native"])[:40]
        'gcc -march=znver3 -mtune=znver3 sha256:'
    """
    natives = native_flags(flags)
    if not natives:
        return None
    memo = (tuple(cc), natives)
    with _native_lock:
        if memo in _natives:
            return _natives[memo]
    resolved = _ask_gcc(cc, natives) or _ask_clang(cc, natives) or "unresolved"
    with _native_lock:
        return _natives.setdefault(memo, resolved)


def _run_quietly(command: list[str]) -> str | None:
    import subprocess

    try:
        done = subprocess.run(command, check=False, capture_output=True, text=True,
                              errors="replace", timeout=60, env=toolchain.compiler_env(),
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout + done.stderr if done.returncode == 0 else None


def _ask_gcc(cc: list[str], natives: tuple[str, ...]) -> str | None:
    import hashlib

    text = _run_quietly([*cc, *natives, "-Q", "--help=target"])
    if text is None:
        return None
    chosen = re.findall(r"^\s*-m(arch|cpu|tune)=[ \t]+(\S+)\s*$", text, re.MULTILINE)
    if not chosen:
        return None
    lines = sorted(" ".join(line.split()) for line in text.splitlines()
                   if line.strip().startswith("-"))
    digest = hashlib.sha256("\n".join(lines).encode()).hexdigest()
    return "gcc " + " ".join(f"-m{k}={v}" for k, v in chosen) + f" sha256:{digest}"


def _ask_clang(cc: list[str], natives: tuple[str, ...]) -> str | None:
    import hashlib

    text = _run_quietly([*cc, *natives, "-###", "-x", "c", "-c", "/dev/null", "-o",
                         "/dev/null"])
    if text is None:
        return None
    cpu = re.findall(r'"-(?:target-cpu|tune-cpu)" "([^"]+)"', text)
    features = sorted(re.findall(r'"-target-feature" "([^"]+)"', text))
    if not cpu:
        return None
    digest = hashlib.sha256(" ".join(cpu + features).encode()).hexdigest()
    return f"clang -target-cpu {cpu[0]} sha256:{digest}"


def _binary_fingerprint(cc: list[str]) -> str:
    resolved = toolchain.find_executable(cc[0])
    if resolved is None:
        return f"unknown {' '.join(cc)}"
    info = os.stat(resolved)
    return f"unknown {os.path.realpath(resolved)} {info.st_size} {info.st_mtime_ns}"


def _safe_file_stem(kernel_name: str) -> str:
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", kernel_name).lstrip(".")
    return stem or "kernel"


def _run_compiler(command: list[str], kernel_name: str, source: str, timeout: float):
    """Runs the compiler ``command`` (its output captured); a timeout or a compiler that
    cannot be run is a ``CompileError`` naming the kernel."""
    import subprocess

    try:
        return subprocess.run(command, check=False, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, errors="replace",
                              timeout=timeout, env=toolchain.compiler_env(),
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        log = (exc.output if isinstance(exc.output, str)
               else (exc.output or b"").decode("utf-8", "replace"))
        raise CompileError(kernel_name, log, command, source,
                           reason=f"compilation timed out after {timeout:g} s") from None
    except OSError as exc:
        raise CompileError(kernel_name, "", command, source,
                           reason=f"could not run the C compiler {command[0]!r}: {exc}"
                           " (set TILEJIT_CC to a working compiler)") from None


def compile_cpu(
    source: str,
    kernel_name: str,
    flags: list[str] | None,
    out_path: Path,
    *,
    cc: list[str] | None = None,
    timeout: float = _COMPILE_TIMEOUT_S,
    language: str = "c",
) -> None:
    """Compile C `source` into the shared library `out_path`.

    Runs `<cc> -shared -fPIC -O2 -std=gnu11 <flags...> <kernel_name>.c -o out_path -lm`
    with the source written to a private temporary directory. User flags come after the
    defaults so they override them; `-fopenmp` works because the same command links.

    Raises `CompileError` (with the log, the command and the offending source line) when
    the compiler fails, times out or cannot be found.

    Example:
        >>> compile_cpu("int answer(void) { return 42; }", "answer", ["-O3"],
        ...             Path("/tmp/answer.so"))
        >>> import ctypes; ctypes.CDLL("/tmp/answer.so").answer()
        42
    """
    if cc is not None:
        command_prefix = list(cc)
    else:
        command_prefix = find_cxx() if language == "c++" else find_cc()
    out_path = Path(out_path).absolute()
    with scratch.workdir("cc") as workdir:
        suffix = ".cc" if language == "c++" else ".c"
        src_path = os.path.join(workdir, _safe_file_stem(kernel_name) + suffix)
        with open(src_path, "w", encoding="utf-8") as handle:
            handle.write(source)
        command = [
            *command_prefix,
            *default_flags(language),
            *(flags or ()),
            src_path,
            "-o",
            str(out_path),
            "-lm",
        ]
        done = _run_compiler(command, kernel_name, source, timeout)
    if done.returncode != 0:
        raise CompileError(kernel_name, done.stdout, command, source, done.returncode)
