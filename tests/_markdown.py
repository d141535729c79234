"""Reading the project's Markdown (README.md, docs/*.md) for the tests that keep it true:
its ```python blocks, its relative links and the anchors its headings make, and running a
block with its expected output checked.

Conventions a block may use, both on lines that start at column 0:

- ``print(x)  # text``: the line must print exactly ``text``;
- a statement followed by a comment line ``# SomeError: message``: the statement must
  raise ``SomeError`` with that message.

In expected text, ``...`` stands for any characters (an address, a path). A block
preceded by ``<!-- no-run -->`` (it needs a GPU) is only compiled, as is a sketch: a block
whose first line is a comment starting ``# Sketch`` (it leaves out what the reader brings,
and says so). Every other block of a page runs, in order, in one fresh interpreter
(``python tests/_markdown.py PAGE``), as a reader pastes them.

The ```c, ```cpp and ```sh blocks (run by tests/test_docs_c.py, as a reader runs them):

- a ```c or ```cpp block is saved under the name the next ```sh block compiles
  (``cc app.c ...``: ``app.c``);
- a ```sh block runs in one shell, in the reader's working directory, after the
  assignments of the page's earlier ```sh blocks; the ```text block right after it is
  what it prints;
- a line ``NAME="value"  # ... printed`` stands for the value the reader copies from what
  the page's Python printed: the printed line that ends as ``value`` does (its last path
  component);
- ``<!-- no-run -->`` before a ```sh block: it is not run (it installs packages, needs a
  GPU, runs for minutes), only checked: its syntax, and the commands and options of
  tilejit it names.
"""

from __future__ import annotations

import builtins
import contextlib
import io
import linecache
import re
import sys
from dataclasses import dataclass
from pathlib import Path

NO_RUN = "<!-- no-run -->"

_FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```[ \t]*$", re.DOTALL | re.MULTILINE)
_LINK = re.compile(r"(?<!!)\[[^\]\n]*\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$", re.MULTILINE)
_PRINT = re.compile(r"^(print\(.*\))[ \t]+# (.*)$")
_RAISES = re.compile(r"^# ([A-Za-z_][A-Za-z0-9_.]*(?:Errors?|Exception|Warning)): (.*)$")


@dataclass(frozen=True)
class Block:
    """One fenced code block: its language, its code, the line its code starts on and
    whether it is marked ``<!-- no-run -->``."""

    language: str
    code: str
    line: int
    no_run: bool


def code_blocks(text: str, language: str | None = "python") -> list[Block]:
    """The fenced blocks of ``text`` in ``language`` (None: in every language), in order."""
    blocks = []
    for match in _FENCE.finditer(text):
        if language is not None and match.group(1) != language:
            continue
        before = text[:match.start()].rstrip().splitlines()
        no_run = bool(before) and before[-1].strip() == NO_RUN
        line = text.count("\n", 0, match.start(2)) + 1
        blocks.append(Block(match.group(1), match.group(2), line, no_run))
    return blocks


def _without_code(text: str) -> str:
    """``text`` with fenced blocks and inline code blanked (they hold no links)."""
    text = _FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    return re.sub(r"`[^`\n]*`", "``", text)


def links(text: str) -> list[str]:
    """Every link target of ``text`` outside code."""
    return _LINK.findall(_without_code(text))


def anchor(heading: str) -> str:
    """The anchor GitHub makes for a heading: lower case, punctuation dropped, spaces to
    hyphens (``## Streams and devices`` -> ``streams-and-devices``)."""
    heading = re.sub(r"`([^`]*)`", r"\1", heading)
    heading = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    slug = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return slug.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """The anchors of every heading of ``text`` (repeats numbered as GitHub does)."""
    seen: dict[str, int] = {}
    result = set()
    for heading in _HEADING.findall(_without_code(text)):
        slug = anchor(heading)
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        result.add(slug if count == 0 else f"{slug}-{count}")
    return result


def broken_links(path: Path) -> list[str]:
    """The relative links of the Markdown file ``path`` whose file or anchor is missing."""
    problems = []
    for target in links(path.read_text()):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file_part, _, fragment = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if not linked.exists():
            problems.append(f"{path.name}: {target}: no file {linked}")
            continue
        if fragment and linked.suffix == ".md" and fragment not in anchors(linked.read_text()):
            problems.append(f"{path.name}: {target}: no heading #{fragment} in {linked.name}")
    return problems


def _pattern(expected: str) -> re.Pattern:
    return re.compile(".*?".join(map(re.escape, expected.split("..."))), re.DOTALL)


def matches(expected: str, got: str) -> bool:
    """Whether ``got`` is the text ``expected``, where ``...`` stands for any characters."""
    return _pattern(expected).fullmatch(got) is not None


@contextlib.contextmanager
def _prints(expected: str):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        yield
    got = out.getvalue().rstrip("\n")
    assert matches(expected, got), f"printed {got!r}, the text says {expected!r}"
    print(got)  # what the reader sees: a path it then copies, say


@contextlib.contextmanager
def _raises(name: str, expected: str):
    try:
        yield
    except Exception as exc:  # noqa: BLE001 - compared below
        cls = getattr(builtins, name, None)
        if cls is None and "jax" in sys.modules:
            # A class of jax.errors by the name JAX documents: JaxRuntimeError, which
            # older JAX releases (0.6) alias to a class named XlaRuntimeError.
            cls = getattr(sys.modules["jax"].errors, name, None)
        kind_ok = isinstance(exc, cls) if isinstance(cls, type) else type(exc).__name__ == name
        got = f"{name if kind_ok else type(exc).__name__}: {exc}"
        assert kind_ok and _pattern(f"{name}: {expected}").fullmatch(got), (
            f"raised {got!r}, the text says {name}: {expected!r}")
    else:
        raise AssertionError(f"did not raise; the text says {name}: {expected}")


def checked_source(code: str) -> str:
    """``code`` with its expected outputs turned into checks, line numbers kept."""
    lines = code.splitlines()
    for i, line in enumerate(lines):
        printed = _PRINT.match(line)
        if printed:
            lines[i] = f"with _md_prints({printed.group(2)!r}): {printed.group(1)}"
            continue
        raised = _RAISES.match(lines[i + 1]) if i + 1 < len(lines) else None
        if raised and line and not line[0].isspace() and not line.startswith("#"):
            lines[i] = f"with _md_raises({raised.group(1)!r}, {raised.group(2)!r}): {line}"
    return "\n".join(lines) + "\n"


def is_sketch(block: Block) -> bool:
    """Whether ``block`` is a sketch: its first line a comment starting ``# Sketch``."""
    first = block.code.lstrip("\n").splitlines()[:1]
    return bool(first) and first[0].startswith("# Sketch")


def run_page(path: Path, where: str) -> None:
    """Runs every ```python block of the page at ``path`` in order, in one namespace."""
    namespace: dict = {"__name__": "__main__"}
    for block in code_blocks(path.read_text()):
        run_block(block, where, namespace)


def run_block(block: Block, where: str, namespace: dict) -> None:
    """Runs ``block`` in ``namespace`` with its expected outputs checked; a ``no-run``
    block is only compiled."""
    filename = f"{where}, line {block.line}"
    if block.no_run or is_sketch(block):
        compile(block.code, filename, "exec", dont_inherit=True)
        return
    namespace.setdefault("_md_prints", _prints)
    namespace.setdefault("_md_raises", _raises)
    source = checked_source(block.code)
    # inspect.getsource (which TileLang's @prim_func reads its function with) finds the
    # block's text through linecache, as it would a file's.
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec", dont_inherit=True), namespace)  # noqa: S102


if __name__ == "__main__":  # python tests/_markdown.py PAGE: a page's examples, as pasted
    import sys

    run_page(Path(sys.argv[1]), Path(sys.argv[1]).name)
