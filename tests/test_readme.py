"""The README's example runs as written and prints what its comment says."""

from pathlib import Path

import pytest
from _markdown import code_blocks, run_block

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_example_runs():
    pytest.importorskip("torch")  # the example runs on torch tensors
    example = code_blocks(README.read_text())[0]
    assert "print(kernel.c_prototype)  " in example.code  # the line whose output is checked
    run_block(example, "README.md", {})
