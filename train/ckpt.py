"""ckpt.py — the trained model's tokenizer, config and checkpoint layout.

The checkpoint is written as a released Qwen3.5 checkpoint is: config.json with
the vision-language wrapper (`text_config`, `vision_config`), tensors under
`model.language_model.` (plus a tiny random vision tower under `model.visual.`,
as tests/tools/make_models.py writes it), bf16 with the f32 exceptions of the
released files (A_log, dt_bias, norms), tied embeddings (no lm_head.weight),
tokenizer.json / tokenizer_config.json with the chat template,
generation_config.json.  Names and json files come from tests/tools/make_models.py.
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

from tests.tools import make_models as mm          # noqa: E402
from tests.tools import make_tokenizer as mt       # noqa: E402
from train import tasks                      # noqa: E402

L, F = mm.L, mm.F

# the trained model: Qwen3.5 dense, GDN:attention 3:1, tied.  PRESETS names the
# sizes train.py can train (--preset); PRESET is the committed model's (what
# write_json_files writes unless train.py picked another with use_preset).
PRESETS = {
    "h256x8": dict(family="qwen3_5", H=256, layer_types=[L, L, L, F, L, L, L, F],
                   Hq=4, Hkv=2, hd=64, Hk=4, Hv=4, dk=64, dv=64, I=512,
                   tied=True, dtype="bf16-mixed"),          # 7.2 M parameters (steps 0-641)
    # h256x8 one 3:1 group deeper: a third attention layer (grown from h256x8, session 19)
    "h256x12": dict(family="qwen3_5", H=256, layer_types=[L, L, L, F] * 3,
                    Hq=4, Hkv=2, hd=64, Hk=4, Hv=4, dk=64, dv=64, I=512,
                    tied=True, dtype="bf16-mixed"),
    "h128x4": dict(family="qwen3_5", H=128, layer_types=[L, L, L, F],
                   Hq=2, Hkv=1, hd=64, Hk=2, Hv=2, dk=64, dv=64, I=384,
                   tied=True, dtype="bf16-mixed"),          # 1.7 M: the committed one (session 6)
    # h128x4 with attention at layers 2 and 4 (GDN:attention 1:1; two attention
    # layers: an induction head needs one to find the key and one to read the value)
    "h128x4b": dict(family="qwen3_5", H=128, layer_types=[L, F, L, F],
                    Hq=2, Hkv=1, hd=64, Hk=2, Hv=2, dk=64, dv=64, I=384,
                    tied=True, dtype="bf16-mixed"),
    # attention first: the token identities reach an attention layer before any GDN
    "h128x4c": dict(family="qwen3_5", H=128, layer_types=[F, L, L, F],
                    Hq=2, Hkv=1, hd=64, Hk=2, Hv=2, dk=64, dv=64, I=384,
                    tied=True, dtype="bf16-mixed"),
    # two attention layers ([L, L, L, F] x 2; ~2x h128x4 per token): one can find
    # the key a few tokens back, the other read the value (session 6 probes)
    "h128x8": dict(family="qwen3_5", H=128, layer_types=[L, L, L, F] * 2,
                   Hq=2, Hkv=1, hd=64, Hk=2, Hv=2, dk=64, dv=64, I=384,
                   tied=True, dtype="bf16-mixed"),
    # h128x4 with 4 query / 2 key-value attention heads
    "h128x4h": dict(family="qwen3_5", H=128, layer_types=[L, L, L, F],
                    Hq=4, Hkv=2, hd=64, Hk=2, Hv=2, dk=64, dv=64, I=384,
                    tied=True, dtype="bf16-mixed"),
    # h256x8 with a key-value head per query head (4 / 4): the two query heads
    # that shared a KV head attended almost alike (session 17); grown from h256x8
    # by copying each KV head to the query heads it served (session 22)
    "h256x8k": dict(family="qwen3_5", H=256, layer_types=[L, L, L, F, L, L, L, F],
                    Hq=4, Hkv=4, hd=64, Hk=4, Hv=4, dk=64, dv=64, I=512,
                    tied=True, dtype="bf16-mixed"),
    # probes (train/README.md): attention only, 2 layers
    "a128x2": dict(family="qwen3_5", H=128, layer_types=[F, F],
                   Hq=2, Hkv=1, hd=64, Hk=2, Hv=2, dk=64, dv=64, I=384,
                   tied=True, dtype="bf16-mixed"),
    "a64x2": dict(family="qwen3_5", H=64, layer_types=[F, F],
                  Hq=2, Hkv=1, hd=32, Hk=2, Hv=2, dk=32, dv=32, I=192,
                  tied=True, dtype="bf16-mixed"),
}
PRESET_NAME = "h256x8"
LEGACY_PRESET = "h256x8"    # states written before the preset was recorded (step 641)
PRESET = dict(PRESETS[PRESET_NAME])


def use_preset(name):
    """Make PRESETS[name] the dims that dims() / write_json_files() use."""
    PRESET.clear()
    PRESET.update(PRESETS[name])
VOCAB_BPE = 6144 - len(mt.ADDED_TOKENS)     # 6135 BPE + 9 added = 6144
TOKENIZER_SEEDS = 500000                    # seeds of the tokenizer corpus (not held out)


def tokenizer_lines(n_per_task=150):
    """Training text of the tokenizer: the prose and rendered items of every task
    and level (deterministic)."""
    lines = list(tasks.prose())
    for task in tasks.TASKS:
        for lv in sorted(lv for lv in tasks.LEVELS if lv >= 0):
            for s in range(n_per_task):
                it = tasks.item(task, TOKENIZER_SEEDS + s, lv)
                lines.append(tasks.prompt_text(it) + it["answer"] + "<|im_end|>\n")
    return lines


def write_tokenizer(out_dir):
    """Train the BPE (Qwen3.5 regex, NFC, byte-level) and write tokenizer.json
    and tokenizer_config.json into out_dir; returns {special: id}."""
    tok_text, cfg_text = mt.build("qwen3_5", VOCAB_BPE, lines=tokenizer_lines(),
                                  chat_template=tasks.CHAT_TEMPLATE)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "tokenizer.json"), "w", encoding="utf-8",
              newline="\n") as f:
        f.write(tok_text)
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8",
              newline="\n") as f:
        f.write(cfg_text)
    return specials(out_dir)


def specials(out_dir):
    with open(os.path.join(out_dir, "tokenizer.json"), encoding="utf-8") as f:
        tj = json.load(f)
    return {a["content"]: a["id"] for a in tj["added_tokens"]}


def dims(out_dir):
    """make_models dims of PRESET for the tokenizer in out_dir."""
    with open(os.path.join(out_dir, "tokenizer.json"), encoding="utf-8") as f:
        tj = json.load(f)
    n_tok = len(tj["model"]["vocab"]) + len(tj["added_tokens"])
    return mm.text_dims(dict(PRESET, vocab=max(6144, n_tok)), n_tok)


def write_json_files(out_dir):
    """config.json and generation_config.json (transformers 5.x shape)."""
    sp = specials(out_dir)
    d = dims(out_dir)
    mm.dump_json(os.path.join(out_dir, "config.json"), mm.model_config(d, sp))
    mm.dump_json(os.path.join(out_dir, "generation_config.json"), mm.generation_config(sp))


def text_config_dict(out_dir):
    """The text_config as a dict (for Qwen3_5TextConfig)."""
    sp = specials(out_dir)
    return mm.text_config(dims(out_dir), sp)


def save_weights(model, out_dir):
    """Write model.safetensors from a Qwen3_5ForCausalLM (text keys renamed to the
    wrapper's `model.language_model.`, plus make_models' vision tower)."""
    import numpy as np
    import torch
    from safetensors.torch import save_file

    d = dims(out_dir)
    out = {}
    for k, v in model.state_dict().items():
        if k == "lm_head.weight" and d["tied"]:
            continue
        assert k.startswith("model."), k
        name = "model.language_model." + k[len("model."):]
        dt = mm.storage_dtype(d["dtype"], name)
        out[name] = v.detach().cpu().to(torch.float32 if dt == "F32" else torch.bfloat16).contiguous()
    for name, shape, init in mm.vision_specs(d["H"]):
        x = mm.values("pic/trained", name, shape, init).astype(np.float32).reshape(shape)
        out[name] = torch.from_numpy(x).to(torch.bfloat16).contiguous()
    save_file(out, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})


def write_release(model, out_dir, state, heldout, heldout_level, args, log_lines):
    """Write the release checkpoint of model into out_dir, whose tokenizer files are
    already there: config.json, generation_config.json, model.safetensors,
    train_state.json (state: the train.py counters; heldout: exact match per task at
    heldout_level; args: the run's `start` arguments) and train_log.jsonl (log_lines:
    the lineage's log records, each a line with its newline).  train.py's release at
    a new best and release.py's of any state both write it here."""
    write_json_files(out_dir)
    save_weights(model, out_dir)
    with open(os.path.join(out_dir, "train_state.json"), "w") as f:
        json.dump({"state": state, "heldout": heldout, "heldout_level": heldout_level,
                   "level": state["level"], "args": args}, f, indent=1, sort_keys=True)
        f.write("\n")
    with open(os.path.join(out_dir, "train_log.jsonl"), "w") as f:
        f.writelines(log_lines)


def load_weights(model, ckpt_dir):
    """Load model.language_model.* of ckpt_dir into a Qwen3_5ForCausalLM (fp32)."""
    import torch
    from safetensors.torch import load_file

    sd = load_file(os.path.join(ckpt_dir, "model.safetensors"))
    pre = "model.language_model."
    mine = {"model." + k[len(pre):]: v.to(torch.float32) for k, v in sd.items()
            if k.startswith(pre)}
    missing, unexpected = model.load_state_dict(mine, strict=False)
    missing = [m for m in missing if m != "lm_head.weight"]
    if missing or unexpected:
        raise RuntimeError("checkpoint mismatch: missing %s unexpected %s"
                           % (missing[:5], unexpected[:5]))
    model.tie_weights()
