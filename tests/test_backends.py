"""Backend selection: ``auto`` prefers the Cython wrapper, and falls back to ``ctypes``
(with a warning) where the wrapper cannot be built; ``ctypes`` needs no wrapper at all.

Each case runs in a fresh interpreter with an empty cache, where Cython cannot be
imported (as on a machine without it), so nothing is shared with this process.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import json, sys, warnings
    sys.modules["Cython"] = None          # importing Cython now fails, as if not installed
    import numpy as np
    import tilejit
    from tilejit import T

    n = T.symbol("n")
    prog = tilejit.Program("add1", [T.Buffer((n,), "float32", name="A", const=True),
                                    T.Buffer((n,), "float32", name="B")],
                           "void add1(const float *A, float *B, int64_t n) "
                           "{ for (int64_t i = 0; i < n; ++i) B[i] = A[i] + 1; }")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kernel = tilejit.compile(prog, out_idx=-1, execution_backend=sys.argv[1])
    out = kernel(np.arange(4, dtype=np.float32))
    try:
        kernel(np.arange(4, dtype=np.float64))
        error = None
    except ValueError as exc:
        error = str(exc)
    print(json.dumps({"backend": kernel.execution_backend, "out": out.tolist(),
                      "error": error, "warnings": [str(w.message) for w in caught],
                      "wrapper_loaded": "tilejit._tilejit" in sys.modules}))
""")


def _run(backend, child_env, tmp_path):
    env = child_env(TILEJIT_CACHE_DIR=str(tmp_path / "cache"))
    done = subprocess.run([sys.executable, "-c", SCRIPT, backend], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_ctypes_works_where_the_wrapper_was_never_built(child_env, tmp_path):
    result = _run("ctypes", child_env, tmp_path)
    assert result["backend"] == "ctypes"
    assert result["out"] == [1.0, 2.0, 3.0, 4.0]
    assert result["error"] == "add1: argument 0 'A': expected dtype float32, got float64"
    assert not result["wrapper_loaded"]
    assert not (tmp_path / "cache" / "wrapper").exists()


def test_auto_falls_back_to_ctypes_with_a_warning(child_env, tmp_path):
    result = _run("auto", child_env, tmp_path)
    assert result["backend"] == "ctypes"
    assert result["out"] == [1.0, 2.0, 3.0, 4.0]
    assert any("Cython wrapper is unavailable" in w and "'ctypes'" in w
               for w in result["warnings"]), result["warnings"]
