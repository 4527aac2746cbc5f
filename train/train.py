#!/usr/bin/env python3
"""train.py — train the small Qwen3.5 model on train/tasks.py (issue 11).

Seeded and resumable.  The run directory (--run, default train/run/) holds:
  state.pt        fp32 weights + AdamW state + counters (resume point; not committed)
  log.jsonl       one line per log step (loss) and per evaluation (held-out accuracy);
                  copied to OUT/train_log.jsonl with every release checkpoint
The release checkpoint (--out, default models/pic-qa/) is written at every
evaluation in the released Qwen3.5 layout (train/ckpt.py) together with
train_state.json (counters); --resume-from-release continues from it when no
state.pt exists (a fresh machine: optimizer moments restart, the data stream
and schedule continue where the release left them).

Data: training item i (a global counter) is tasks.item(MIX[i % len(MIX)],
TRAIN_SEEDS_FROM + i, level(i)), so a resumed run sees exactly the items an
uninterrupted one would.  Held-out accuracy: greedy exact match (teacher-forced
argmax over the answer tokens and the closing <|im_end|>, which is the same
thing), seeds [0, --eval-n) of every task at the current level.

Usage:  train.py [--minutes M] [--run DIR] [--out DIR] [--threads N] ...
"""
import argparse
import json
import math
import os
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import ckpt    # noqa: E402
import tasks   # noqa: E402

MIX = ["single", "distract", "tool", "multihop", "shift", "single", "distract", "tool"]


def level_of(tokens, schedule):
    """Curriculum level for the number of tokens trained so far."""
    lv = 0
    for i, t in enumerate(schedule):
        if tokens >= t:
            lv = i + 1
    return min(lv, max(tasks.LEVELS))


def encode_item(tok, it, eos):
    """(ids, answer_start) with the answer and <|im_end|> at ids[answer_start:]."""
    p = tok.encode(tasks.prompt_text(it)).ids
    a = tok.encode(it["answer"]).ids
    return p + a + [eos], len(p)


def make_model(text_cfg, seed):
    import torch
    from transformers import Qwen3_5TextConfig, Qwen3_5ForCausalLM
    cfg = Qwen3_5TextConfig(**{k: v for k, v in text_cfg.items() if k != "model_type"})
    torch.manual_seed(seed)
    m = Qwen3_5ForCausalLM(cfg)
    return m


def batch_loss(model, seqs, ans_w, device="cpu"):
    """Mean token loss over a padded batch; answer tokens weigh ans_w."""
    import torch
    n = max(len(s) for s, _ in seqs)
    ids = torch.zeros(len(seqs), n, dtype=torch.long)
    w = torch.zeros(len(seqs), n)
    for b, (s, a0) in enumerate(seqs):
        ids[b, :len(s)] = torch.tensor(s)
        w[b, 1:len(s)] = 1.0
        w[b, a0:len(s)] = ans_w
    ids, w = ids.to(device), w.to(device)
    logits = model(input_ids=ids).logits[:, :-1].float()
    ce = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                           ids[:, 1:].reshape(-1), reduction="none")
    w = w[:, 1:].reshape(-1)
    return (ce * w).sum() / w.sum(), int((w > 0).sum())


def evaluate(model, tok, eos, level, n, tasks_=None, device="cpu"):
    """{task: accuracy} on held-out seeds [0, n) at `level`."""
    import torch
    model.eval()
    acc = {}
    with torch.no_grad():
        for task in tasks_ or tasks.TASKS:
            ok = 0
            for s in range(n):
                ids, a0 = encode_item(tok, tasks.item(task, s, level), eos)
                x = torch.tensor([ids], device=device)
                pred = model(input_ids=x).logits[0, a0 - 1:len(ids) - 1].argmax(-1)
                ok += bool((pred == x[0, a0:]).all())
            acc[task] = ok / n
    model.train()
    return acc


def lr_at(step, a):
    if step < a.warmup:
        return a.lr * (step + 1) / a.warmup
    return max(a.lr_min, a.lr)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", default=os.path.join(HERE, "run"))
    ap.add_argument("--out", default=os.path.join(ROOT, "models", "pic-qa"))
    ap.add_argument("--minutes", type=float, default=60.0, help="wall-clock budget")
    ap.add_argument("--until", default=None, help="stop at this UTC time HH:MM instead")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (1 on a shared machine: spinning OpenMP threads waste it)")
    ap.add_argument("--device", default="auto", help="cpu, cuda or auto (cuda when present)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--batch-tokens", type=int, default=2048)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--lr-min", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--wd", type=float, default=0.01)
    ap.add_argument("--ans-w", type=float, default=4.0, help="loss weight of answer tokens")
    ap.add_argument("--schedule", default="1e6,3e6,8e6,16e6",
                    help="tokens at which the curriculum level goes up (levels 1..4)")
    ap.add_argument("--log-every", type=int, default=5)
    ap.add_argument("--eval-every", type=float, default=15.0, help="minutes between evals")
    ap.add_argument("--eval-n", type=int, default=10)
    ap.add_argument("--resume-from-release", action="store_true",
                    help="no state.pt: start from the release checkpoint in --out")
    a = ap.parse_args(argv)

    import torch
    from tokenizers import Tokenizer
    import fastgdn
    fastgdn.patch()
    torch.set_num_threads(a.threads)
    os.makedirs(a.run, exist_ok=True)
    schedule = [float(x) for x in a.schedule.split(",")]

    state_path = os.path.join(a.run, "state.pt")
    tok_dir = a.out
    if not os.path.exists(os.path.join(tok_dir, "tokenizer.json")):
        print("train: training the tokenizer into %s" % tok_dir, flush=True)
        ckpt.write_tokenizer(tok_dir)
        ckpt.write_json_files(tok_dir)
    tok = Tokenizer.from_file(os.path.join(tok_dir, "tokenizer.json"))
    eos = ckpt.specials(tok_dir)["<|im_end|>"]
    device = a.device if a.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    model = make_model(ckpt.text_config_dict(tok_dir), a.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.95),
                            weight_decay=a.wd)
    st = {"step": 0, "item": 0, "tokens": 0, "seconds": 0.0, "best": -1.0,
          "digest": tasks.corpus_digest()}
    if os.path.exists(state_path):
        s = torch.load(state_path, weights_only=False, map_location="cpu")
        model.load_state_dict(s["model"])
        opt.load_state_dict(s["opt"])
        st.update(s["st"])
        print("train: resumed %s at step %d, %d tokens" % (state_path, st["step"],
                                                           st["tokens"]), flush=True)
    elif a.resume_from_release and os.path.exists(os.path.join(a.out, "train_state.json")):
        ckpt.load_weights(model, a.out)
        with open(os.path.join(a.out, "train_state.json")) as f:
            st.update(json.load(f)["state"])
        print("train: resumed release %s at step %d, %d tokens" % (a.out, st["step"],
                                                                   st["tokens"]), flush=True)
    if st["digest"] != tasks.corpus_digest():
        print("train: WARNING prose corpus digest %s != %s (other Python version): "
              "items differ from the original run" % (tasks.corpus_digest(), st["digest"]),
              flush=True)
    model.to(device)
    if os.path.exists(state_path):      # moments back onto the model's device
        opt.load_state_dict(opt.state_dict())
    n_params = sum(p.numel() for p in model.parameters())
    print("train: %d parameters, %s, %d threads" % (n_params, device, a.threads), flush=True)

    log_path = os.path.join(a.run, "log.jsonl")
    rel_log = os.path.join(a.out, "train_log.jsonl")
    if not os.path.exists(log_path) and os.path.exists(rel_log):
        shutil.copyfile(rel_log, log_path)     # a fresh machine: the history goes on
    logf = open(log_path, "a")

    def log(rec):
        rec["time"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        logf.write(json.dumps(rec) + "\n")
        logf.flush()
        print(json.dumps(rec), flush=True)

    def save(acc):
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "st": st},
                   state_path + ".tmp")
        os.replace(state_path + ".tmp", state_path)
        mean = sum(acc.values()) / len(acc)
        if mean >= st["best"]:
            st["best"] = mean
            ckpt.write_json_files(a.out)
            ckpt.save_weights(model, a.out)
            args = dict(vars(a))
            for k in ("run", "out"):
                args[k] = os.path.relpath(args[k], ROOT)
            with open(os.path.join(a.out, "train_state.json"), "w") as f:
                json.dump({"state": st, "heldout": acc,
                           "level": level_of(st["tokens"], schedule),
                           "args": args}, f, indent=1, sort_keys=True)
                f.write("\n")
            shutil.copyfile(os.path.join(a.run, "log.jsonl"),
                            os.path.join(a.out, "train_log.jsonl"))
            print("train: release checkpoint written to %s" % a.out, flush=True)

    if a.until:
        hh, mm_ = (int(x) for x in a.until.split(":"))
        now = time.gmtime()
        left = (hh * 60 + mm_) - (now.tm_hour * 60 + now.tm_min) - now.tm_sec / 60.0
        a.minutes = max(0.0, left)
    t_end = time.time() + a.minutes * 60
    t_eval = time.time() + a.eval_every * 60
    model.train()
    run_loss, run_tok, t_log = 0.0, 0, time.time()
    while time.time() < t_end:
        t0 = time.time()
        lv = level_of(st["tokens"], schedule)
        seqs, ntok = [], 0
        while ntok < a.batch_tokens:
            i = st["item"]
            # a quarter of the items come from a lower level (keeps short items in)
            li = lv - 1 if (lv > 0 and i % 4 == 3) else lv
            it = tasks.item(MIX[i % len(MIX)], tasks.TRAIN_SEEDS_FROM + i, li)
            s = encode_item(tok, it, eos)
            seqs.append(s)
            ntok += len(s[0])
            st["item"] += 1
        for g in opt.param_groups:
            g["lr"] = lr_at(st["step"], a)
        loss, _ = batch_loss(model, seqs, a.ans_w, device)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        if not (torch.isfinite(loss) and torch.isfinite(gn)):
            # skip the batch rather than poison the weights and the moments
            log({"step": st["step"], "tokens": st["tokens"], "skipped": "non-finite",
                 "loss": float(loss)})
            continue
        opt.step()
        st["step"] += 1
        st["tokens"] += ntok
        st["seconds"] += time.time() - t0
        run_loss += loss.item()
        run_tok += ntok
        if st["step"] % a.log_every == 0:
            dt = time.time() - t_log
            log({"step": st["step"], "tokens": st["tokens"], "level": lv,
                 "loss": round(run_loss / a.log_every, 4),
                 "tok_per_s": round(run_tok / dt, 1), "lr": lr_at(st["step"], a)})
            run_loss, run_tok, t_log = 0.0, 0, time.time()
        if time.time() >= t_eval:
            acc = evaluate(model, tok, eos, lv, a.eval_n, device=device)
            log({"step": st["step"], "tokens": st["tokens"], "level": lv, "heldout": acc})
            save(acc)
            t_eval = time.time() + a.eval_every * 60
    lv = level_of(st["tokens"], schedule)
    acc = evaluate(model, tok, eos, lv, a.eval_n, device=device)
    log({"step": st["step"], "tokens": st["tokens"], "level": lv, "heldout": acc,
         "final": True})
    save(acc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
