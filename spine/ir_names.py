"""Names one stage writes into IR text for a later stage to find again: the one place the stages agree
on, so that none imports another."""

# tt.atomic_cas becomes a call to `<CAS_FUNCTION>.<element type>`; after bufferization the lowering
# replaces each call with a memref.generic_atomic_rmw (compiler/atomic_expansion.py), which bufferization
# could not see through had it been emitted directly.
CAS_FUNCTION = "spine.atomic_cas"

# On an scf.for: an smt.parallel loop (the frontend's mark, language/smt/parallel_loop.py), kept by the
# conversion for the lowering to run on threads (compiler/parallel_loops.py).
PARALLEL_LOOP = "smt.parallel_arg0"

# On the TTIR module: the target's packed-matmul micro-kernel (compiler/ttir.py records it, to_linalg/dot.py
# lowers tt.dot to it).
MICROKERNEL_ATTRIBUTE = "spine.microkernel"

# On the TTIR module, when the target's cores gain from a row-wise kernel prefetching the next program's row
# (compiler/ttir.py records it from targets.prefetches_next_program, to_linalg/prefetch.py reads it).
PREFETCH_ATTRIBUTE = "spine.prefetch_next_program"

# On the TTIR module, when the kernel was compiled with enable_fp_fusion=False (compiler/ttir.py records it,
# to_linalg/reduce.py then rounds each half-precision product before it is summed).
NO_FP_FUSION_ATTRIBUTE = "spine.no_fp_fusion"

# On the call of a packed matmul whose product is a plain buffer (to_linalg/smt_dot.py): the name of its
# twin that writes into a view of a larger matrix instead, for a whole tile stored straight into its
# destination (compiler/products_into_destination.py).
STRIDED_TWIN = "spine.strided_twin"
# On the call of a packed matmul that adds its product into a loop's accumulator in place: the name of its
# twin that takes the accumulator as a view of a larger matrix, for an accumulator kept in the destination
# its tile is stored into whole (compiler/carried_products.py).
CARRIED_TWIN = "spine.carried_twin"
# On a matrix product's function (AMX, VNNI, the FMA kernels): the name of its twin whose B panel may be
# kept for the rest of the launch, on each thread, where a last i1 argument says B's memory is written by no
# program (compiler/shared_panels.py; cpp/shared_panels.h).
SHARED_PANEL_TWIN = "spine.shared_panel_twin"
# On an argument of a function the kernel calls (an argument attribute): the function only reads through it
# (to_linalg/smt_microkernel.py's matrix products, A and B), so the call does not write that memory.
READ_ONLY_ARGUMENT = "spine.read_only"
# On the kernel function: the pointer arguments it reads in place, which the launcher has checked overlap
# no memory the kernel writes (to_linalg.convert_ttir's `direct_loads`).
DISJOINT_ARGUMENTS = "spine.disjoint_arguments"

# On a tt.load through a block pointer: spine-triton's "neg_inf" or "inf" padding, which triton's IR cannot
# hold (language/frontend.py builds the load zero-padded and marks it; to_linalg/load.py pads with it).
PADDING_ATTRIBUTE = "spine.padding"

# The uniform entry point every kernel library exports (compiler/entry.py builds it; the grid runtime, the
# kernel server and the LLVM rewrites find it by this name).
ENTRY_SYMBOL = "spine_entry"
# The marchid (as /proc/cpuinfo prints it) of the cores a kernel's grid must run on, where its code runs on
# no other (spacemit_cores.py): the runtime places the grid's threads there (cpp/core_placement.c).
CORE_MARCHID_SYMBOL = "spine_core_marchid"

# The streaming-stores flag the entry point sets and the streaming rewrite reads (compiler/streaming_stores.py):
# one per kernel, named after it, so that an ahead-of-time library of several kernels has one each.
STREAMING_FLAG_PREFIX = "spine_streaming_stores."


def streaming_flag_symbol(kernel: str) -> str:
    return STREAMING_FLAG_PREFIX + kernel
