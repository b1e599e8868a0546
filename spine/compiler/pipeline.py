"""The stage functions CPUBackend.add_stages registers. Each runs one stage module, records what later
stages and the launcher need in the kernel's facts (kernel_facts.py, in the metadata), and dumps its
artifact when SPINE_TRITON_DUMP_PATH is set.

The stages that run native MLIR or LLVM code (linalg, llir, obj) run in a compile worker process
(compile_worker.py): a crash there becomes a SpineCompilationError, and a crashed codegen is retried
with a safer configuration."""
from __future__ import annotations

import base64
import hashlib
import os
import threading
import warnings

from ..cache import atomic_write_bytes
from ..errors import SpineCompilationError
from ..kernel_facts import METADATA_KEY, KernelFacts
from ..device_shape import kernel_shared_bytes
from ..targets import generic_cpu, target_from_name
from .compile_worker import NativeCrash, StageTimeout, pool
from .dump import dump_artifact

_warned: set = set()
_warned_lock = threading.Lock()


def make_ttir(mod, metadata, options):
    from .ttir import record_fp_fusion, record_microkernel, record_prefetch, run_ttir_passes
    pool().prestart()  # its imports overlap with triton's passes
    mod = run_ttir_passes(mod, metadata)
    record_microkernel(mod, options.triple, options.cpu, options.features, options.matrix_unit)
    record_prefetch(mod, options.triple, options.cpu)
    record_fp_fusion(mod, options.enable_fp_fusion)
    dump_artifact(options.dump_path, metadata["name"], "ttir", mod)
    return mod


def _in_worker(name: str, stage: str, **kwargs):
    try:
        return pool().run(stage, **kwargs)
    except (NativeCrash, StageTimeout) as err:
        raise SpineCompilationError(f"kernel '{name}': {err}") from None


def _facts(metadata) -> KernelFacts:
    return KernelFacts.from_metadata(metadata)


def make_linalg(mod, metadata, options):
    from .export import export_generic
    kernel = _in_worker(metadata["name"], "linalg", generic_ttir=export_generic(mod),
                        direct_loads=not options.alias_safe, bounds_check=options.debug)
    facts = KernelFacts().updated(arg_kinds=kernel.arg_kinds, written_args=kernel.written_args,
                                  argument_views=kernel.argument_views, direct_load_args=kernel.direct_load_args,
                                  bounds_checked=kernel.bounds_checked,
                                  stored_bytes_per_program=kernel.stored_bytes_per_program,
                                  integer_addresses=kernel.integer_addresses, address_args=kernel.address_args,
                                  matrix_units=kernel.matrix_units)
    metadata[METADATA_KEY] = facts.to_metadata()
    metadata["shared"] = kernel_shared_bytes(kernel.largest_tile_bytes, target_from_name(options.arch))
    dump_artifact(options.dump_path, metadata["name"], "linalg", kernel.text)
    return kernel.text


def make_llir(linalg_text: str, metadata, options):
    """The MLIR lowering's passes, then the LLVM passes with O3: the optimised LLVM IR."""
    from ..spacemit_cores import placed_marchid
    from .entry import entry_module_ir
    from .lower import LoweringChoices
    kernel, facts = metadata["name"], _facts(metadata)
    streaming = _streaming_programs(facts, options)
    choices = LoweringChoices.for_target(options.triple, options.debug, options.cpu, options.features,
                                         streaming_stores=bool(streaming), fp_fusion=options.enable_fp_fusion)
    llvm_ir, lowering = _in_worker(kernel, "lower", linalg_text=linalg_text, choices=choices,
                                   dump_dir=options.dump_passes, kernel=kernel)
    entry = entry_module_ir(kernel, facts.arg_kinds, facts.argument_views, options.triple, streaming,
                            placed_marchid(options.core, facts.matrix_units))
    optimized, config = codegen_with_fallbacks(kernel, llvm_ir, entry, options,
                                               bf16=lowering.ran("bf16-as-integers"))
    # The cached kernel says how it was really built (a fallback may have replaced the requested CPU).
    metadata[METADATA_KEY] = facts.updated(codegen=config.describe(), codegen_cpu=config.cpu,
                                           gave_up=lowering.gave_up() + optimized.record.gave_up()).to_metadata()
    if options.dump_passes:
        listing = f"MLIR passes ({kernel}.NN-PASS.mlir):\n{lowering.text()}" \
                  f"LLVM passes ({kernel}.llvm.NN-PASS.ll):\n{optimized.record.text()}"
        atomic_write_bytes(os.path.join(options.dump_passes, f"{kernel}.passes.txt"), listing.encode())
    dump_artifact(options.dump_path, kernel, "llir", optimized.text)
    _emitted.keep(optimized)
    return optimized.text


class _EmittedObjects:
    """The objects the llir stage emitted (codegen.optimize says why there), by the llir text they were
    emitted from, until the obj stage of the same compile takes them. A compile that stops between the two
    stages leaves its entry behind: the table keeps only the latest few."""
    LIMIT = 64

    def __init__(self):
        self.lock = threading.Lock()
        self.objects: dict = {}

    def keep(self, optimized) -> None:
        with self.lock:
            while len(self.objects) >= self.LIMIT:
                self.objects.pop(next(iter(self.objects)))
            self.objects[_text_key(optimized.text)] = (optimized.obj, optimized.asm)

    def take(self, llir: str):
        with self.lock:
            return self.objects.pop(_text_key(llir), None)


def _text_key(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


_emitted = _EmittedObjects()


def make_obj(llir: str, metadata, options) -> str:
    """The optimised module's machine code, for the CPU the llir stage optimised for; after a native crash,
    for the instruction set's generic CPU. Triton keeps every stage's artifact but the last one as text, so
    the object file is kept base64-encoded (object_bytes decodes it); the dump is the file itself."""
    kernel, facts = metadata["name"], _facts(metadata)
    emitted = _emitted.take(llir)
    if emitted is not None:
        return _obj_artifact(kernel, *emitted, options)
    # llir from elsewhere (an override of triton's, a tool): emitted from its text
    cpus = [facts.codegen_cpu or options.cpu]
    generic = generic_cpu(options.triple, cpus[0], options.features)
    cpus += [generic] if generic != cpus[0] else []
    crashes = []
    for cpu in cpus:
        try:
            obj, asm = pool().run("obj", optimized_ir=llir, triple=options.triple, cpu=cpu, features=options.features,
                                  want_assembly=bool(options.dump_path))
        except NativeCrash as crash:
            crashes.append(f"with cpu={cpu}: {crash.detail}")
            continue
        except StageTimeout as err:
            raise SpineCompilationError(f"kernel '{kernel}': {err}") from None
        return _obj_artifact(kernel, obj, asm, options)
    raise SpineCompilationError(f"kernel '{kernel}': LLVM's code emission crashed:\n" + "\n".join(crashes))


def _obj_artifact(kernel: str, obj: bytes, asm, options) -> str:
    dump_artifact(options.dump_path, kernel, "s", asm or "")
    dump_artifact(options.dump_path, kernel, "obj", obj)
    return base64.b64encode(obj).decode()


def object_bytes(obj_artifact: str) -> bytes:
    """The object file an `obj` artifact holds."""
    return base64.b64decode(obj_artifact)


def make_so(obj: str, metadata, options):
    from .link import link_shared
    so = link_shared(object_bytes(obj), options.triple)
    dump_artifact(options.dump_path, metadata["name"], "so", so)
    return so


def build_from_linalg(linalg_text: str, metadata: dict, options) -> bytes:
    """The CPU-dependent stages (llir, obj, so) of a kernel converted once, for `options`' CPU: building
    one kernel for other CPUs. `metadata` holds the kernel's name and facts and gets the llir stage's."""
    llir = make_llir(linalg_text, metadata, options)
    return make_so(make_obj(llir, metadata, options), metadata, options)


def _streaming_programs(facts: KernelFacts, options) -> int:
    """From how many programs a launch streams its stores; 0: never. x86 only: RISC-V's non-temporal hints
    (Zihintntl) are not in the cores Spine targets."""
    from .streaming_stores import streaming_programs
    if not options.triple.startswith("x86_64"):
        return 0
    return streaming_programs(facts.stored_bytes_per_program, options.streaming_stores_mb << 20)


def codegen_with_fallbacks(kernel: str, llvm_ir: str, entry: str, options, bf16: bool = False):
    """The LLVM passes and code emission in a worker; after a native crash, again with each safer
    configuration in turn. Returns (codegen.Optimized, the configuration used)."""
    from .codegen import CodegenConfig, safer_configs
    requested = CodegenConfig(options.cpu)
    crashes = []
    for config in [requested] + safer_configs(options.triple, options.cpu, options.features):
        try:
            result = pool().run("optimize", llvm_ir=llvm_ir, entry_ir=entry, triple=options.triple, cpu=config.cpu,
                                features=options.features, loop_vectorize=config.loop_vectorize,
                                want_assembly=bool(options.dump_path),
                                dump_dir=options.dump_passes, kernel=kernel, bf16=bf16)
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
