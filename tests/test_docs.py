"""The user documentation (docs/*.md) stays true: every relative link and anchor exists,
and every ```python block runs and prints or raises what the text says, each page's blocks
in order in a fresh interpreter, as a reader pastes them (see _markdown)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
from _markdown import Block, broken_links, code_blocks, run_block
from conftest import subprocess_env

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md"))
# Optional packages a page's examples may import: a page that imports one runs only where
# it is installed, and is reported skipped elsewhere.
OPTIONAL = ("torch", "tilelang", "tvm_ffi", "jax")


def skip_without_optional_imports(code: str) -> None:
    for name in OPTIONAL:
        if re.search(rf"^\s*(?:import|from) {name}\b", code, re.MULTILINE):
            pytest.importorskip(name, exc_type=ImportError)


def test_pages_exist():
    names = {p.name for p in PAGES}
    assert {"README.md", "signature.md", "kernel-abi.md", "validation.md", "backends.md",
            "layout-views.md", "caching.md", "environment.md", "cli.md",
            "torch-compile.md", "architecture.md"} <= names


def test_index_links_every_page():
    index = (DOCS / "README.md").read_text()
    missing = [p.name for p in PAGES if p.name != "README.md" and f"({p.name})" not in index]
    assert not missing, f"docs/README.md does not link {missing}"


@pytest.mark.parametrize("path", [*PAGES, ROOT / "README.md", ROOT / "CONTRIBUTING.md"],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_links(path):
    assert not broken_links(path)


def run_page_as_pasted(path: Path, where: Path) -> None:
    """The page's blocks run in order in one fresh interpreter, in the empty directory
    ``where``, as a reader pastes them (``python tests/_markdown.py PAGE``)."""
    blocks = code_blocks(path.read_text())
    skip_without_optional_imports("\n".join(b.code for b in blocks if not b.no_run))
    for block in blocks:  # a block that does not even compile is said first, and plainly
        compile(block.code, f"{path.name}, line {block.line}", "exec", dont_inherit=True)
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "_markdown.py"), str(path)],
                          cwd=where, env=subprocess_env(), capture_output=True, text=True,
                          timeout=900, check=False)
    assert done.returncode == 0, f"{path.name}: {done.stderr[-6000:]}"


@pytest.mark.parametrize("path", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_examples_run(path, tmp_path):
    run_page_as_pasted(path, tmp_path)


def test_a_sketch_is_compiled_not_run():
    sketch = Block("python", "# Sketch: `model` is yours\nmodel.train()\n", 1, False)
    run_block(sketch, "page", {})  # not run: `model` is not defined
    with pytest.raises(SyntaxError):
        run_block(Block("python", "# Sketch\nmodel.train(\n", 1, False), "page", {})
    with pytest.raises(NameError):
        run_block(Block("python", "# A comment\nmodel.train()\n", 1, False), "page", {})


# Where the architecture page must name every file, and the paths it may name.
_TREE = ("tilejit", "core/src", "core/include/tilejit", "wrapper", "build_tools")
_PATH = re.compile(r"`((?:tilejit|core|wrapper|build_tools|tests)/[\w./-]*\w)`")


def _tree_files() -> set[str]:
    files = set()
    for top in _TREE:
        for path in (ROOT / top).rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix in (
                    ".py", ".c", ".h", ".pyx", ".pxi", ".pxd"):
                files.add(str(path.relative_to(ROOT)))
    return files


def test_the_architecture_page_names_every_file_and_only_files_that_exist():
    page = (DOCS / "architecture.md").read_text()
    named = set(_PATH.findall(page))
    assert sorted(_tree_files() - named) == []
    # _prebuilt is made by a regular install, not kept in the tree.
    assert sorted(p for p in named if not (ROOT / p).exists() and "_prebuilt" not in p) == []


_TEST_REF = re.compile(r"`((?:core/)?tests/[\w/]+\.(?:py|c))::(\w+)`")


def _test_exists(path: str, name: str) -> bool:
    text = (ROOT / path).read_text()
    if path.endswith(".py"):
        return re.search(rf"^def {name}\(", text, re.MULTILINE) is not None
    return re.search(rf"^TEST\({name}\)", text, re.MULTILINE) is not None


def test_every_claim_of_the_architecture_page_names_tests_that_exist():
    page = (DOCS / "architecture.md").read_text()
    start = page.index("| claim | held by |")
    rows = page[start:page.index("\n\n", start)].splitlines()[2:]
    assert len(rows) >= 10
    assert [row for row in rows if not _TEST_REF.search(row.split("|")[-2])] == []
    named = _TEST_REF.findall(page)
    assert [f"{path}::{name}" for path, name in named if not _test_exists(path, name)] == []
    # The check reads both forms, and sees a test that does not exist.
    assert _test_exists("tests/test_docs.py", "test_pages_exist")
    assert _test_exists("core/tests/test_host.c", "host_call_results_in_order")
    assert not _test_exists("tests/test_docs.py", "test_nothing_of_the_sort")


def _sources_table(page: str) -> list[list[str]]:
    """The core's sources table of the architecture page: per row, the files it names."""
    start = page.index("| `core/src/internal.h`")
    rows = page[start:page.index("\n\n", start)].splitlines()
    return [re.findall(r"`(core/[\w/]+\.[ch])`", row.split("|")[1]) for row in rows]


def _listed_before_their_callers(order: list[str], graph: dict) -> list[str]:
    """The files of ``order`` that call a file listed after them (or not at all)."""
    seen: set[str] = set()
    wrong = []
    for name in order:
        if not graph.get(name, set()) <= seen:
            wrong.append(f"{name} calls {sorted(graph[name] - seen)}, listed below it")
        seen.add(name)
    return wrong


def test_the_architecture_pages_sources_table_is_lowest_layer_first():
    # Every .c file of core/src is a row, and calls functions only of the rows above it:
    # the call graph read from the sources, as the core's own cycle test reads it.
    from test_core_api import source_graph

    rows = _sources_table((DOCS / "architecture.md").read_text())
    order = [Path(f).name for row in rows for f in row if f.startswith("core/src/")]
    graph = source_graph()
    assert sorted(f for f in order if f.endswith(".c")) == sorted(graph)
    assert _listed_before_their_callers(order, graph) == []


def test_the_layer_order_check_finds_a_file_above_what_it_calls():
    page = ("| `core/src/internal.h` | x |\n| `core/src/call.c`, `core/src/call.h` | y |\n"
            "| `core/src/arg.c` | z |\n\nMore text.")
    rows = _sources_table(page)
    assert rows == [["core/src/internal.h"], ["core/src/call.c", "core/src/call.h"],
                    ["core/src/arg.c"]]
    order = [Path(f).name for row in rows for f in row]
    graph = {"call.c": {"arg.c"}, "arg.c": set()}
    assert _listed_before_their_callers(order, graph) == [
        "call.c calls ['arg.c'], listed below it"]
    assert _listed_before_their_callers(["arg.c", "call.c"], graph) == []
