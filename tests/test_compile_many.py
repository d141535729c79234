"""tilejit.compile_many and JITFunction.warmup: many kernels compiled at once, results in
order, every failure reported together, the good kernels kept, progress on stderr."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import tilejit
from tilejit import T


def _program(i: int, broken: bool = False) -> tilejit.Program:
    n = T.symbol("n")
    body = "undefined_name + X[j]" if broken else f"X[j] * {i}"
    return tilejit.Program(f"many_{i}", [T.Buffer((n,), "float32", name="X", const=True),
                                         T.Buffer((n,), "float32", name="Y")],
                           f"void many_{i}(const float *X, float *Y, int64_t n) {{\n"
                           f"  for (int64_t j = 0; j < n; ++j) Y[j] = {body};\n}}\n")


X = np.ones(3, np.float32)


def test_kernels_come_back_in_input_order(tilejit_cache_dir):
    kernels = tilejit.compile_many([_program(i) for i in (3, 1, 4, 5)], out_idx=-1, workers=2,
                                   progress=False)
    assert [k.name for k in kernels] == ["many_3", "many_1", "many_4", "many_5"]
    assert [k(X).tolist()[0] for k in kernels] == [3.0, 1.0, 4.0, 5.0]
    assert tilejit.compile_many([], out_idx=-1) == []


def test_a_failing_program_does_not_stop_the_others(tilejit_cache_dir):
    programs = [_program(10), _program(11, broken=True), _program(12),
                _program(13, broken=True)]
    with pytest.raises(tilejit.CompileErrors) as info:
        tilejit.compile_many(programs, out_idx=-1, workers=2, progress=False)
    error = info.value
    assert error.failed == [(1, "many_11"), (3, "many_13")]
    assert [type(e) for e in error.exceptions] == [tilejit.CompileError] * 2
    text = str(error)
    assert text.startswith("compile_many: 2 of 4 programs failed to compile:\n")
    assert "programs[1] many_11: CompileError: many_11: compilation failed" in text
    assert "programs[3] many_13: CompileError" in text and "undefined_name" in text
    good = [k for k in error.kernels if k is not None]
    assert [k.name for k in good] == ["many_10", "many_12"]
    assert all(Path(k.library_path).is_file() for k in good)  # in the cache
    assert good[1](X).tolist() == [12.0] * 3
    if sys.version_info >= (3, 11):
        assert isinstance(error, ExceptionGroup)  # noqa: F821


def test_arguments_are_checked():
    with pytest.raises(ValueError, match="workers must be an int >= 1, got 0"):
        tilejit.compile_many([_program(1)], workers=0)
    with pytest.raises(TypeError, match=r"programs\[1\] must be a tilejit.Program, got str"):
        tilejit.compile_many([_program(1), "void f(void) {}"])


def test_progress_on_stderr_without_tqdm(tilejit_cache_dir, capfd, monkeypatch):
    monkeypatch.setitem(sys.modules, "tqdm", None)  # not installed: a plain line instead
    tilejit.compile_many([_program(i) for i in (21, 22)], out_idx=-1, progress=True)
    err = capfd.readouterr().err
    assert "tilejit: compiled 2/2" in err
    tilejit.compile_many([_program(i) for i in (21, 22)], out_idx=-1)  # stderr no terminal
    assert capfd.readouterr().err == ""


def test_warmup_compiles_a_jit_function_for_many_calls(tilejit_cache_dir):
    @tilejit.jit(out_idx=-1)
    def scale(factor: int = 2):
        return _program(factor)

    kernels = scale.warmup([(31,), {"factor": 32}, 33, ((34,), {})], workers=2,
                           progress=False)
    assert [k(X).tolist()[0] for k in kernels] == [31.0, 32.0, 33.0, 34.0]
    assert scale.cache_info() == 4
    assert scale(31) is kernels[0] and scale(factor=32) is kernels[1]
    assert scale.warmup([(31,)]) == [kernels[0]]  # nothing left to compile


def test_warmup_keeps_what_compiled_and_reports_every_failure(tilejit_cache_dir):
    made = []

    @tilejit.jit(out_idx=-1)
    def scale(factor: int = 2):
        made.append(factor)
        if factor == 0:
            raise ValueError("factor must not be 0")
        return _program(factor, broken=factor > 100)

    with pytest.raises(tilejit.CompileErrors) as info:
        scale.warmup([(41,), (142,), (0,), (43,), (142,)], workers=2, progress=False)
    error = info.value
    text = str(error)
    assert text.startswith("scale.warmup: 2 of 4 argument sets failed; the others compiled")
    assert "calls[1] scale(142): CompileError" in text and "undefined_name" in text
    assert "calls[2] scale(0): ValueError: factor must not be 0" in text
    assert [type(e) for e in error.exceptions] == [tilejit.CompileError, ValueError]
    assert error.failed == [(1, "scale"), (2, "scale")]
    assert [k is None for k in error.kernels] == [False, True, True, False, True]
    # The kernels that compiled are kept: later calls find them, nothing is compiled again.
    assert scale.cache_info() == 2
    before = len(made)
    assert scale(41) is error.kernels[0] and scale(43) is error.kernels[3]
    assert scale(43)(X).tolist() == [43.0] * 3 and len(made) == before
    assert scale.warmup([(41,), (43,)]) == [error.kernels[0], error.kernels[3]]
