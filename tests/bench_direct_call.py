"""A direct call of a relu kernel on a 1-element torch tensor (out_idx=-1: the call makes
its output) against the same kernel's ``kernel.torch_op`` (through torch's dispatcher) and
``torch.relu``, in µs per call: the best of 5 timeit repeats in a fresh child per checkout
and ``TILEJIT_FAST_PATHS`` (1 and 0), the children interleaved round by round, the median
over rounds printed. Each checkout is imported in place (an editable install's finder is
set aside), so two commits compare in one run on one torch:

    python tests/bench_direct_call.py /path/to/base /path/to/checkout [--rounds 5]

What it measured for the torch 2.9 in-place read is in docs/fast-paths.md.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

CHILD = r'''
import sys
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f)]
sys.path.insert(0, sys.argv[1])
import json, timeit, warnings
warnings.simplefilter("ignore")
import torch, tilejit
from tilejit import T
assert tilejit.__file__.startswith(sys.argv[1]), tilejit.__file__
n = T.symbol("n")
relu = tilejit.compile(tilejit.Program("relu", [
    T.Buffer((n,), "float32", name="X", const=True), T.Buffer((n,), "float32", name="Y")],
    "void relu(const float *X, float *Y, int64_t n) {"
    " for (int64_t i = 0; i < n; ++i) Y[i] = X[i] > 0 ? X[i] : 0; }"), out_idx=-1)
x = torch.randn(1)
op = relu.torch_op
assert torch.equal(relu(x), torch.relu(x)) and torch.equal(op(x), torch.relu(x))
rows = {"direct": lambda: relu(x), "torch_op": lambda: op(x), "torch.relu": lambda: torch.relu(x)}
out = {}
for name, fn in rows.items():
    t = timeit.Timer(fn)
    number = 20000
    out[name] = min(t.repeat(5, number)) / number * 1e6
print(json.dumps(out))
'''


def main():
    """Runs the children and prints the table (markdown)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trees", nargs="*", default=[os.getcwd()])
    parser.add_argument("--rounds", type=int, default=5)
    options = parser.parse_args()
    trees, rounds = [os.path.abspath(tree) for tree in options.trees], options.rounds
    results = {}
    cache = tempfile.mkdtemp(prefix="tilejit-bench-")  # a directory per checkout in it
    for _ in range(rounds):
        for index, tree in enumerate(trees):
            for fast in ("1", "0"):
                env = dict(os.environ, TILEJIT_FAST_PATHS=fast,
                           TILEJIT_CACHE_DIR=os.path.join(cache, str(index)))
                done = subprocess.run([sys.executable, "-c", CHILD, tree], env=env,
                                      capture_output=True, text=True, check=False)
                if done.returncode:
                    sys.exit(done.stderr[-3000:])
                got = json.loads(done.stdout.strip().splitlines()[-1])
                for name, us in got.items():
                    results.setdefault((tree, fast, name), []).append(us)
    import torch
    print(f"torch {torch.__version__}, {rounds} rounds, median of per-round best-of-5 (us)")
    print("| tree | TILEJIT_FAST_PATHS | direct | torch_op | torch.relu |")
    print("|---|---|---:|---:|---:|")
    for tree in trees:
        for fast in ("1", "0"):
            cells = [f"{statistics.median(results[(tree, fast, n)]):.2f}"
                     for n in ("direct", "torch_op", "torch.relu")]
            print(f"| {tree} | {fast} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
