"""The stage functions CPUBackend.add_stages registers. Each runs one stage module, records what the
launcher needs in the metadata, and dumps its artifact when SPINE_TRITON_DUMP_PATH is set.

The stages that run native MLIR or LLVM code (linalg, llir, obj) run in a compile worker process
(compile_worker.py): a crash there becomes a SpineCompilationError, and a crashed codegen is retried
with a safer configuration."""
from __future__ import annotations

import threading
import warnings

from ..errors import SpineCompilationError
from .compile_worker import NativeCrash, StageTimeout, pool
from .dump import dump_artifact

_warned: set = set()
_warned_lock = threading.Lock()


def make_ttir(mod, metadata, options):
    from .ttir import record_microkernel, record_prefetch, run_ttir_passes
    pool().prestart()  # its imports overlap with triton's passes
    mod = run_ttir_passes(mod, metadata)
    record_microkernel(mod, options.triple, options.cpu, options.features)
    record_prefetch(mod, options.triple, options.cpu)
    dump_artifact(options.dump_path, metadata["name"], "ttir", mod)
    return mod


def _in_worker(kernel: str, stage: str, **kwargs):
    try:
        return pool().run(stage, **kwargs)
    except (NativeCrash, StageTimeout) as err:
        raise SpineCompilationError(f"kernel '{kernel}': {err}") from None


def make_linalg(mod, metadata, options):
    from .export import export_generic
    kernel = _in_worker(metadata["name"], "linalg", generic_ttir=export_generic(mod),
                        direct_loads=not options.alias_safe, bounds_check=options.debug)
    metadata["spine_arg_kinds"] = list(kernel.arg_kinds)
    metadata["spine_written_args"] = list(kernel.written_args)
    metadata["spine_argument_views"] = list(kernel.argument_views)
    metadata["spine_direct_load_args"] = list(kernel.direct_load_args)
    metadata["spine_bounds_checked"] = kernel.bounds_checked
    metadata["spine_stored_bytes_per_program"] = kernel.stored_bytes_per_program
    dump_artifact(options.dump_path, metadata["name"], "linalg", kernel.text)
    return kernel.text


def make_llir(linalg_text: str, metadata, options):
    from .lower import LoweringChoices
    llir = _in_worker(metadata["name"], "llir", linalg_text=linalg_text,
                      choices=LoweringChoices.for_target(options.triple, options.debug, options.cpu,
                                                                options.features))
    dump_artifact(options.dump_path, metadata["name"], "llir", llir)
    return llir


def make_so(llir: str, metadata, options):
    from .entry import entry_module_ir
    from .link import link_shared
    entry = entry_module_ir(metadata["name"], metadata["spine_arg_kinds"], metadata["spine_argument_views"],
                            options.triple, _streaming_programs(metadata, options))
    (obj, asm), config = codegen_with_fallbacks(metadata["name"], llir, entry, options,
                                                tuple(metadata["spine_written_args"]))
    # The cached kernel says how it was really built (a fallback may have replaced the requested CPU).
    metadata["spine_codegen"] = config.describe()
    dump_artifact(options.dump_path, metadata["name"], "s", asm or "")
    dump_artifact(options.dump_path, metadata["name"], "o", obj)
    so = link_shared(obj, options.triple)
    dump_artifact(options.dump_path, metadata["name"], "so", so)
    return so


def _streaming_programs(metadata, options) -> int:
    """From how many programs a launch's stores stream; 0: never. x86 only: RISC-V's non-temporal hints
    (Zihintntl) are not in the cores Spine targets."""
    from .streaming_stores import streaming_programs
    if not options.triple.startswith("x86_64"):
        return 0
    return streaming_programs(metadata["spine_stored_bytes_per_program"], options.streaming_stores_mb << 20)


def codegen_with_fallbacks(kernel: str, llir: str, entry: str, options, written_args: tuple = ()):
    """LLVM codegen in a worker; after a native crash, again with each safer configuration in turn."""
    from .codegen import CodegenConfig, safer_configs
    requested = CodegenConfig(options.cpu)
    crashes = []
    for config in [requested] + safer_configs(options.triple, options.cpu, options.features):
        try:
            result = pool().run("obj", llvm_ir=llir, entry_ir=entry, triple=options.triple, cpu=config.cpu,
                                features=options.features, want_assembly=bool(options.dump_path),
                                loop_vectorize=config.loop_vectorize, written_args=written_args)
        except NativeCrash as crash:
            crashes.append(f"with {config.describe()}: {crash.detail}")
            continue
        except StageTimeout as err:
            raise SpineCompilationError(f"kernel '{kernel}': {err}") from None
        if config != requested:
            _warn_once(kernel, requested, config, crashes[0])
        return result, config
    raise SpineCompilationError(f"kernel '{kernel}': LLVM codegen crashed in every configuration tried:\n"
                                + "\n".join(crashes))


def _warn_once(kernel: str, requested, used, first_crash: str) -> None:
    key = (requested, used)
    with _warned_lock:
        if key in _warned:
            return
        _warned.add(key)
    reason = first_crash.splitlines()[-1] if first_crash else ""
    warnings.warn(f"Spine: LLVM crashed compiling kernel '{kernel}' ({requested.describe()}): {reason}; "
                  f"compiled with {used.describe()} instead (further kernels falling back the same way are "
                  f"not reported)", RuntimeWarning, stacklevel=2)
