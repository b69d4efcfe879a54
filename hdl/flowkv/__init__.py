"""FlowKV tile pair: streaming decode attention with online softmax over two tiles (issue 7), and
FusedDQP, the Q4NX projection engine (issue 42)."""

from .dqp import FusedDQP
from .dqp_spec import DQPConfig
from .pair import MAX_PAIRS, FlowKVArray, FlowKVPair
from .spec import FlowKVConfig, Kind
from .tile0 import ScoreTile
from .tile1 import ValueTile

__all__ = ["FlowKVConfig", "Kind", "ScoreTile", "ValueTile", "FlowKVPair", "FlowKVArray",
           "MAX_PAIRS", "FusedDQP", "DQPConfig"]
