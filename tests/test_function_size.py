"""No function of tilejit is longer than 80 lines (CONTRIBUTING.md, "How the code reads"):
Python and Cython counted from the first decorator or ``def`` to the last line, C from
the first line of the definition to its closing brace."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIMIT = 80


def python_functions(path: Path):
    """``(name, first line, length)`` of every function and method in ``path``."""
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            start = min([node.lineno] + [d.lineno for d in node.decorator_list])
            yield node.name, start, node.end_lineno - start + 1


def _code_of(line: str, in_comment: bool) -> tuple[str, bool]:
    """``line`` without its comments and string and character literals, and whether a
    block comment is still open after it."""
    out, k = [], 0
    while k < len(line):
        if in_comment:
            end = line.find("*/", k)
            if end < 0:
                return "".join(out), True
            in_comment, k = False, end + 2
        elif line.startswith("/*", k):
            in_comment, k = True, k + 2
        elif line.startswith("//", k):
            break
        elif line[k] in "\"'":
            quote, k = line[k], k + 1
            while k < len(line) and line[k] != quote:
                k += 2 if line[k] == "\\" else 1
            k += 1
        else:
            out.append(line[k])
            k += 1
    return "".join(out), in_comment


def c_functions(text: str):
    """``(name, first line, length)`` of every function defined in C ``text``: a block at
    file scope whose opening brace follows a parenthesis, counted from the first line of
    its definition (after the previous declaration, comment or directive) to its closing
    brace."""
    depth, start, head, in_comment = 0, None, "", False
    for i, line in enumerate(text.splitlines()):
        code, in_comment = _code_of(line, in_comment)
        if depth == 0 and code.strip() and not code.lstrip().startswith("#"):
            if start is None:
                start, head = i, ""
            head += " " + code
        for ch in code:
            if ch == "{":
                if depth == 0:
                    opening = head[:head.rfind("{")].rstrip() if "{" in head else head.rstrip()
                    body = opening.endswith(")")
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0 and start is not None:
                    if body:
                        name = re.search(r"(\w+)\s*\(", head)
                        yield (name.group(1) if name else "?"), start + 1, i - start + 1
                    start = None
        if depth == 0 and start is not None and code.rstrip().endswith((";", "}")):
            start = None


def cython_functions(text: str):
    """``(name, first line, length)`` of every ``def``/``cdef``/``cpdef`` function in Cython
    ``text``: from its line to the last line indented under it."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"^(\s*)(?:cp?def|def)\s[^=]*?(\w+)\s*\(", line)
        if not m or line.rstrip().endswith(")") and "(" not in line.split("def", 1)[1]:
            continue
        indent, end = len(m.group(1)), i + 1
        while end < len(lines) and (not lines[end].strip() or
                                    len(lines[end]) - len(lines[end].lstrip()) > indent or
                                    lines[end].lstrip().startswith(")")):
            end += 1
        while end > i + 1 and not lines[end - 1].strip():
            end -= 1
        yield m.group(2), i + 1, end - i


def _too_long() -> list[str]:
    found = []
    for folder in ("tilejit", "build_tools", "tests"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            found += [f"{path.relative_to(ROOT)}:{line} {name} ({n} lines)"
                      for name, line, n in python_functions(path) if n > LIMIT]
    for path in sorted(ROOT.glob("wrapper/*.p*")):
        found += [f"{path.relative_to(ROOT)}:{line} {name} ({n} lines)"
                  for name, line, n in cython_functions(path.read_text()) if n > LIMIT]
    for pattern in ("core/src/*.[ch]", "core/include/tilejit/*.h", "core/torch_op/*.c",
                    "core/tests/*.[ch]", "core/fuzz/*.c"):
        for path in sorted(ROOT.glob(pattern)):
            found += [f"{path.relative_to(ROOT)}:{line} {name} ({n} lines)"
                      for name, line, n in c_functions(path.read_text()) if n > LIMIT]
    return found


def test_no_function_is_longer_than_80_lines():
    assert _too_long() == []


def test_the_counts_see_each_language():
    py = "@dec\ndef f(x):\n" + "    x += 1\n" * 80 + "    return x\n"
    assert [n for _, _, n in python_functions_of(py)] == [83]
    c = "static int\nf(int x,\n  int y) {\n" + "  x++;\n" * 80 + "}\n"
    assert list(c_functions(c)) == [("f", 1, 84)]
    pyx = "cdef object f(object x):\n" + "    x += 1\n" * 80 + "\ncdef g():\n    pass\n"
    assert [(name, n) for name, _, n in cython_functions(pyx)] == [("f", 81), ("g", 2)]


def python_functions_of(text: str):
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(text)
    try:
        return list(python_functions(Path(f.name)))
    finally:
        Path(f.name).unlink()
