"""Generators of the committed fixtures and oracles (make_models, make_tokenizer,
oracle, oracle_gguf, hf_to_gguf); run as `python -m tests.tools.NAME`."""
