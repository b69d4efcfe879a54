"""sim/models.py: the shared model shape, its checks and its weight count, and the papers' own
shapes built on it."""

import numpy as np
import pytest

from sim.flowkv import GEMMA3_1B
from sim.kvnand import LLAMA2_7B
from sim.models import ModelShape
from sim.rdxe import MT5_SMALL
from sim.umdam import OPT_125M


def test_widths_and_defaults():
    m = ModelShape("x", layers=2, heads=8, kv_heads=2, head_dim=16)
    assert (m.d_q, m.d_kv, m.group) == (128, 32, 4)
    assert (m.d_model, m.ffn, m.vocab, m.gated) == (None, None, None, False)
    mha = ModelShape("y", layers=1, heads=4, head_dim=8)
    assert mha.kv_heads == 4 and mha.group == 1
    assert ModelShape("z", layers=1, heads=4, head_dim=np.int64(8)).head_dim == 8


def test_weights_per_layer_by_hand():
    # d_model 10, 4 heads of 3 (d_q 12), 2 KV heads (d_kv 6), FFN 7:
    # Q and O 2 x 10 x 12 = 240, K and V 2 x 10 x 6 = 120; FFN 2 x 10 x 7 = 140, gated 210.
    kw = dict(layers=1, d_model=10, heads=4, kv_heads=2, head_dim=3, ffn=7)
    assert ModelShape("x", **kw).weights_per_layer == 240 + 120 + 140
    assert ModelShape("x", gated=True, **kw).weights_per_layer == 240 + 120 + 210
    with pytest.raises(ValueError, match="The weights of x need its ffn, which is None"):
        ModelShape("x", layers=1, d_model=10, heads=4, head_dim=3).weights_per_layer


def test_papers_shapes():
    # The papers' own counts, from their public configurations.
    assert MT5_SMALL.weights_per_layer == 4 * 512 * 384 + 3 * 512 * 1024
    assert OPT_125M.ffn == 3072 and OPT_125M.layer_weights == 12 * (4 * 768 ** 2 + 2 * 768 * 3072)
    assert LLAMA2_7B.params() == 6_738_415_616          # LLaMA-2-7B's parameter count
    assert GEMMA3_1B.weights == 26 * (1152 * 256 * (2 * 4 + 2 * 1) + 3 * 1152 * 6912) \
        + 1152 * 262144


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(name="", layers=1, heads=1, head_dim=1), TypeError,
     "Model name must be a non-empty string, not ''"),
    (dict(name="x", layers=0, heads=1, head_dim=1), ValueError,
     "Layer count must be between 1 and 1024, not 0"),
    (dict(name="x", layers=1, heads=1.0, head_dim=1), TypeError,
     "Query head count must be an integer between 1 and 1024, not 1.0"),
    (dict(name="x", layers=1, heads=4, kv_heads=8, head_dim=1), ValueError,
     "KV head count must be between 1 and 4, not 8"),
    (dict(name="x", layers=1, heads=6, kv_heads=4, head_dim=1), ValueError,
     "Query head count must be a multiple of the KV head count 4, not 6"),
    (dict(name="x", layers=1, heads=1, head_dim=5000), ValueError,
     "Head dimension must be between 1 and 4096, not 5000"),
    (dict(name="x", layers=1, heads=1, head_dim=1, d_model=0), ValueError,
     "Hidden size d_model must be between 1 and 65536, not 0"),
    (dict(name="x", layers=1, heads=1, head_dim=1, ffn=True), TypeError,
     "FFN width must be an integer between 1 and 4194304, not True"),
    (dict(name="x", layers=1, heads=1, head_dim=1, vocab=1 << 21), ValueError,
     "Vocabulary size must be between 1 and 1048576, not 2097152"),
    (dict(name="x", layers=1, heads=1, head_dim=1, gated="yes"), TypeError,
     "Gated must be True or False, not 'yes'"),
])
def test_messages(kwargs, error, message):
    with pytest.raises(error) as info:
        ModelShape(**kwargs)
    assert str(info.value) == message


def test_fields_after_the_name_are_keywords():
    with pytest.raises(TypeError):
        ModelShape("x", 1, 1, 1)
