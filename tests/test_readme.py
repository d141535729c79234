"""The README's examples run as written, in order, in a fresh interpreter, and print what
their comments say."""

from pathlib import Path

import pytest
from _markdown import code_blocks
from test_docs import run_page_as_pasted

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_examples_run(tmp_path):
    pytest.importorskip("torch")  # the examples run on torch tensors
    example = code_blocks(README.read_text())[0]
    assert "print(kernel.c_prototype)  " in example.code  # the line whose output is checked
    run_page_as_pasted(README, tmp_path)
