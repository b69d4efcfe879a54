"""The DXE controller's instruction word: a pure description, no hardware (docs/rdxe.md, 14.1).

A layer program (:mod:`golden.rdxe.program`) becomes a list of these words when its region names
become addresses (:mod:`golden.rdxe.assemble`); the controller will fetch them one at a time.
Every instruction has the same fields; the opcode says which memory each address is in:

* ``a``, ``b``: the operands' first addresses (token buffer words or rr-SRAM bytes), ``dst``: the
  result's; ``n``: the element count (of the result, or of what is read when nothing is written);
* ``table``: an address in the constant memory (fp32 per-channel vectors and scalars the host
  loads with the layer's weights), or for a GEMV the index of its WMEM and PPU tables;
* ``r_in``, ``r_out``: scalar registers read and written.

What each opcode reads and writes (``tb``, ``rr``, ``reg``, ``const``):

========================  ===============================================================
``max``                   ``reg[r_out] = max |tb[a:a+n]|``
``recip``, ``eps``        ``reg[r_out] = f(reg[r_in])``
``score``                 ``reg[r_out] = score_factor(reg[r_in], const[table])``
``quant``                 ``rr[dst:dst+n] = RNE(127 fmul(tb[a:a+n], reg[r_in]))``
``quant_table``           the same with ``const[table:table+n]`` for the register
``gemv``, ``gemv_norm``   ``rr[dst:dst+n] = PPU(W_table rr[a:a+K])`` (RMSNorm with ``reg[r_in]``)
``dequant``               ``tb[dst:dst+n] = fmul(fp32(rr[a:a+n]), const[table:table+n])``
``dequant_token``         the same, then ``fmul`` by ``reg[r_in]``
``rope``                  ``tb[dst:dst+n]`` = RoPE of ``tb[a:a+n]``, cos at ``tb[b]``, sin after it
``add``                   ``tb[dst:dst+n] = fadd(tb[a:a+n], tb[b:b+n])``
``kv_append``             keys ``rr[a:a+n]``, values ``rr[b:b+n]`` to the cache
``attend``                ``rr[dst:dst+n]`` = attention of ``rr[a:a+n]``, score PPU ``reg[r_in]``
``act_max``               ``reg[r_out] = M`` of ``silu(gate) up``, gate ``rr[a:a+n]``, up after it,
                          SwiGLU's ``a``, ``c`` at ``const[table]`` and ``const[table+n]``
``act``                   ``rr[dst:dst+n]`` = their codes by ``reg[r_in]``
========================  ===============================================================
"""

from __future__ import annotations

from dataclasses import dataclass

from amaranth import unsigned
from amaranth.lib import data

from ..validate import index_bits, integer, power_of_two

__all__ = ["OPCODES", "ProgramSpace", "SMOLLM2_STORAGE", "instruction_layout", "MAX_WORDS",
           "MAX_REGISTERS", "MAX_TABLES"]

#: The controller's operations, by opcode (the index).
OPCODES = ("max", "recip", "eps", "score", "quant", "quant_table", "gemv", "gemv_norm", "dequant",
           "dequant_token", "rope", "add", "kv_append", "attend", "act_max", "act")
#: Largest token buffer (fp32 words), rr-SRAM (bytes) and constant memory (fp32 words).
MAX_WORDS = 1 << 20
#: Most scalar registers.
MAX_REGISTERS = 64
#: Most GEMV tables a layer holds.
MAX_TABLES = 64


@dataclass(frozen=True)
class ProgramSpace:
    """The storage a program is assembled into: ``tb_words`` fp32 words of token buffer,
    ``rr_bytes`` of rr-SRAM, ``registers`` scalar registers, ``const_words`` fp32 words of
    constants and ``gemvs`` GEMV tables. ``align``: the memories' row of elements (the
    controller's lanes): every region and constant table starts at a multiple of it and holds a
    whole number of rows, so that a beat is one row."""

    tb_words: int
    rr_bytes: int
    registers: int
    const_words: int
    gemvs: int
    align: int = 1

    def __post_init__(self):
        integer(self.tb_words, "Token buffer words", 1, MAX_WORDS)
        integer(self.rr_bytes, "rr-SRAM bytes", 1, MAX_WORDS)
        integer(self.registers, "Scalar registers", 1, MAX_REGISTERS)
        integer(self.const_words, "Constant memory words", 1, MAX_WORDS)
        integer(self.gemvs, "GEMV tables", 1, MAX_TABLES)
        power_of_two(self.align, "Row of the program's memories (align, elements)", 1, 64)

    @property
    def address_bits(self) -> int:
        return index_bits(max(self.tb_words, self.rr_bytes))


#: A :class:`ProgramSpace`'s storage for SmolLM2-135M's layer (d_model 576, 9 query heads of 64 in
#: 3 KV groups, FFN 1,536), each the power of two above what the layer's program uses: 2,368 TB
#: words, 4,608 rr-SRAM bytes, 6,160 constant words (docs/rdxe.md 14.2). The GEMV tables are the
#: user's to add: the layer's 4, and the KV append's identity on a whole DXE.
SMOLLM2_STORAGE = {"tb_words": 4096, "rr_bytes": 8192, "registers": 16, "const_words": 8192}


def instruction_layout(space: ProgramSpace) -> data.StructLayout:
    """The instruction word of ``space`` (module notes): the opcode, three addresses, a count, a
    table and two registers."""
    if not isinstance(space, ProgramSpace):
        raise TypeError(f"Program space must be a ProgramSpace, not {space!r}")
    address = unsigned(space.address_bits)
    register = unsigned(index_bits(space.registers))
    return data.StructLayout({
        "op": unsigned(index_bits(len(OPCODES))), "a": address, "b": address, "dst": address,
        "n": unsigned(index_bits(max(space.tb_words, space.rr_bytes) + 1)),
        "table": unsigned(index_bits(max(space.const_words, space.gemvs))),
        "r_in": register, "r_out": register})
