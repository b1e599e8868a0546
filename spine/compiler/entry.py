"""The uniform entry point every kernel .so exports:

    void spine_entry(void **args, i32 pid_x, i32 pid_y, i32 pid_z, i32 num_x, i32 num_y, i32 num_z)

args[i] points at the i-th runtime argument's value (a data pointer for tensors). The grid runtime and the
QEMU server call only this symbol, so they never need a per-signature launcher. It unpacks the arguments
into the kernel's lowered signature, where each memref<?xT> argument became (allocated ptr, aligned ptr,
offset, size, stride)."""
from __future__ import annotations

from llvmlite import ir as llir

ENTRY_SYMBOL = "spine_entry"
_SCALARS = {"i1": llir.IntType(1), "i8": llir.IntType(8), "i16": llir.IntType(16), "i32": llir.IntType(32),
            "i64": llir.IntType(64), "f16": llir.HalfType(), "bf16": llir.IntType(16), "f32": llir.FloatType(),
            "f64": llir.DoubleType()}


def entry_module_ir(kernel_name: str, arg_kinds, triple: str) -> str:
    module = llir.Module(name="spine_entry")
    module.triple = triple
    ptr = llir.PointerType()
    i32, i64 = llir.IntType(32), llir.IntType(64)
    params = []
    for kind in arg_kinds:
        if kind == "ptr":
            params += [ptr, ptr, i64, i64, i64]
        else:
            params.append(_scalar_type(kind))
    kernel = llir.Function(module, llir.FunctionType(llir.VoidType(), params + [i32] * 6), name=kernel_name)
    entry = llir.Function(module, llir.FunctionType(llir.VoidType(), [ptr] + [i32] * 6), name=ENTRY_SYMBOL)
    builder = llir.IRBuilder(entry.append_basic_block("entry"))
    args_array, *grid = entry.args
    call_args = []
    for i, kind in enumerate(arg_kinds):
        slot = builder.load(builder.gep(args_array, [llir.Constant(i64, i)], source_etype=ptr), typ=ptr)
        if kind == "ptr":
            data = builder.load(slot, typ=ptr)
            # size is never read: loads and stores view the argument through explicit sizes
            call_args += [data, data, llir.Constant(i64, 0), llir.Constant(i64, (1 << 62)), llir.Constant(i64, 1)]
        else:
            call_args.append(builder.load(slot, typ=_scalar_type(kind)))
    builder.call(kernel, call_args + list(grid))
    builder.ret_void()
    return str(module)


def _scalar_type(kind: str):
    try:
        return _SCALARS[kind]
    except KeyError:
        raise ValueError(f"kernel argument of type {kind} is not supported yet") from None
