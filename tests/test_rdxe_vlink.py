"""golden.rdxe.vlink: query heads and KV groups on a DXE's DXTs, VLINK's reads and the KV cache
capacity it saves (docs/rdxe.md, section 15)."""

import pytest

from golden.rdxe.vlink import place


def test_smollm2_on_three_and_eight_dxts():
    """9 query heads of 3 KV groups: on 3 DXTs each group and its heads share a DXT (no VLINK
    read); on 8, six heads read their group's cache over VLINK, and without VLINK 8 copies
    would be stored instead of 3."""
    p = place(9, 3, 3)
    assert p.head_dxt == (0, 0, 0, 1, 1, 1, 2, 2, 2) and p.home == (0, 1, 2) and p.reads == ()
    assert p.copies() == p.copies(vlink=False) == 3
    p = place(9, 3, 8)
    assert p.head_dxt == (0, 1, 2, 3, 4, 5, 6, 7, 7) and p.home == (0, 3, 6)
    assert p.reads == ((1, 0, 1), (2, 0, 2), (4, 3, 4), (5, 3, 5), (7, 6, 7), (8, 6, 7))
    assert (p.copies(), p.copies(vlink=False)) == (3, 8)
    assert (p.bytes_per_token(64), p.bytes_per_token(64, vlink=False)) == (384, 1024)


def test_paper_gqa_capacity_on_gpt2_small():
    """The paper's GPT2-small (12 heads of 64): sharing KV across 3 and 6 heads stores a third
    and a sixth of the MHA cache, "reducing KV$ required capacity by up to 83%"."""
    mha = place(12, 12, 8).bytes_per_token(64)
    assert mha == 12 * 2 * 64
    for group, saved in ((3, 2 / 3), (6, 5 / 6)):
        p = place(12, 12 // group, 8)
        assert 1 - p.bytes_per_token(64) / mha == pytest.approx(saved)
    assert round(100 * (1 - place(12, 2, 8).bytes_per_token(64) / mha)) == 83


def test_more_dxts_than_heads_and_one_dxt():
    p = place(4, 2, 6)
    assert p.head_dxt == (1, 2, 4, 5) and p.home == (1, 4)
    assert (p.copies(), p.copies(vlink=False)) == (2, 4)
    p = place(4, 1, 1)
    assert p.head_dxt == (0, 0, 0, 0) and p.reads == () and p.copies(vlink=False) == 1


def test_messages():
    with pytest.raises(ValueError, match=r"Query heads must be a multiple of the KV heads \(2\), "
                                         r"not 9"):
        place(9, 2, 4)
    with pytest.raises(ValueError, match="DXTs must be between 1 and 64, not 0"):
        place(9, 3, 0)
    with pytest.raises(TypeError, match="KV heads must be an integer between 1 and 9, not 3.0"):
        place(9, 3.0, 2)
