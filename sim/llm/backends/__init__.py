"""The numerics back-ends: one per hardware family, each computing what its blocks compute with
that family's bit-exact golden models, the rest in float32 (:class:`sim.llm.model.Numerics`).

``NUMERICS`` maps each name the CLI accepts to ``module:class`` and the keyword arguments the
class takes; :func:`numerics` builds one. Modules are imported only when their back-end is asked
for, so ``float`` needs none of the golden models.
"""

from __future__ import annotations

import importlib

__all__ = ["NUMERICS", "numerics", "names"]

#: name -> (module, class, keyword arguments), in the order ``score --numerics all`` runs them.
NUMERICS: dict[str, tuple[str, str, dict]] = {
    "float": ("sim.llm.model", "Numerics", {}),
    "float64": ("sim.llm.model", "Numerics", {"dtype": "float64"}),
    "rdxe": ("sim.llm.backends.rdxe", "RDXE", {"vrc": "fused"}),
    "rdxe-seq": ("sim.llm.backends.rdxe", "RDXE", {"vrc": "sequential"}),
    "rdxe-ve": ("sim.llm.backends.rdxe", "RDXE", {"vrc": "fused", "glu": "ve"}),
    "rdxe-dxe": ("sim.llm.backends.rdxe", "RDXE", {"vrc": "fused", "glu": "ve", "host": "dxe"}),
    "kvnand": ("sim.llm.backends.kvnand", "KVNAND", {"kv_format": "fp16"}),
    "kvnand-bf16": ("sim.llm.backends.kvnand", "KVNAND", {"kv_format": "bf16"}),
    "flowkv": ("sim.llm.backends.flowkv", "FlowKV", {}),
    "shield": ("sim.llm.backends.shield", "Shield", {"policy": "shield"}),
    "shield-standard": ("sim.llm.backends.shield", "Shield", {"policy": "standard"}),
    "shield-kelle": ("sim.llm.backends.shield", "Shield", {"policy": "kelle"}),
}


def names() -> list[str]:
    return list(NUMERICS)


def numerics(name: str, mf, **options):
    """Build the back-end ``name`` for the model file ``mf``; ``ValueError`` names the allowed
    back-ends."""
    if name not in NUMERICS:
        raise ValueError(f"unknown numerics {name!r}: choose from {', '.join(NUMERICS)}")
    module, cls, kwargs = NUMERICS[name]
    return getattr(importlib.import_module(module), cls)(mf, **{**kwargs, **options})
