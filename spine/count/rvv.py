"""Which instructions of a riscv64 kernel are vector (RVV 1.0) instructions, read from its .so.

RVV uses two major opcodes: OP-V (0x57: arithmetic, and vsetvli/vsetivli/vsetvl, which count as vector
here) and LOAD-FP/STORE-FP (0x07/0x27) with a width field of 0, 5, 6 or 7 (widths 1-4 are the scalar
flh/flw/fld/flq and their stores). Compressed (16-bit) instructions are never vector."""
from __future__ import annotations

import io
from dataclasses import dataclass

OP_V, LOAD_FP, STORE_FP = 0x57, 0x07, 0x27
_VECTOR_WIDTHS = (0, 5, 6, 7)


def is_vector(word: int) -> bool:
    if word & 0b11 != 0b11:
        return False
    opcode = word & 0x7F
    if opcode == OP_V:
        return True
    return opcode in (LOAD_FP, STORE_FP) and (word >> 12) & 0b111 in _VECTOR_WIDTHS


@dataclass(frozen=True)
class KernelImage:
    """A kernel .so's executable code, addressed as the guest sees it once loaded at text[0]."""
    code: bytes          # the executable segment's bytes
    code_vaddr: int      # its virtual address in the file
    entry_vaddr: int     # spine_entry's

    @staticmethod
    def of(so: bytes) -> "KernelImage":
        from elftools.elf.elffile import ELFFile
        elf = ELFFile(io.BytesIO(so))
        segments = [s for s in elf.iter_segments() if s["p_type"] == "PT_LOAD" and s["p_flags"] & 1]
        if len(segments) != 1:
            raise ValueError(f"expected one executable segment in the kernel, found {len(segments)}")
        segment = segments[0]
        entry = next(s for s in elf.get_section_by_name(".dynsym").iter_symbols() if s.name == "spine_entry")
        return KernelImage(segment.data(), segment["p_vaddr"], entry["st_value"])

    def entry_address(self, text_lo: int) -> int:
        return text_lo + self.entry_vaddr - self.code_vaddr

    def word_at(self, pc: int, text_lo: int) -> int:
        """The 32 bits at guest address pc (a compressed instruction is their low half)."""
        offset = pc - text_lo
        return int.from_bytes(self.code[offset:offset + 4].ljust(4, b"\0"), "little")

    def is_vector_at(self, pc: int, text_lo: int) -> bool:
        return is_vector(self.word_at(pc, text_lo))
