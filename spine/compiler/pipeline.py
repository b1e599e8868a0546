"""The stage functions CPUBackend.add_stages registers. Each runs one stage module, records what the
launcher needs in the metadata, and dumps its artifact when SPINE_TRITON_DUMP_PATH is set."""
from __future__ import annotations

from .dump import dump_artifact


def make_ttir(mod, metadata, options):
    from .ttir import run_ttir_passes
    mod = run_ttir_passes(mod, metadata)
    dump_artifact(options.dump_path, metadata["name"], "ttir", mod)
    return mod


def make_linalg(mod, metadata, options):
    from ..to_linalg import convert_ttir
    from .export import export_generic
    kernel = convert_ttir(export_generic(mod), direct_loads=not options.alias_safe)
    metadata["spine_arg_kinds"] = list(kernel.arg_kinds)
    metadata["spine_written_args"] = list(kernel.written_args)
    metadata["spine_argument_views"] = list(kernel.argument_views)
    metadata["spine_direct_load_args"] = list(kernel.direct_load_args)
    dump_artifact(options.dump_path, metadata["name"], "linalg", kernel.text)
    return kernel.text


def make_llir(linalg_text: str, metadata, options):
    from .lower import lower
    llir = lower(linalg_text, inline_copies=options.triple.startswith("riscv"))
    dump_artifact(options.dump_path, metadata["name"], "llir", llir)
    return llir


def make_so(llir: str, metadata, options):
    from .codegen import optimize_and_emit
    from .entry import entry_module_ir
    from .link import link_shared
    entry = entry_module_ir(metadata["name"], metadata["spine_arg_kinds"], metadata["spine_argument_views"],
                            options.triple)
    obj, asm = optimize_and_emit(llir, entry, options.triple, options.cpu, options.features,
                                 want_assembly=bool(options.dump_path))
    dump_artifact(options.dump_path, metadata["name"], "s", asm or "")
    dump_artifact(options.dump_path, metadata["name"], "o", obj)
    so = link_shared(obj)
    dump_artifact(options.dump_path, metadata["name"], "so", so)
    return so
