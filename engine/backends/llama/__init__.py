"""The llama.cpp engine: one model, one batched context, N parallel sequences.

Owns the worker thread and its loop (engine.py: `LlamaEngine`), the batched decode step
(batch.py), the slots and their samplers (slots.py), the abort callback for prefill-only steps
(abort.py), the tokenizer and detokenizer (vocab.py), llama.cpp's log lines (log.py), the
context size and KV layout a model gets (kv_plan.py) and what the llama.cpp build is, for
`prism doctor` (info.py: `llama_info()`). Only the engine thread ("prism-llama")
touches the model and the context (docs/design.md, sections 3 and 9).
"""
