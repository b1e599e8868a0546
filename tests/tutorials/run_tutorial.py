"""Runs one of Triton's tutorials as a newcomer does, with the one line a CPU needs, its benchmark sweeps
cut to their first point (the tutorials' own `triton.testing.Benchmark` objects, whose sizes are made for
GPUs) and each timing to a few runs; a benchmark whose sizes are fixed inside its function is skipped when
TUTORIAL_SKIP_PLOTS names its plot. Its kernels and checks run as written.

    python tests/tutorials/run_tutorial.py TUTORIAL.py [TARGET]      (TARGET: host, the default, or riscv64)
"""
import os
import runpy
import sys


def _shrunk_benchmarks() -> None:
    import triton.testing
    real_init = triton.testing.Benchmark.__init__

    def first_point(self, *args, **kwargs):
        if "x_vals" in kwargs:
            kwargs["x_vals"] = kwargs["x_vals"][:1]
        else:   # Benchmark(x_names, x_vals, ...)
            args = (args[0], args[1][:1]) + tuple(args[2:])
        real_init(self, *args, **kwargs)
    triton.testing.Benchmark.__init__ = first_point
    real_do_bench = triton.testing.do_bench

    def few_runs(fn, warmup=25, rep=100, *args, **kwargs):
        return real_do_bench(fn, 1, 3, *args, **kwargs)
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
    from spine.driver import CPUDriver
    triton.runtime.driver.set_active(CPUDriver(target=target))      # the one line
    _shrunk_benchmarks()
    sys.argv = [path]
    os.chdir(os.environ.get("TUTORIAL_OUTPUT", os.getcwd()))


def main() -> None:
    path, target = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else "host")
    prepare(path, target)
    runpy.run_path(path, run_name="__main__")


if __name__ == "__main__":
    main()
