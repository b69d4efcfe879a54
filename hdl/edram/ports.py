"""Interfaces of the SHIELD controller: request and response layouts and the eDRAM bank port."""

from __future__ import annotations

from amaranth import unsigned
from amaranth.lib import data, enum, wiring
from amaranth.lib.wiring import In, Out

from .spec import WORD_BITS

__all__ = ["Op", "TensorClass", "request_layout", "response_layout", "BankPortSignature"]


class Op(enum.Enum, shape=3):
    """Request operation."""

    WRITE = 0           #: store ``data`` at ``addr`` as a word of class ``cls``
    READ = 1            #: read the word at ``addr``
    RELEASE_ROWS = 2    #: end the lifetime of class ``cls`` in the rows holding words addr..last
    RELEASE_CLASS = 3   #: end the lifetime of every row of class ``cls``
    SET_POLICY = 4      #: switch the refresh policy to ``data`` (a :class:`~.spec.Policy` code)


class TensorClass(enum.Enum, shape=1):
    """Lifetime class of a tensor; it picks the mantissa segment."""

    KV = 0      #: persistent KV cache: mantissa in ``kv_mant``
    QO = 1      #: transient Query/Output: mantissa in ``qo_mant``


def request_layout(addr_bits: int) -> data.StructLayout:
    """Request payload: operation, class, word address, BF16 data and the last address of a range."""
    return data.StructLayout({
        "op": Op,
        "cls": TensorClass,
        "addr": addr_bits,
        "data": WORD_BITS,
        "last": addr_bits,
    })


def response_layout() -> data.StructLayout:
    """Response payload: the merged word, whether its row was live, and the refusal flag."""
    return data.StructLayout({
        "data": WORD_BITS,
        "live": 1,
        "error": 1,
    })


class BankPortSignature(wiring.Signature):
    """The port of one segment's eDRAM macros, all banks side by side, seen from the controller.

    Every field is an array with one element per bank; bank ``b`` uses element ``b`` of each. The
    controller drives every output from a register, so a macro samples them at the clock edge.
    In a cycle where a bank's ``we``, ``re`` or ``refresh`` is high, the macro, at the end of that
    cycle:

    * ``we``: writes ``wdata`` to word ``col`` of row ``row`` and restores the whole row (a
      row-granular read-modify-write, as a refresh is);
    * ``re``: reads word ``col`` of row ``row``; ``rdata`` holds it during the next cycle. A read
      of a gain cell does not restore its charge;
    * ``refresh``: restores every cell of row ``row``.

    At most one of the three is high per bank and cycle.

    Parameters
    ----------
    banks, rows, cols : int
        Banks, rows per bank and words per row (powers of two).
    width : int
        Bits per word of this segment (9 for ``std``, 7 for the mantissa segments).
    """

    def __init__(self, banks: int, rows: int, cols: int, width: int):
        self.banks, self.rows, self.cols, self.width = banks, rows, cols, width
        row_bits, col_bits = (rows - 1).bit_length(), (cols - 1).bit_length()
        super().__init__({
            "row": Out(data.ArrayLayout(unsigned(row_bits), banks)),
            "col": Out(data.ArrayLayout(unsigned(col_bits), banks)),
            "we": Out(banks),
            "re": Out(banks),
            "refresh": Out(banks),
            "wdata": Out(data.ArrayLayout(unsigned(width), banks)),
            "rdata": In(data.ArrayLayout(unsigned(width), banks)),
        })

    def __eq__(self, other):
        return isinstance(other, BankPortSignature) and \
            (self.banks, self.rows, self.cols, self.width) == \
            (other.banks, other.rows, other.cols, other.width)

    def __repr__(self):
        return f"BankPortSignature({self.banks}, {self.rows}, {self.cols}, {self.width})"
