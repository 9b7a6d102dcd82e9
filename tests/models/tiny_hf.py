"""Tiny Hugging Face models written by the tests, offline: a Llama directory and a Llama GGUF.

Both use a byte-level BPE tokenizer with no merges (each byte one token, so any text encodes)
plus ``<|im_start|>`` and ``<|im_end|>`` (the end of a turn, as in SmolLM2) and a ChatML
template.  The weights are random: these models load and generate, they do not answer.
"""

from __future__ import annotations

from pathlib import Path

SPECIALS = ["<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
HIDDEN, LAYERS, HEADS, FFN = 32, 2, 2, 64


def byte_tokens() -> list[str]:
    """The vocabulary: GPT-2's printable stand-ins for the 256 bytes, then the specials."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    return [*bytes_to_unicode().values(), *SPECIALS]


def write_llama_dir(path: Path, *, seed: int = 0, license: str | None = None) -> Path:
    """save_pretrained's layout: config.json, model.safetensors and the tokenizer files."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tokens = byte_tokens()
    backend = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens(SPECIALS)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token=SPECIALS[0], eos_token=SPECIALS[1], chat_template=CHAT_TEMPLATE
    )
    config = LlamaConfig(
        vocab_size=len(tokens),
        hidden_size=HIDDEN,
        intermediate_size=FFN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=HEADS,
        max_position_embeddings=128,
        bos_token_id=len(tokens) - 2,
        eos_token_id=len(tokens) - 1,
    )
    torch.manual_seed(seed)
    LlamaForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    if license:
        (path / "README.md").write_text(f"---\nlicense: {license}\n---\n# a tiny test model\n")
    return path


def write_llama_gguf(path: Path, *, seed: int = 0) -> Path:
    """A float32 (unquantised) GGUF of a random tiny Llama, with its tokenizer and template."""
    import gguf
    import numpy as np

    tokens = byte_tokens()
    rng = np.random.default_rng(seed)

    def weight(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    writer = gguf.GGUFWriter(path, "llama")
    writer.add_name("tiny test llama")
    writer.add_license("mit")
    writer.add_context_length(128)
    writer.add_embedding_length(HIDDEN)
    writer.add_block_count(LAYERS)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(HEADS)
    writer.add_rope_dimension_count(HIDDEN // HEADS)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(len(tokens))
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types([1] * 256 + [3] * len(SPECIALS))  # normal bytes, control specials
    writer.add_token_scores([0.0] * len(tokens))
    writer.add_token_merges([])
    writer.add_bos_token_id(len(tokens) - 2)
    writer.add_eos_token_id(len(tokens) - 1)
    writer.add_chat_template(CHAT_TEMPLATE)
    writer.add_tensor("token_embd.weight", weight(len(tokens), HIDDEN))
    writer.add_tensor("output_norm.weight", np.ones(HIDDEN, np.float32))
    writer.add_tensor("output.weight", weight(len(tokens), HIDDEN))
    for i in range(LAYERS):
        for name, shape in [
            ("attn_q", (HIDDEN, HIDDEN)),
            ("attn_k", (HIDDEN, HIDDEN)),
            ("attn_v", (HIDDEN, HIDDEN)),
            ("attn_output", (HIDDEN, HIDDEN)),
            ("ffn_gate", (FFN, HIDDEN)),
            ("ffn_up", (FFN, HIDDEN)),
            ("ffn_down", (HIDDEN, FFN)),
        ]:
            writer.add_tensor(f"blk.{i}.{name}.weight", weight(*shape))
        writer.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(HIDDEN, np.float32))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(HIDDEN, np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
