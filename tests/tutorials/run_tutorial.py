"""Runs one of Triton's tutorials as a newcomer does, with the one line a CPU needs, its benchmark sweeps
cut to their first points (the tutorials' own `triton.testing.Benchmark` objects, whose sizes are made for
GPUs) and each timing to a few runs; a benchmark whose sizes are fixed inside its function is skipped when
TUTORIAL_SKIP_PLOTS names its plot. Its kernels and checks run as written.

    python tests/tutorials/run_tutorial.py TUTORIAL.py [TARGET]      (TARGET: host, the default, or riscv64)

With TUTORIAL_AS_WRITTEN=1 not even the one line is added: triton-cpu's own CPU tutorials choose the driver
themselves (`triton.runtime.driver.set_active_to_cpu()`), whose target is SPINE_TARGET.
"""
import os
import runpy
import sys


def _shrunk_benchmarks() -> None:
    """TUTORIAL_POINTS (default 1): how many of each sweep's points run; TUTORIAL_REP_MS (default 3): how
    long each timing repeats (bench/tutorials.py asks for more of both)."""
    import triton.testing
    real_init = triton.testing.Benchmark.__init__
    points = int(os.environ.get("TUTORIAL_POINTS", "1"))
    rep_ms = float(os.environ.get("TUTORIAL_REP_MS", "3"))

    def first_points(self, *args, **kwargs):
        if "x_vals" in kwargs:
            kwargs["x_vals"] = kwargs["x_vals"][:points]
        else:   # Benchmark(x_names, x_vals, ...)
            args = (args[0], args[1][:points]) + tuple(args[2:])
        real_init(self, *args, **kwargs)
    triton.testing.Benchmark.__init__ = first_points
    real_do_bench = triton.testing.do_bench

    def few_runs(fn, warmup=25, rep=100, *args, **kwargs):
        return real_do_bench(fn, min(warmup, rep_ms / 3), min(rep, rep_ms), *args, **kwargs)
    triton.testing.do_bench = few_runs
    skipped = set(filter(None, os.environ.get("TUTORIAL_SKIP_PLOTS", "").split(",")))
    real_run = triton.testing.Mark.run

    def run_unless_skipped(self, *args, **kwargs):
        benchmarks = self.benchmarks if isinstance(self.benchmarks, list) else [self.benchmarks]
        if any(b.plot_name in skipped for b in benchmarks):
            print(f"skipped benchmark {', '.join(b.plot_name for b in benchmarks)}: sizes fixed for GPUs")
            return None
        return real_run(self, *args, **kwargs)
    triton.testing.Mark.run = run_unless_skipped


def prepare(path: str, target: str) -> None:
    """The one line, the shrunk benchmarks, and a working directory the tutorial may write its plots into."""
    os.environ.setdefault("MPLBACKEND", "Agg")    # show_plots=True draws into no window
    import triton
    if os.environ.get("TUTORIAL_AS_WRITTEN") == "1":
        os.environ["SPINE_TARGET"] = target
    else:
        from spine.driver import CPUDriver
        triton.runtime.driver.set_active(CPUDriver(target=target))      # the one line
    _shrunk_benchmarks()
    sys.argv = [path]
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))   # as `python TUTORIAL.py` has it: its helpers
    os.chdir(os.environ.get("TUTORIAL_OUTPUT", os.getcwd()))


def main() -> None:
    path, target = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else "host")
    prepare(path, target)
    runpy.run_path(path, run_name="__main__")


if __name__ == "__main__":
    main()
