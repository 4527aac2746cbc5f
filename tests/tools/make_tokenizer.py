#!/usr/bin/env python3
"""make_tokenizer.py — build a small byte-level BPE tokenizer in the real Qwen layout.

The file has what a Qwen3.5 / Qwen3-Next tokenizer.json has (MODEL.md §6):
NFC normaliser; a Sequence pre-tokenizer of Split(Qwen regex, Isolated) and
ByteLevel(add_prefix_space=False, use_regex=False); ByteLevel post-processor
and decoder; a BPE model (no unk, no byte fallback) with merges; added tokens
matched verbatim.  It is trained with the `tokenizers` library on a built-in
corpus (English, code, digits, CJK, emoji, combining marks) to a small vocab.

Ids: the real Qwen ids of the specials (151643… / 248044…) do not fit a small
vocab, so the added tokens are placed right after the BPE vocab, in the order
of ADDED_TOKENS below (ids vocab_size_bpe, vocab_size_bpe+1, …).  Consumers must
read special ids from `added_tokens`, never hard-code them.

Variants:
  qwen3_5     Qwen3.5 regex (letters are [\\p{L}\\p{M}]+, punctuation excludes
              \\p{M}); merges stored as pairs [["a", "b"], …] (newer format).
  qwen3_next  Qwen2/3/Next regex; merges stored as "a b" strings (older format).

Specials: "qwen" (ADDED_TOKENS, the ChatML markers; tokenizer_config.json as
Qwen ships it) or "llama3" (LLAMA3_ADDED_TOKENS, Llama 3's header and turn
markers, as many as ADDED_TOKENS so the vocab keeps its size; tokenizer_config.json
as Meta ships it, bos <|begin_of_text|>, eos <|eot_id|>), each with the chat
template given.

Both files are byte-for-byte deterministic.

Usage:  make_tokenizer.py --out DIR [--variant qwen3_5|qwen3_next] [--vocab N]
"""
import argparse
import json
import os
import sys

from tokenizers import Regex, Tokenizer, decoders, models, normalizers
from tokenizers import pre_tokenizers, processors, trainers

REGEX_QWEN3_NEXT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                    r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
REGEX_QWEN3_5 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}|"
                 r" ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

VARIANTS = {"qwen3_5": REGEX_QWEN3_5, "qwen3_next": REGEX_QWEN3_NEXT}

# (content, special) in id order after the BPE vocab.  As in Qwen's files the
# chat markers are special and the think/tool markers are plain added tokens;
# all are normalized=False, lstrip/rstrip/single_word=False.
ADDED_TOKENS = [
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<tool_response>", False),
    ("</tool_response>", False),
    ("<think>", False),
    ("</think>", False),
]

# Llama 3's specials, in the order of their real ids (128000 ...), the reserved
# ones but the first left out; all special, as in Meta's files.
LLAMA3_ADDED_TOKENS = [
    ("<|begin_of_text|>", True),
    ("<|end_of_text|>", True),
    ("<|reserved_special_token_0|>", True),
    ("<|finetune_right_pad_id|>", True),
    ("<|start_header_id|>", True),
    ("<|end_header_id|>", True),
    ("<|eom_id|>", True),
    ("<|eot_id|>", True),
    ("<|python_tag|>", True),
]
assert len(LLAMA3_ADDED_TOKENS) == 9

SPECIALS = {"qwen": None, "llama3": LLAMA3_ADDED_TOKENS}

DEFAULT_VOCAB = 2000

CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


# --- corpus ---

_EN = """The quick brown fox jumps over the lazy dog. It's a test; they'll see
what we've done, and I'm sure you'd agree that the weather isn't bad today.
Position-independent caching lets a server reuse the key and value states of
a document that appears in many prompts, even when it sits at a different
offset. Hybrid models mix linear attention layers with full attention layers,
so the recurrent state must be carried across segment boundaries. We measure
time to first token, throughput in tokens per second, and the hit rate of the
cache under a realistic workload of retrieval augmented generation requests.
Once upon a time there was a little engine that could compute logits quickly.
THE HEADLINE WAS WRITTEN IN CAPITALS, AND SHE SAID: "DON'T PANIC!"
Numbers such as 3.14159, 2718281828, 1,000,000 and 42 appear in text; dates
like 2024-05-17 and times like 12:34:56 too. Prices: $19.99, EUR 5,00, 100%.
Email me at someone@example.com or visit https://example.org/path?q=1&r=two.
"""

_CODE = """#include <stdio.h>
int main(int argc, char **argv) {
    for (int i = 0; i < argc; i++) {
        printf("%d: %s\\n", i, argv[i]);
    }
    return 0;
}
def fibonacci(n: int) -> int:
    \"\"\"Return the n-th Fibonacci number.\"\"\"
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a

class Cache(object):
    def __init__(self, capacity=1024):
        self.capacity = capacity
        self.items = {}
\tif (x != NULL && y->next == NULL) { return -1; }
const result = await fetch(url, { method: "POST", body: JSON.stringify(data) });
SELECT id, name FROM users WHERE age >= 18 ORDER BY name;
{"model": "qwen", "messages": [{"role": "user", "content": "hi"}]}
"""

_CJK = """我们今天去公园散步，天气非常好。机器学习是人工智能的一个分支。
这是一个用于测试分词器的中文句子，包含标点符号：逗号、句号。
日本語のテキストも含まれています。ひらがなとカタカナ、漢字。
한국어 문장도 포함되어 있습니다. 안녕하세요, 반갑습니다.
"""

_EMOJI = """Emoji: 😀 😂 👍 🎉 🚀 ❤️ 🇫🇷 🇯🇵 👩‍💻 👨‍👩‍👧‍👦 🏳️‍🌈 👍🏽 ✨🔥💯
Symbols: → ← ≠ ≤ ≥ ∑ ∫ √ ∞ © ® ™ § ¶ • … — – « » ‘ ’ “ ”
"""

# combining marks: decomposed forms (e + U+0301 ...); NFC composes most of
# them, some have no precomposed form (q + U+0301, a + U+0304 + U+0301).
_MARKS = ("Cafe\u0301 re\u0301sume\u0301 nai\u0308ve Zu\u0308rich "
          "q\u0301 a\u0304\u0301 x\u0323\u0302 "
          "Se\u0301bastien e\u0301te\u0301 Ä Å ñ n\u0303 "
          "\u0915\u093f\u0924\u093e\u092c \u0939\u093f\u0902\u0926\u0940 "
          "\u0645\u064e\u0631\u0652\u062d\u064e\u0628\u064b\u0627\n")

_WORDS = ("time person year way day thing man world life hand part child eye "
          "woman place work week case point government company number group "
          "problem fact be have do say get make go know take see come think "
          "look want give use find tell ask seem feel try leave call good new "
          "first last long great little own other old right big high different "
          "small large next early young important few public bad same able "
          "tensor kernel attention layer token model cache prefix segment "
          "request server engine worker queue latency throughput memory").split()


def byte_to_unicode():
    """{byte: char}: the GPT-2 byte-level map (the characters of tokenizer.json's
    vocab keys; printable Latin-1 bytes stand for themselves, the rest move to 256+)."""
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def _lcg(seed):
    """Deterministic pseudo-random stream (no dependence on Python's hash)."""
    x = seed
    while True:
        x = (x * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        yield x >> 33


def corpus_lines():
    """The built-in training corpus as a list of strings (deterministic)."""
    lines = []
    for block in (_EN, _CODE, _CJK, _EMOJI, _MARKS):
        lines.extend(block.splitlines(keepends=True))
    rnd = _lcg(12345)
    for i in range(600):
        n = 6 + next(rnd) % 10
        words = [_WORDS[next(rnd) % len(_WORDS)] for _ in range(n)]
        if next(rnd) % 3 == 0:
            words[0] = words[0].capitalize()
        if next(rnd) % 5 == 0:
            words.insert(next(rnd) % len(words), str(next(rnd) % 100000))
        sep = "  " if next(rnd) % 11 == 0 else " "
        end = ".\n" if i % 4 else "?\r\n"
        lines.append(sep.join(words) + end)
    # made-up words from syllables: enough distinct pairs to fill the vocab
    syl = ("ka ri to na me shi lo vu pe ga zo di fu ne ra mo te su chi wa ba "
           "qu ex str pl gr th ion ing ed er al ous ment").split()
    for i in range(900):
        words = []
        for _ in range(4 + next(rnd) % 8):
            w = "".join(syl[next(rnd) % len(syl)] for _ in range(1 + next(rnd) % 4))
            words.append(w.upper() if next(rnd) % 17 == 0 else w)
        lines.append(" ".join(words) + ("\n" if i % 9 else ",\t" + str(next(rnd)) + "\n"))
    # repeat the fixed blocks so their merges win over the random text
    return lines + lines[:80] * 3


# --- build ---

def build(variant, vocab_size=DEFAULT_VOCAB, lines=None, chat_template=CHAT_TEMPLATE,
          specials="qwen"):
    """Train on `lines` (default: the built-in corpus) and return
    (tokenizer_json_text, tokenizer_config_json_text)."""
    added_tokens = SPECIALS[specials] or ADDED_TOKENS
    if variant not in VARIANTS:
        raise ValueError("unknown variant %r (want one of %s)" % (variant, ", ".join(VARIANTS)))
    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(VARIANTS[variant]), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=2, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])
    tok.train_from_iterator(corpus_lines() if lines is None else lines, trainer=trainer)

    d = json.loads(tok.to_str())
    model = d["model"]
    vocab = model["vocab"]
    merges = model["merges"]
    # canonical order: by id
    vocab = dict(sorted(vocab.items(), key=lambda kv: kv[1]))
    n_bpe = len(vocab)
    if sorted(vocab.values()) != list(range(n_bpe)):
        raise RuntimeError("trained vocab ids are not dense")
    pairs = [m.split(" ") if isinstance(m, str) else list(m) for m in merges]
    if variant == "qwen3_next":
        merges_out = [" ".join(p) for p in pairs]
    else:
        merges_out = pairs

    added = []
    for i, (content, special) in enumerate(added_tokens):
        added.append({"id": n_bpe + i, "content": content, "single_word": False,
                      "lstrip": False, "rstrip": False, "normalized": False,
                      "special": special})
    bl = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
          "use_regex": False}
    out = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": VARIANTS[variant]},
             "behavior": "Isolated", "invert": False},
            dict(bl)]},
        "post_processor": dict(bl),
        "decoder": dict(bl),
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": "", "end_of_word_suffix": "",
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": merges_out},
    }
    tok_text = json.dumps(out, indent=2, ensure_ascii=False) + "\n"

    cfg = {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": {
            str(a["id"]): {k: a[k] for k in ("content", "lstrip", "normalized",
                                             "rstrip", "single_word", "special")}
            for a in added},
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "bos_token": None,
        "chat_template": chat_template,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": 32768,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }
    if specials == "llama3":
        cfg = {
            "added_tokens_decoder": cfg["added_tokens_decoder"],
            "bos_token": "<|begin_of_text|>",
            "chat_template": chat_template,
            "clean_up_tokenization_spaces": True,
            "eos_token": "<|eot_id|>",
            "model_input_names": ["input_ids", "attention_mask"],
            "model_max_length": 131072,
            "tokenizer_class": "PreTrainedTokenizerFast",
        }
    cfg_text = json.dumps(cfg, indent=2, ensure_ascii=False) + "\n"
    return tok_text, cfg_text


def make_tokenizer(out_dir, variant="qwen3_5", vocab_size=DEFAULT_VOCAB, specials="qwen",
                   chat_template=CHAT_TEMPLATE):
    """Write out_dir/tokenizer.json and out_dir/tokenizer_config.json; return
    the tokenizer.json path.  Same bytes on every run."""
    tok_text, cfg_text = build(variant, vocab_size, chat_template=chat_template,
                               specials=specials)
    # the library must accept what we wrote
    Tokenizer.from_str(tok_text)
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "tokenizer.json")
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(tok_text)
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8",
              newline="\n") as f:
        f.write(cfg_text)
    return path


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--variant", default="qwen3_5", choices=sorted(VARIANTS))
    ap.add_argument("--vocab", type=int, default=DEFAULT_VOCAB,
                    help="BPE vocab size incl. the 256 byte tokens (default %(default)s)")
    args = ap.parse_args(argv)
    path = make_tokenizer(args.out, args.variant, args.vocab)
    t = Tokenizer.from_file(path)
    print("%s: %s, %d tokens (%d added)" % (path, args.variant,
                                            t.get_vocab_size(with_added_tokens=True),
                                            len(ADDED_TOKENS)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
