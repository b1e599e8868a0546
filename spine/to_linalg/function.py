"""tt.func → func.func; program ids and grid sizes become trailing arguments.

    tt.func @add(%x: !tt.ptr<f32>, %n: i32)
  becomes
    func.func @add(%x: memref<?xf32>, %n: i32, %pid_x: i32, %pid_y: i32, %pid_z: i32,
                   %num_x: i32, %num_y: i32, %num_z: i32 [, views of pointer arguments as other types])

With bounds checks (debug), each pointer argument's extent (i64) follows the kernel's own arguments,
before the grid arguments (bounds.py).

Every pointer argument is a 1-D memref of its pointee; loads and stores view it through
memref.reinterpret_cast at the offsets the pointer states computed. The generated entry point
(compiler/entry.py) fills these arguments from the runtime's argument array.
"""
from __future__ import annotations

from mlir import ir
from mlir.dialects import func

from ..ir_names import DISJOINT_ARGUMENTS
from . import bounds, branches
from .converter import handles
from .states import PointerState
from .types import is_pointer, memref_of, pointee_type

NUM_GRID_ARGS = 6
SUPPORTED_ELEMENT_TYPES = {"f16", "bf16", "f32", "f64", "i8", "i16", "i32", "i64"}  # i1 arrives as i8


def _argument_name(arg: ir.Value, index: int) -> str:
    # triton names block arguments through their location: loc("x_ptr"(...)).
    text = str(arg.location)
    if text.startswith('loc("'):
        return text[5:text.index('"', 5)]
    return f"#{index}"


def kernel_signature(tt_func) -> tuple[list[ir.Type], list[str]]:
    """Converted argument types and the kinds ("ptr" or the scalar type) of the runtime arguments."""
    fn_type = ir.FunctionType(ir.TypeAttr(tt_func.attributes["function_type"]).value)
    types, kinds = [], []
    names = [_argument_name(a, i) for i, a in enumerate(tt_func.regions[0].blocks[0].arguments)]
    for ty, name in zip(fn_type.inputs, names):
        if is_pointer(ty):
            pointee = pointee_type(ty)
            if str(pointee) not in SUPPORTED_ELEMENT_TYPES:
                raise ValueError(f"argument '{name}' of kernel '{ir.StringAttr(tt_func.attributes['sym_name']).value}'"
                                 f" points to {pointee}, which Spine does not support; expected a tensor of "
                                 f"float16, bfloat16, float32, float64, int8-int64, uint8 or bool")
            types.append(memref_of(pointee))
            kinds.append("ptr")
        else:
            types.append(ty)
            kinds.append(str(ty))
    return types, kinds


def convert_function(conv, tt_func) -> func.FuncOp:
    name = ir.StringAttr(tt_func.attributes["sym_name"]).value
    arg_types, kinds = kernel_signature(tt_func)
    extent_types = bounds.extent_types(kinds) if conv.bounds is not None else []
    i32 = ir.IntegerType.get_signless(32)
    all_types = arg_types + extent_types + [i32] * NUM_GRID_ARGS
    with tt_func.location:
        fn = func.FuncOp(name, ir.FunctionType.get(all_types, []))
    entry = fn.add_entry_block()
    tt_block = tt_func.regions[0].blocks[0]
    for i, (old, new) in enumerate(zip(tt_block.arguments, entry.arguments)):
        if is_pointer(old.type):
            conv.argument_of[new] = i
            conv.bind(old, PointerState(new, pointee_type(old.type), (), 0, ()))
        else:
            conv.bind(old, new)
    first_grid_arg = len(arg_types) + len(extent_types)
    conv.program_ids = list(entry.arguments)[first_grid_arg:]
    conv.entry_block = entry
    with ir.InsertionPoint(entry):
        if conv.bounds is not None:
            names = [_argument_name(a, i) for i, a in enumerate(tt_block.arguments)]
            bounds.bind_extents(conv, kinds, names, list(entry.arguments)[len(arg_types):first_grid_arg])
    # Early returns make the body a CFG of several blocks: converted block by block, then made structured.
    branches.convert_region(conv, tt_func.regions[0], entry, lambda conv, op: conv.convert_op(op))
    if conv.argument_views:
        fn.attributes["function_type"] = ir.TypeAttr.get(
            ir.FunctionType.get([a.type for a in entry.arguments], []))
    disjoint = [p for p, arg in enumerate(entry.arguments) if conv.argument_of.get(arg) in conv.direct_load_args]
    if disjoint:
        fn.attributes[DISJOINT_ARGUMENTS] = ir.DenseI64ArrayAttr.get(disjoint)
    branches.lift_to_scf(fn)
    return fn


def argument_view(conv, base: ir.Value, element_type: ir.Type) -> ir.Value:
    """The kernel argument behind `base` seen as elements of another type of the same width.

    A memref's element type is fixed, so each such view is one more function argument (after the grid
    arguments) that the entry point fills with the same data pointer."""
    index = conv.argument_of[base]
    key = (index, str(element_type))
    if key not in conv.argument_views:
        view = conv.entry_block.add_argument(memref_of(element_type), ir.Location.unknown())
        conv.argument_views[key] = view
        conv.argument_of[view] = index
    return conv.argument_views[key]


@handles("tt.return")
def convert_return(conv, op):
    if len(op.operands):
        raise conv.unsupported(op, "kernels cannot return values")
    func.ReturnOp([])


@handles("tt.get_program_id")
def convert_program_id(conv, op):
    axis = ir.IntegerAttr(op.attributes["axis"]).value
    conv.bind(op.results[0], conv.program_ids[axis])


@handles("tt.get_num_programs")
def convert_num_programs(conv, op):
    axis = ir.IntegerAttr(op.attributes["axis"]).value
    conv.bind(op.results[0], conv.program_ids[3 + axis])
