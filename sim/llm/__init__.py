"""A real language model through the hardware's numerics (docs/llm.md).

:mod:`.loader` reads a llama GGUF file, :mod:`.tokenizer` builds its tokenizer, :mod:`.model` is
the float reference and the interface of the back-ends in :mod:`.backends` (one per hardware
family, every hardware operation on that family's golden model), :mod:`.score` scores them,
:mod:`.trace` finds the operation that loses accuracy, :mod:`.accuracy` puts the papers' accuracy
claims into ``memwall reproduce``, and :mod:`.llamacpp` checks the float reference against
llama.cpp. From ``hdl/`` this layer takes only parameter objects, as ``golden/`` does.
"""
