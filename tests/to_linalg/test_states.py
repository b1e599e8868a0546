"""The pointer/index/mask algebra on compile-time constants (no IR is emitted for constants)."""
import pytest
from mlir import ir

from spine.to_linalg import states as st


@pytest.fixture(autouse=True)
def mlir_context():
    with ir.Context(), ir.Location.unknown():
        yield


def i32():
    return ir.IntegerType.get_signless(32)


def arange(n, start=0):
    return st.AffineIndex((n,), start, (1,), i32())


def splat(value, shape):
    return st.AffineIndex(shape, value, (0,) * len(shape), i32())


def test_offsets_add_and_scale():
    offs = st.add_index(st.mul_index(splat(3, (8,)), splat(128, (8,))), arange(8))
    assert offs.offset == 384 and offs.strides == (1,)


def test_affine_times_affine_is_not_affine():
    assert st.mul_index(arange(8), arange(8)) is None


def test_two_dimensional_tile_offsets():
    rows = st.broadcast(st.expand_dims(st.mul_index(arange(4), splat(100, (4,))), 1), (4, 8))
    cols = st.broadcast(st.expand_dims(arange(8), 0), (4, 8))
    tile = st.add_index(rows, cols)
    assert tile.shape == (4, 8) and tile.strides == (100, 1) and tile.offset == 0


@pytest.mark.parametrize("pred,n,expected", [("slt", 5, (0, 5)), ("sle", 5, (0, 6)), ("sgt", 5, (6, 8)),
                                              ("sge", 5, (5, 8))])
def test_comparisons_become_bounds(pred, n, expected):
    mask = st.compare_to_mask(pred, arange(8), splat(n, (8,)))
    assert mask.bounds == (expected,)


def test_flipped_comparison():
    mask = st.compare_to_mask("sgt", splat(5, (8,)), arange(8))  # 5 > i  ⇔  i < 5
    assert mask.bounds == ((0, 5),)


def test_strided_comparison_rounds_up():
    # 3*i + 1 < 10  ⇔  i < 3
    mask = st.compare_to_mask("slt", st.AffineIndex((8,), 1, (3,), i32()), splat(10, (8,)))
    assert mask.bounds == ((0, 3),)


def test_and_intersects_and_clamps():
    a = st.MaskState((4, 8), ((0, 3), (0, 8)))
    b = st.MaskState((4, 8), ((0, 4), (2, 20)))
    both = st.and_masks(a, b)
    assert st.clamped_bounds(both) == ((0, 3), (2, 6))


def test_broadcast_of_a_decided_unit_dim():
    inside = st.MaskState((1, 8), ((0, 1), (0, 5)))
    outside = st.MaskState((1, 8), ((0, 0), (0, 5)))
    assert st.broadcast(inside, (4, 8)).bounds == ((0, 4), (0, 5))
    assert st.broadcast(outside, (4, 8)).bounds == ((0, 0), (0, 5))


def test_two_varying_dims_are_not_a_box():
    both = st.add_index(st.broadcast(st.expand_dims(arange(4), 1), (4, 4)),
                        st.broadcast(st.expand_dims(arange(4), 0), (4, 4)))
    assert st.compare_to_mask("slt", both, splat(3, (4, 4))) is None
