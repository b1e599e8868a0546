"""The uniform entry point every kernel .so exports:

    void spine_entry(void **args, i32 pid_x, i32 pid_y, i32 pid_z, i32 num_x, i32 num_y, i32 num_z)

args[i] points at the i-th runtime argument's value (a data pointer for tensors). The grid runtime and the
QEMU server call only this symbol, so they never need a per-signature launcher. It unpacks the arguments
into the kernel's lowered signature, where each memref<?xT> argument became (allocated ptr, aligned ptr,
offset, size, stride). A bounds-checked kernel's arguments end with each pointer argument's extent, an
i64 like any scalar (to_linalg/bounds.py)."""
from __future__ import annotations

from llvmlite import ir as llir

from ..ir_names import CORE_MARCHID_SYMBOL, ENTRY_SYMBOL, streaming_flag_symbol
_SCALARS = {"i1": llir.IntType(1), "i8": llir.IntType(8), "i16": llir.IntType(16), "i32": llir.IntType(32),
            "i64": llir.IntType(64), "f16": llir.HalfType(), "bf16": llir.IntType(16), "f32": llir.FloatType(),
            "f64": llir.DoubleType()}


def entry_module_ir(kernel_name: str, arg_kinds, argument_views, triple: str, streaming_programs: int = 0,
                    core_marchid: int = 0) -> str:
    """`argument_views`: for each extra memref argument after the grid arguments, the runtime argument
    whose data pointer it views (see to_linalg/function.py). `streaming_programs`: from how many programs
    a launch sets the streaming-stores flag (compiler/streaming_stores.py); 0: no flag. `core_marchid`: the
    SpacemiT core the grid must run on (CORE_MARCHID_SYMBOL); 0: any."""
    module = llir.Module(name="spine_entry")
    module.triple = triple
    if core_marchid:
        marchid = llir.GlobalVariable(module, llir.IntType(64), name=CORE_MARCHID_SYMBOL)
        marchid.global_constant = True
        marchid.linkage = "weak_odr"   # the same in every kernel of an ahead-of-time library
        marchid.initializer = llir.Constant(llir.IntType(64), core_marchid)
    ptr = llir.PointerType()
    i32, i64 = llir.IntType(32), llir.IntType(64)
    params = []
    for kind in arg_kinds:
        if kind == "ptr":
            params += [ptr, ptr, i64, i64, i64]
        else:
            params.append(_scalar_type(kind))
    descriptor = [ptr, ptr, i64, i64, i64]
    kernel = llir.Function(module, llir.FunctionType(
        llir.VoidType(), params + [i32] * 6 + descriptor * len(argument_views)), name=kernel_name)
    entry = llir.Function(module, llir.FunctionType(llir.VoidType(), [ptr] + [i32] * 6), name=ENTRY_SYMBOL)
    builder = llir.IRBuilder(entry.append_basic_block("entry"))
    args_array, *grid = entry.args
    if streaming_programs:
        _set_streaming_flag(module, kernel_name, entry, builder, grid[3:], streaming_programs)
    slots = [builder.load(builder.gep(args_array, [llir.Constant(i64, i)], source_etype=ptr), typ=ptr)
             for i in range(len(arg_kinds))]

    def memref_descriptor(slot):
        data = builder.load(slot, typ=ptr)
        # size is never read: loads and stores view the argument through explicit sizes
        return [data, data, llir.Constant(i64, 0), llir.Constant(i64, 1 << 62), llir.Constant(i64, 1)]

    call_args = []
    for slot, kind in zip(slots, arg_kinds):
        call_args += memref_descriptor(slot) if kind == "ptr" else [builder.load(slot, typ=_scalar_type(kind))]
    call_args += list(grid)
    for index in argument_views:
        call_args += memref_descriptor(slots[index])
    builder.call(kernel, call_args)
    builder.ret_void()
    return str(module)


def _set_streaming_flag(module, kernel_name: str, entry, builder, counts, streaming_programs: int) -> None:
    """Sets the flag to whether the launch has at least `streaming_programs` programs, leaving `builder` in a
    new block after it. Written only when it changes: every program of the grid runs this, on every thread,
    and a store each time would bounce the flag's cache line between cores."""
    i8, i64 = llir.IntType(8), llir.IntType(64)
    flag = llir.GlobalVariable(module, i8, name=streaming_flag_symbol(kernel_name))
    flag.storage_class = "hidden"   # one flag per kernel library, never bound to another's
    flag.initializer = llir.Constant(i8, 0)
    programs = llir.Constant(i64, 1)
    for count in counts:
        programs = builder.mul(programs, builder.zext(count, i64))
    streams = builder.zext(builder.icmp_unsigned(">=", programs, llir.Constant(i64, streaming_programs)), i8)
    changed = builder.icmp_unsigned("!=", builder.load(flag, typ=i8), streams)
    update, rest = entry.append_basic_block("update_flag"), entry.append_basic_block("call_kernel")
    builder.cbranch(changed, update, rest)
    builder.position_at_end(update)
    builder.store(streams, flag)
    builder.branch(rest)
    builder.position_at_end(rest)


def _scalar_type(kind: str):
    try:
        return _SCALARS[kind]
    except KeyError:
        raise ValueError(f"kernel argument of type {kind} is not supported yet") from None
