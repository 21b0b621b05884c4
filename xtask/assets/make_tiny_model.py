"""Make speedmatrix's tiny Qwen3 model for real-engine end-to-end runs.

Usage: python make_tiny_model.py OUT_DIR

Writes a Hugging Face model folder that vLLM loads offline: config.json,
generation_config.json, model.safetensors (seeded random bf16 weights),
tokenizer.json (a byte-level BPE trained here on generated text) and
tokenizer_config.json (ChatML chat template). The same script always writes
the same bytes, so the model can be cached and compared across runs.

The weights are random, so the model babbles. Greedy decoding of random
weights tends to lock onto tokens that are not text on their own (special
tokens, lone bytes of a multi-byte character); a server then streams chunks
with empty text. The output layer is therefore biased towards tokens that
decode to valid UTF-8 text by themselves, so every streamed token carries
text. Needs torch, safetensors and tokenizers (all in vLLM's environment).
"""

import json
import os
import random
import sys

import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

SEED = 20261130
VOCAB_SIZE = 2048
HIDDEN = 256
INTERMEDIATE = 512
LAYERS = 4
HEADS = 4
KV_HEADS = 2
HEAD_DIM = 64
MAX_POSITIONS = 65536
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def training_text(rng):
    """English-looking lines made of generated words, digits and punctuation."""
    onsets = ["", "b", "c", "d", "f", "g", "h", "l", "m", "n", "p", "r", "s", "t", "v", "w",
              "st", "tr", "pl", "ch", "sh", "th", "qu", "br", "gr"]
    vowels = ["a", "e", "i", "o", "u", "ea", "ou", "ai", "io"]
    codas = ["", "n", "r", "s", "t", "l", "m", "nd", "st", "ng", "ck"]
    words = set()
    while len(words) < 1500:
        syllables = rng.randint(1, 3)
        words.add("".join(rng.choice(onsets) + rng.choice(vowels) + rng.choice(codas)
                          for _ in range(syllables)))
    words = sorted(words)
    punct = [".", ",", "?", "!", ":", ";"]
    lines = []
    for _ in range(6000):
        parts = []
        for _ in range(rng.randint(6, 24)):
            w = rng.choice(words)
            r = rng.random()
            if r < 0.1:
                w = w.capitalize()
            elif r < 0.13:
                w = str(rng.randint(0, 9999))
            if rng.random() < 0.08:
                w += rng.choice(punct)
            parts.append(w)
        lines.append(" ".join(parts) + ".")
    return lines


def train_tokenizer(rng):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(training_text(rng), trainer)
    return tok


def byte_decoder():
    """The inverse of GPT-2's bytes-to-unicode table used by byte-level BPE."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1))
                 + list(range(ord("\u00ae"), ord("\u00ff") + 1)))
    chars = list(printable)
    n = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(printable, chars)}


def text_token_mask(tok):
    """True for tokens that decode to non-empty valid UTF-8 on their own."""
    decode = byte_decoder()
    mask = torch.zeros(VOCAB_SIZE, dtype=torch.bool)
    for piece, idx in tok.get_vocab().items():
        if piece in SPECIAL_TOKENS:
            continue
        try:
            bytes(decode[c] for c in piece).decode("utf-8")
        except (KeyError, UnicodeDecodeError):
            continue
        mask[idx] = True
    return mask


def weights(gen, text_mask):
    def rand(*shape, std=0.02):
        return torch.randn(*shape, generator=gen) * std

    ones = torch.ones
    t = {}
    embed = rand(VOCAB_SIZE, HIDDEN)
    # A large constant feature in hidden dimension 0 survives every layer and the final
    # norm with the same sign, so lm_head column 0 acts as a per-token logit bias.
    embed[:, 0] = 4.0
    t["model.embed_tokens.weight"] = embed
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = ones(HIDDEN)
        t[p + "post_attention_layernorm.weight"] = ones(HIDDEN)
        t[p + "self_attn.q_proj.weight"] = rand(HEADS * HEAD_DIM, HIDDEN)
        t[p + "self_attn.k_proj.weight"] = rand(KV_HEADS * HEAD_DIM, HIDDEN)
        t[p + "self_attn.v_proj.weight"] = rand(KV_HEADS * HEAD_DIM, HIDDEN)
        t[p + "self_attn.o_proj.weight"] = rand(HIDDEN, HEADS * HEAD_DIM)
        t[p + "self_attn.q_norm.weight"] = ones(HEAD_DIM)
        t[p + "self_attn.k_norm.weight"] = ones(HEAD_DIM)
        t[p + "mlp.gate_proj.weight"] = rand(INTERMEDIATE, HIDDEN)
        t[p + "mlp.up_proj.weight"] = rand(INTERMEDIATE, HIDDEN)
        t[p + "mlp.down_proj.weight"] = rand(HIDDEN, INTERMEDIATE)
    t["model.norm.weight"] = ones(HIDDEN)
    lm_head = rand(VOCAB_SIZE, HIDDEN, std=0.5)
    lm_head[:, 0] = torch.where(text_mask, 1.0, -1.0)
    t["lm_head.weight"] = lm_head
    return {k: v.to(torch.bfloat16).contiguous() for k, v in t.items()}


def config(tok):
    eos = tok.token_to_id("<|im_end|>")
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "vocab_size": VOCAB_SIZE,
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HEAD_DIM,
        "max_position_embeddings": MAX_POSITIONS,
        "max_window_layers": LAYERS,
        "use_sliding_window": False,
        "sliding_window": None,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "initializer_range": 0.02,
        "tie_word_embeddings": False,
        "use_cache": True,
        "torch_dtype": "bfloat16",
        "bos_token_id": tok.token_to_id("<|endoftext|>"),
        "eos_token_id": eos,
    }


def tokenizer_config():
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": MAX_POSITIONS,
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
    }


def write_json(path, value):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(value, f, indent=2, sort_keys=True)
        f.write("\n")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_tiny_model.py OUT_DIR")
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(SEED)
    tok = train_tokenizer(random.Random(SEED))
    if tok.get_vocab_size() != VOCAB_SIZE:
        sys.exit(f"tokenizer has {tok.get_vocab_size()} tokens, expected {VOCAB_SIZE}")
    tok.save(os.path.join(out, "tokenizer.json"))
    write_json(os.path.join(out, "tokenizer_config.json"), tokenizer_config())
    cfg = config(tok)
    write_json(os.path.join(out, "config.json"), cfg)
    write_json(os.path.join(out, "generation_config.json"),
               {"bos_token_id": cfg["bos_token_id"], "eos_token_id": cfg["eos_token_id"]})
    gen = torch.Generator().manual_seed(SEED)
    save_file(weights(gen, text_token_mask(tok)), os.path.join(out, "model.safetensors"),
              metadata={"format": "pt"})
    print(f"tiny model written to {out}")


if __name__ == "__main__":
    main()
