"""What a CUDA launch costs the host: tilejit's direct call, bound handle, out_idx call and
torch op beside a raw ``cuLaunchKernel`` loop in C, a builtin that only launches, a C
extension reading the tensors through the exchange API, and ``torch.add``, for a vector
add and for tritonbench's 19-argument no-op (a benchmark, not a test; the rows are
described in ``tilejit/tools/bench_cuda.py``).

    python tests/bench_cuda.py [--calls N] [--repeats N] [--batch N] [--out FILE]

on a machine with a CUDA GPU and a CUDA build of torch (the same as ``python -m tilejit
bench --target cuda``), and

    python tests/bench_cuda.py --fake-driver [--quiet-driver] [--calls N] [--repeats N] [--batch N]

anywhere: the same rows against the test driver (``tests/fake_cuda``, built here), with
its fake tensors (``FakeCudaTensor``, whose DLPack exchange API is written in Python with
ctypes, so every tensor it hands over costs microseconds: the row given
``tilejit.from_dlpack`` views shows the call without that cost). The fake driver formats
and keeps a record of every call, which makes each launch cost microseconds too. Rows that
need torch CUDA tensors are skipped there, saying so. With ``--quiet-driver`` the fake
records no successful launch or context query, and the rows show the host's own cost
(the figures of docs/bound-launches.md). The targets on the test driver: a
bound call at most 1.5× the builtin, a direct call at most 3×.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from tilejit.tools import bench_cuda


def fake_device(directory: Path, quiet: bool = False) -> bench_cuda.Device:
    """The test driver, built into ``directory`` and opened by the core (it must be set
    before the first CUDA call of the process), with fake CUDA tensors; ``quiet``: its
    successful launches and context queries are not recorded (``FakeDriver.quiet``), so
    that the rows show the host's own cost rather than the fake's bookkeeping."""
    sys.path.insert(0, str(HERE))
    from conftest import load_fakes

    fakes = load_fakes()
    path = fakes.build_fake_driver(directory)
    os.environ["TILEJIT_LIBCUDA"] = str(path)
    driver = fakes.FakeDriver(path)
    driver.reset()

    def same_launch(launchers, written):
        seen = []
        driver.quiet(False)
        for _, launch in launchers:
            driver.reset()
            launch()
            # Modules are numbered in load order: the floors load the image again.
            seen.append({**driver.launches()[-1], "module": None})
        driver.quiet(quiet)
        return ", ".join(name for (name, _), got in zip(launchers, seen) if got != seen[0])

    driver.quiet(quiet)
    name = "the test driver (tests/fake_cuda)" + (", quiet" if quiet else "")
    return bench_cuda.Device(
        f"{name}, FakeCudaTensor", lambda n: fakes.FakeCudaTensor((n,)),
        fakes.SENTINEL_STREAM, str(path), test_driver=True,
        skip_torch="needs torch CUDA tensors: skipped on the test driver",
        skip_out_idx={"dlpack": "FakeCudaTensor allocates only through its exchange API, "
                                "which the dlpack backend does not use"},
        after_batch=driver.reset, same_launch=same_launch)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fake-driver", action="store_true",
                        help="run against the test driver (tests/fake_cuda), no GPU needed")
    parser.add_argument("--quiet-driver", action="store_true",
                        help="with --fake-driver: the driver records no successful launch, "
                             "so that rows show the host's cost, not the fake's records")
    parser.add_argument("--calls", type=int, default=bench_cuda.CALLS,
                        help="calls per timed repeat")
    parser.add_argument("--repeats", type=int, default=bench_cuda.REPEATS,
                        help="timed repeats per row")
    parser.add_argument("--batch", type=int, default=bench_cuda.BATCH,
                        help="calls per timed batch, the stream synchronised between batches")
    parser.add_argument("--out", help="also write the report to this file")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tilejit-bench-cuda-") as directory:
        try:
            device = (fake_device(Path(directory), args.quiet_driver) if args.fake_driver
                      else bench_cuda.gpu())
        except RuntimeError as exc:
            print(f"bench_cuda: {exc}", file=sys.stderr)
            return 1
        report, ok = bench_cuda.run(device, calls=args.calls, repeats=args.repeats,
                                    batch=args.batch)
    print(report, end="")
    if args.out:
        Path(args.out).write_text(report)
    print(f"\n(bench took {time.perf_counter() - start:.1f} s)", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
