#!/usr/bin/env python3
"""recall_probe.py — raw-token multi-query recall probes on the real vocabulary (issue 11).

What makes key -> value recall learnable in minutes on one core?  A sequence is
NPAIRS key/value pairs, then every key again (shuffled) followed by its value; the
loss is on the query values only.  Keys are entity-name pieces of the committed
tokenizer (the pieces tasks._name() names tokenize into), values its digit ids,
separators its ":" and " " ids, so what is learned is in the embeddings the
released model uses.  The sequences are tasks.raw_item()'s (the raw-token levels
train.py trains), so a probe and the curriculum see the same data.

    OMP_WAIT_POLICY=PASSIVE .venv-oracle/bin/python -m train.recall_probe \
        --preset h128x4 --shapes adj:1,sep:1 --minutes 15 --lr 3e-3

--shapes: raw-level names with weights (the share of each batch); held-out
accuracy (seeds below 100000) is logged for every shape named in --eval.
"""
import argparse
import json
import math
import os
import random
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

from train import ckpt    # noqa: E402
from train import tasks   # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default="h128x4", choices=sorted(ckpt.PRESETS))
    ap.add_argument("--shapes", default="sep:1", help="raw shape:weight,... (tasks.RAW_SHAPES)")
    ap.add_argument("--eval", default=None, help="shapes to evaluate (default: those trained)")
    ap.add_argument("--minutes", type=float, default=15.0)
    ap.add_argument("--steps", type=int, default=100000)
    ap.add_argument("--bs", type=int, default=64, help="sequences per batch")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=0)
    ap.add_argument("--decay-steps", type=int, default=0,
                    help="cosine decay to lr/10 over this many steps (0: constant)")
    ap.add_argument("--eval-every", type=int, default=25)
    ap.add_argument("--eval-n", type=int, default=256, help="held-out sequences per shape")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tok", default=os.path.join(ROOT, "models", "pic-qa"))
    ap.add_argument("--log", default=None, help="append JSON lines here too")
    ap.add_argument("--stop-at", type=float, default=0.0,
                    help="stop when every evaluated shape reaches this accuracy")
    ap.add_argument("--save", default=None,
                    help="write a train.py state (RUN/state.pt: weights, AdamW moments, "
                         "counters at --level) to this run directory at the end")
    ap.add_argument("--level", type=int, default=-12, help="the level --save records")
    a = ap.parse_args(argv)

    import torch
    from train import fastgdn
    from train import train
    from tokenizers import Tokenizer
    fastgdn.patch()
    torch.set_num_threads(1)
    tok = Tokenizer.from_file(os.path.join(a.tok, "tokenizer.json"))
    voc = tasks.raw_vocab(tok)
    ckpt.use_preset(a.preset)
    model = train.make_model(ckpt.text_config_dict(a.tok), a.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.95), weight_decay=0.01)
    shapes = [(s.split(":")[0], float(s.split(":")[1])) for s in a.shapes.split(",")]
    tot = sum(w for _, w in shapes)
    ev = (a.eval or ",".join(s for s, _ in shapes)).split(",")
    logf = open(a.log, "a") if a.log else None

    def log(rec):
        rec["time"] = time.strftime("%H:%M:%S", time.gmtime())
        print(json.dumps(rec), flush=True)
        if logf:
            logf.write(json.dumps(rec) + "\n")
            logf.flush()

    def run(seqs):
        n = max(len(s) for s, _ in seqs)
        ids = torch.zeros(len(seqs), n, dtype=torch.long)
        tgt = torch.zeros(len(seqs), n)
        for b, (s, m) in enumerate(seqs):
            ids[b, :len(s)] = torch.tensor(s)
            tgt[b, :len(m)] = torch.tensor(m, dtype=torch.float)
        keep = tgt[:, 1:].reshape(-1).nonzero().squeeze(1)              # [P]
        h = model.model(input_ids=ids).last_hidden_state[:, :-1]         # [B, n-1, H]
        h = h.reshape(-1, h.shape[-1]).index_select(0, keep)             # [P, H]
        lg = model.lm_head(h)                                            # [P, V]
        gold = ids[:, 1:].reshape(-1).index_select(0, keep)
        return torch.nn.functional.cross_entropy(lg, gold), (lg.argmax(-1) == gold).float().mean()

    held = {s: [tasks.raw_item(s, k, voc) for k in range(a.eval_n)] for s in ev}

    def evaluate(step):
        model.eval()
        rec = {"step": step}
        with torch.no_grad():
            for s, items in held.items():
                ok = 0.0
                for b0 in range(0, len(items), 64):
                    part = items[b0:b0 + 64]
                    ok += float(run(part)[1]) * len(part)
                rec[s] = round(ok / len(items), 3)
        model.train()
        rec["min"] = round((time.time() - t0) / 60, 2)
        log(rec)
        return all(rec[s] >= a.stop_at for s in held) if a.stop_at else False

    log({"start": vars(a), "params": sum(p.numel() for p in model.parameters())})
    t0 = time.time()
    item, ntok, t_log, tokens = 0, 0, time.time(), 0
    for step in range(a.steps + 1):
        if step % a.eval_every == 0 and evaluate(step):
            break
        if time.time() - t0 > a.minutes * 60 or step == a.steps:
            break
        seqs = []
        for j in range(a.bs):
            r = random.Random(item)
            x = r.random() * tot
            for s, w in shapes:
                x -= w
                if x < 0:
                    break
            seqs.append(tasks.raw_item(s, tasks.TRAIN_SEEDS_FROM + item, voc))
            item += 1
        lr = a.lr * min(1.0, (step + 1) / a.warmup) if a.warmup else a.lr
        if a.decay_steps and step > a.warmup:
            f = min(1.0, (step - a.warmup) / max(1, a.decay_steps - a.warmup))
            lr = a.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * f)))
        for g in opt.param_groups:
            g["lr"] = lr
        loss, acc = run(seqs)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        ntok += sum(len(s) for s, _ in seqs)
        tokens += sum(len(s) for s, _ in seqs)
        if step % 25 == 0:
            dt = time.time() - t_log
            log({"step": step, "loss": round(loss.item(), 3), "acc": round(acc.item(), 3),
                 "lr": round(lr, 5), "tok_per_s": round(ntok / dt)})
            ntok, t_log = 0, time.time()
    if a.save:
        os.makedirs(a.save, exist_ok=True)
        st = {"step": step, "item": 0, "tokens": tokens, "seconds": time.time() - t0,
              "best": -1.0, "level": a.level, "digest": tasks.corpus_digest(),
              "preset": a.preset, "probe": " ".join(sys.argv[1:])}
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "st": st},
                   os.path.join(a.save, "state.pt"))
        log({"saved": os.path.join(a.save, "state.pt"), "step": step})
    return 0


if __name__ == "__main__":
    sys.exit(main())
