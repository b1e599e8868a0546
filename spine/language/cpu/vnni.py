"""triton-cpu's `tl.extra.cpu.vnni_decode`: a B operand packed the way VNNI and AMX read it (the K values
of one column side by side: two 16-bit or four 8-bit ones per 32 bits) back to its (K, N) layout, so that
kernels written for triton-cpu's packed-B matmul run unchanged.

    packed[r, 2n + j] = B[2r + j, n]   (16-bit)      vnni_decode(packed) = B

8-bit values are decoded as two rounds of the 16-bit step, as triton-cpu does, so a kernel's results are
the same on both."""
import triton
import triton.language as tl


@triton.jit
def _pairs_decoded(x):
    """(R, 2N) with the pairs of rows 2r, 2r+1 interleaved in row r -> (2R, N)."""
    ROWS: tl.constexpr = x.shape[0]
    COLS: tl.constexpr = x.shape[1]
    return tl.reshape(tl.permute(tl.reshape(x, (ROWS, COLS // 2, 2)), (0, 2, 1)), (ROWS * 2, COLS // 2))


@triton.jit
def vnni_decode(x):
    tl.static_assert(len(x.shape) == 2, "vnni_decode takes a 2-D tile")
    tl.static_assert(x.dtype.primitive_bitwidth <= 16, "vnni_decode takes 8- or 16-bit values")
    decoded = _pairs_decoded(x)
    if x.dtype.primitive_bitwidth == 8:
        decoded = _pairs_decoded(decoded)
    return decoded
