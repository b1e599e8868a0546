"""The link stage: what a kernel's shared object asks of the process that loads it."""
import io
import platform

import pytest
import torch
import triton
import triton.language as tl
from elftools.elf.elffile import ELFFile

from spine.driver import CPUDriver
from tests.kernels import softmax_kernel


def imported_versions(so: bytes) -> dict[str, str | None]:
    """Each undefined dynamic symbol and the symbol version it asks for (None: unversioned)."""
    elf = ELFFile(io.BytesIO(so))
    versions = {}
    needed = elf.get_section_by_name(".gnu.version_r")
    if needed is not None:
        for _, auxiliaries in needed.iter_versions():
            for aux in auxiliaries:
                versions[aux["vna_other"]] = aux.name
    symbols = elf.get_section_by_name(".dynsym")
    indices = elf.get_section_by_name(".gnu.version")
    out = {}
    for i, symbol in enumerate(symbols.iter_symbols()):
        if symbol.name and symbol["st_shndx"] == "SHN_UNDEF":
            index = indices.get_symbol(i)["ndx"] if indices is not None else None
            out[symbol.name] = versions.get(index) if isinstance(index, int) else None
    return out


@triton.jit
def scale_rows_in_place_kernel(x_ptr, done_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0)
    tl.store(done_ptr + row, 1)
    tl.store(x_ptr + row * n_cols + cols, x * 2.0, mask=cols < n_cols)


@pytest.mark.skipif(platform.machine() != "x86_64", reason="glibc's x86-64 memcpy versions")
def test_host_kernels_call_the_current_memcpy(fresh_cache):
    """An unversioned memcpy binds to GLIBC_2.2.5's, a plain SSE2 memmove; the kernel must ask for the
    version that picks the copy for the machine. (A masked load of a row the kernel writes, with a store
    between it and the row's use, copies it: compiler/written_tiles.py.)"""
    triton.runtime.driver.set_active(CPUDriver(target="host"))
    x, done = torch.randn(17, 100), torch.zeros(17, dtype=torch.int32)
    expected = x * 2
    compiled = scale_rows_in_place_kernel.warmup(x, done, 100, BLOCK=128, grid=(17,))
    imports = imported_versions(compiled.asm["so"])
    assert imports.get("memcpy") == "GLIBC_2.14", imports
    scale_rows_in_place_kernel[(17,)](x, done, 100, BLOCK=128)
    torch.testing.assert_close(x, expected)
    assert torch.all(done == 1)


def test_riscv_kernels_link_against_nothing(fresh_cache):
    """A riscv64 kernel runs in the QEMU kernel server or on a board: the build machine's C library is not
    one it may ask for."""
    triton.runtime.driver.set_active(CPUDriver(target="riscv64"))
    x = torch.randn(17, 100)
    out = torch.empty_like(x)
    compiled = softmax_kernel.warmup(out, x, x.stride(0), out.stride(0), 100, BLOCK=128, grid=(17,))
    elf = ELFFile(io.BytesIO(compiled.asm["so"]))
    needed = [tag.needed for tag in elf.get_section_by_name(".dynamic").iter_tags() if tag.entry.d_tag == "DT_NEEDED"]
    assert needed == []
