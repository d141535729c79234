"""The README's example runs as written and prints what its comment says."""

import contextlib
import io
import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_example_runs():
    example = re.findall(r"```python\n(.*?)```", README.read_text(), re.DOTALL)[0]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(example, "README.md example", "exec"), {})  # noqa: S102 - our own docs
    expected = re.search(r"print\(kernel\.c_prototype\)\s+# (.*)", example).group(1)
    assert printed.getvalue().strip() == expected.strip()
