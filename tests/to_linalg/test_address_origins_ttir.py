"""Which arguments a dereferenced integer address comes from (to_linalg/address_origins.py), from TTIR text:
what the conversion records in LinalgKernel.address_args, which the launcher reads to translate the
addresses where the kernel runs in another address space."""
from spine.compiler.export import export_generic
from spine.kernel_facts import UNTRACED_ADDRESS
from spine.to_linalg import convert_ttir
from tests.to_linalg.test_branches_ttir import parse_ttir


def _dereferencing(arguments: str, body: str) -> str:
    """A kernel that computes the integer %v from its arguments, then loads through it into %out."""
    return f"""
module {{
  tt.func public @k({arguments}, %out: !tt.ptr<f32>) {{
{body}
    %a = tt.int_to_ptr %v : i64 -> !tt.ptr<f32>
    %x = tt.load %a : !tt.ptr<f32>
    tt.store %out, %x : !tt.ptr<f32>
    tt.return
  }}
}}
"""


TABLE = _dereferencing("%table: !tt.ptr<i64>, %g: i32", """
    %p = tt.addptr %table, %g : !tt.ptr<i64>, i32
    %v = tt.load %p : !tt.ptr<i64>""")

# an address argument plus an offset read from a table: both sides may be the address
SCALAR_PLUS_OFFSET = _dereferencing("%address: i64, %offsets: !tt.ptr<i64>", """
    %o = tt.load %offsets : !tt.ptr<i64>
    %c8 = arith.constant 8 : i64
    %s = arith.addi %address, %c8 : i64
    %v = arith.addi %s, %o : i64""")

# an address carried around a loop: no known origin
LOOP_CARRIED = _dereferencing("%table: !tt.ptr<i64>, %n: i32", """
    %t = tt.load %table : !tt.ptr<i64>
    %c0 = arith.constant 0 : i32
    %c1 = arith.constant 1 : i32
    %c4 = arith.constant 4 : i64
    %v = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %t) -> (i64) : i32 {
      %next = arith.addi %acc, %c4 : i64
      scf.yield %next : i64
    }""")

# integers turned into pointers and back, never dereferenced: nothing to translate
NOT_DEREFERENCED = """
module {
  tt.func public @k(%table: !tt.ptr<i64>) {
    %r = tt.make_range {end = 4 : i32, start = 0 : i32} : tensor<4xi32>
    %s = tt.splat %table : !tt.ptr<i64> -> tensor<4x!tt.ptr<i64>>
    %ptrs = tt.addptr %s, %r : tensor<4x!tt.ptr<i64>>, tensor<4xi32>
    %v = tt.load %ptrs : tensor<4x!tt.ptr<i64>>
    %a = tt.int_to_ptr %v : tensor<4xi64> -> tensor<4x!tt.ptr<f32>>
    %b = tt.ptr_to_int %a : tensor<4x!tt.ptr<f32>> -> tensor<4xi64>
    tt.store %ptrs, %b : tensor<4x!tt.ptr<i64>>
    tt.return
  }
}
"""


def _kernel(text: str, tmp_path):
    return convert_ttir(export_generic(parse_ttir(text, tmp_path)))


def test_an_address_loaded_from_a_table_comes_from_the_table(tmp_path):
    kernel = _kernel(TABLE, tmp_path)
    assert kernel.integer_addresses and kernel.address_args == (0,)


def test_an_address_plus_offsets_names_every_argument_it_is_made_of(tmp_path):
    kernel = _kernel(SCALAR_PLUS_OFFSET, tmp_path)
    assert kernel.address_args == (0, 1)


def test_an_address_carried_around_a_loop_is_untraced(tmp_path):
    kernel = _kernel(LOOP_CARRIED, tmp_path)
    assert kernel.integer_addresses and UNTRACED_ADDRESS in kernel.address_args


def test_addresses_only_passed_along_need_no_translation(tmp_path):
    kernel = _kernel(NOT_DEREFERENCED, tmp_path)
    assert not kernel.integer_addresses and kernel.address_args == ()
