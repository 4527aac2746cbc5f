#!/usr/bin/env python3
"""train.py — train the small Qwen3.5 model on train/tasks.py (issue 11).

Seeded and resumable.  The run directory (--run, default train/run/) holds:
  state.pt        fp32 weights + AdamW state + counters (resume point; not committed),
                  written at every evaluation, every --save-every minutes and at the end;
                  SIGTERM / SIGINT (Ctrl-C) end the run at the next batch group with
                  the final evaluation and save (a second one kills it at once)
  log.jsonl       one line per log step (loss) and per evaluation (held-out accuracy);
                  copied to OUT/train_log.jsonl with every release checkpoint
The release checkpoint (--out, default models/pic-qa/) is written at every
evaluation in the released Qwen3.5 layout (train/ckpt.py) together with
train_state.json (counters); --resume-from-release continues from it when no
state.pt exists (a fresh machine: optimizer moments restart, the data stream
and schedule continue where the release left them).

Data: training item i (a global counter) is tasks.item(mix[i % len(mix)],
TRAIN_SEEDS_FROM + i, level), followed by up to --follow follow-up turns (other
questions its context answers, tasks' "qa"; chosen by random.Random(i)), so a
resumed run with the same arguments sees exactly the items an uninterrupted one
would.  Loss: mean cross-entropy over the answer tokens (each answer and its
<|im_end|>) plus --lm-w times the mean over all other tokens.

Held-out accuracy: exact match as teacher-forced argmax over the answer's ids and
the closing <|im_end|> (greedy decoding's, except for the 1-2 items in 100 that
greedy answers right with other token ids: train/heldout.py counts those right,
tasks.answer_ok), seeds [0, --eval-n)
of every task at --eval-level (the level bench/accuracy.py measures; its mean picks
the release checkpoint), and at the training level when that differs.  The
curriculum level rises when held-out exact match at the training level reaches
--promote on every task of the mix (levels -2..4 of tasks.LEVELS; -2 is dense
associative recall, -1 a warm-up of one-sentence documents).  --preset picks the
model size (ckpt.PRESETS; kept in the state).

Usage:  train.py [--minutes M] [--run DIR] [--out DIR] [--threads N] ...
"""
import argparse
import json
import math
import os
import shutil
import signal
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

from train import ckpt    # noqa: E402
from train import tasks   # noqa: E402

MIX = ["single", "distract", "tool", "multihop", "shift", "single", "distract", "tool"]


def encode_item(tok, it, eos):
    """(ids, answer_start) with the answer and <|im_end|> at ids[answer_start:]."""
    ids, spans = encode_turns(tok, it, eos)
    return ids, spans[-1][0]


def encode_turns(tok, it, eos):
    """(ids, [(start, end)]): the prompt, the answer and <|im_end|>, with the spans of
    every answer, the earlier rounds' (tasks.turn_answer_spans, each with its
    <|im_end|>) and the item's last; the prompt tokenized piecewise at the answers'
    edges, as the answer is after the prompt."""
    text = tasks.prompt_text(it)
    ids, spans, pos = [], [], 0
    for s, e in tasks.turn_answer_spans(it, text):
        ids += tok.encode(text[pos:s]).ids
        s0 = len(ids)
        ids += tok.encode(text[s:e]).ids
        spans.append((s0, len(ids)))
        pos = e
    ids += tok.encode(text[pos:]).ids
    s0 = len(ids)
    ids += tok.encode(it["answer"]).ids + [eos]
    return ids, spans + [(s0, len(ids))]


FOLLOW = ("\n<|im_start|>user\n%s<|im_end|>\n"
          "<|im_start|>assistant\n<think>\n\n</think>\n\n")


def encode_train(tok, it, eos, n_follow, rng):
    """(ids, [(start, end)], [(start, end)]): the item and its answer (and its earlier
    rounds' answers: encode_turns), then up to n_follow follow-up turns (question,
    generation prompt, answer, <|im_end|>);
    the first list spans the answer tokens (each closing <|im_end|> included), the
    second the follow-up questions (their entity names are copies from the context)."""
    ids, spans = encode_turns(tok, it, eos)
    qspans = []
    qa = list(it.get("qa") or [])
    rng.shuffle(qa)
    head = len(tok.encode("\n<|im_start|>user\n").ids)
    for q, a in qa[:n_follow]:
        f = tok.encode(FOLLOW % q).ids
        qspans.append((len(ids) + head, len(ids) + len(tok.encode(FOLLOW.split("%s")[0] + q).ids)))
        ids = ids + f
        s0 = len(ids)
        ids = ids + tok.encode(a).ids + [eos]
        spans.append((s0, len(ids)))
    return ids, spans, qspans


def encode_raw(shape, seed, voc):
    """(ids, [(start, end)], []) of tasks.raw_item: the answer spans are the runs of
    its query-value targets (the same batch format as encode_train)."""
    ids, tgt = tasks.raw_item(shape, seed, voc)
    spans, j = [], 0
    while j < len(tgt):
        if tgt[j]:
            k = j
            while k < len(tgt) and tgt[k]:
                k += 1
            spans.append((j, k))
            j = k
        else:
            j += 1
    return ids, spans, []


def _unit(i, salt):
    """A uniform number in [0, 1) that is a pure function of (i, salt) (splitmix64)."""
    z = (i * 0x9E3779B97F4A7C15 + salt) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return ((z ^ (z >> 31)) >> 11) / float(1 << 53)


def train_item(i, lv, mix, tok, eos, voc, a):
    """Training sequence of global item i at level lv (a pure function of i and the
    arguments): a raw-token item at the raw levels (tasks.RAW_LEVELS) and, with
    --dense-frac f, for a fraction f of the items at the other levels (shape
    --dense-shape: keeps the recall circuit trained; a shape "L<level>" is the
    mix[i % len] chat item at that level); else the task mix[i % len] item, a
    quarter of them from the level below at levels > 0.
    --stream 1 (the committed lineage's) picks the dense items and that quarter by
    i's place in the mix's cycle, so with a mix of 4 and f = 0.25 the dense items
    replace every mix[3] item and the quarter is never drawn; --stream 2 draws both
    by a hash of i, independent of the task."""
    import random
    seed = tasks.TRAIN_SEEDS_FROM + i
    if lv in tasks.RAW_LEVELS:
        shapes = tasks.RAW_LEVELS[lv]
        return encode_raw(shapes[i % len(shapes)], seed, voc)
    if getattr(a, "stream", 1) >= 2:
        dense = _unit(i, 1) < a.dense_frac
        k = int(_unit(i, 2) * 1e9)
        below = lv > 0 and _unit(i, 3) < 0.25
    else:
        dense = bool(a.dense_frac) and int((i + 1) * a.dense_frac) > int(i * a.dense_frac)
        k = int(i * a.dense_frac)
        below = lv > 0 and i % 4 == 3
    li = lv - 1 if below else lv
    if dense:
        shapes = a.dense_shape.split(",")
        shape = shapes[k % len(shapes)]
        if not shape.startswith("L"):
            return encode_raw(shape, seed, voc)
        li = int(shape[1:])             # "L-2": the mix's chat item at level -2
    it = tasks.item(mix[i % len(mix)], seed, li)
    return encode_train(tok, it, eos, a.follow, random.Random(i))


_GEN = None     # (mix, tok, eos, voc, args) of the item workers (inherited by fork)
ITEM_BLOCK = 64


def _item_block(key):
    """Training sequences of items [k*ITEM_BLOCK, (k+1)*ITEM_BLOCK) at level lv."""
    lv, k = key
    mix, tok, eos, voc, a = _GEN
    return [train_item(i, lv, mix, tok, eos, voc, a)
            for i in range(k * ITEM_BLOCK, (k + 1) * ITEM_BLOCK)]


class ItemSource:
    """train_item(i, lv, ...) for increasing i, made by `workers` forked processes a
    few blocks ahead (workers <= 1: in this process).  The stream is the same
    function of i either way, so a run's items do not depend on --workers."""

    def __init__(self, workers, mix, tok, eos, voc, a, ahead=None):
        global _GEN
        _GEN = (mix, tok, eos, voc, a)
        self.pool, self.pending = None, {}
        self.ahead = ahead or 2 * max(1, workers)
        if workers > 1:
            import multiprocessing
            self.pool = multiprocessing.get_context("fork").Pool(workers)

    def get(self, i, lv):
        """The training sequence of global item i at level lv."""
        if self.pool is None:
            mix, tok, eos, voc, a = _GEN
            return train_item(i, lv, mix, tok, eos, voc, a)
        k = i // ITEM_BLOCK
        for key in [key for key in self.pending if key[0] != lv or key[1] < k]:
            del self.pending[key]
        for kk in range(k, k + self.ahead):
            if (lv, kk) not in self.pending:
                self.pending[(lv, kk)] = self.pool.apply_async(_item_block, ((lv, kk),))
        return self.pending[(lv, k)].get()[i - k * ITEM_BLOCK]


def _hidden(model, part, device):
    """(x (B, L) ids right-padded with 0, hs (B, L, H) last hidden states) of the
    sequences [(ids, _), ...] of an evaluation batch."""
    import torch
    L = max(len(ids) for ids, _ in part)
    x = torch.zeros(len(part), L, dtype=torch.long)
    for b, (ids, _) in enumerate(part):
        x[b, :len(ids)] = torch.tensor(ids)
    return x, model.model(input_ids=x.to(device)).last_hidden_state


def evaluate_raw(model, voc, shapes, n, device="cpu", bs=32):
    """({shape: exact match}, {shape: target-token accuracy}, {shape: target loss}) of
    the raw shapes (tasks.RAW_SHAPES names) on held-out seeds [0, n) (every target is
    a value digit)."""
    import torch
    model.eval()
    acc, tacc, aloss = {}, {}, {}
    with torch.no_grad():
        for shape in sorted(set(shapes)):
            ok, t_ok, t_n, ce_sum = 0, 0, 0, 0.0
            items = [tasks.raw_item(shape, s, voc) for s in range(n)]
            for b0 in range(0, n, bs):
                part = items[b0:b0 + bs]
                x, hs = _hidden(model, part, device)
                for b, (ids, tgt) in enumerate(part):
                    pos = torch.tensor([j for j in range(1, len(ids)) if tgt[j]], device=hs.device)
                    lg = model.lm_head(hs[b].index_select(0, pos - 1)).float()
                    gold = x[b].to(hs.device).index_select(0, pos)
                    hit = lg.argmax(-1) == gold
                    ok += bool(hit.all())
                    t_ok += int(hit.sum())
                    t_n += len(gold)
                    ce_sum += float(torch.nn.functional.cross_entropy(lg, gold, reduction="sum"))
            acc[shape] = ok / n
            tacc[shape] = round(t_ok / t_n, 4)
            aloss[shape] = round(ce_sum / t_n, 4)
    model.train()
    return acc, tacc, aloss


def make_model(text_cfg, seed, gdn_init="fla"):
    """A fresh Qwen3_5ForCausalLM.  gdn_init "fla": the GDN decay parameters as
    flash-linear-attention / Mamba2 initialise them (A ~ U(0, 16), dt = softplus(dt_bias)
    log-uniform in [0.001, 0.1]: per-token decay exp(-A dt) ~ 0.2-1, memories of
    tens of tokens); "hf": transformers' init (dt_bias = 1, so decay ~ exp(-10) per
    token: the GDN layers start with no memory and their decay gradients vanish;
    the committed model's steps 0-1121 were trained from it)."""
    import torch
    from transformers import Qwen3_5TextConfig, Qwen3_5ForCausalLM
    cfg = Qwen3_5TextConfig(**{k: v for k, v in text_cfg.items() if k != "model_type"})
    torch.manual_seed(seed)
    m = Qwen3_5ForCausalLM(cfg)
    if gdn_init == "fla":
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for layer in m.model.layers:
                la = getattr(layer, "linear_attn", None)
                if la is None:
                    continue
                n = la.dt_bias.numel()
                lo, hi = math.log(0.001), math.log(0.1)
                dt = torch.exp(torch.rand(n, generator=g) * (hi - lo) + lo).clamp(min=1e-4)
                la.dt_bias.copy_(dt + torch.log(-torch.expm1(-dt)))      # softplus^-1(dt)
                la.A_log.copy_(torch.log(torch.rand(n, generator=g) * 16).clamp(min=-20))
    return m


def _targets(seqs):
    """(ids [B, n] right-padded with 0, and the answer / follow-up question / other
    target masks, each [B*(n-1)] over the next-token positions) of sequences
    [(ids, answer spans, question spans), ...]."""
    import torch
    n = max(len(s[0]) for s in seqs)
    ids = torch.zeros(len(seqs), n, dtype=torch.long)
    ans = torch.zeros(len(seqs), n)            # [B, n] 1 on answer targets
    qst = torch.zeros(len(seqs), n)            # [B, n] 1 on follow-up question targets
    oth = torch.zeros(len(seqs), n)            # [B, n] 1 on the other targets
    for b, (s, spans, qspans) in enumerate(seqs):
        ids[b, :len(s)] = torch.tensor(s)
        oth[b, 1:len(s)] = 1.0
        for s0, s1 in spans:
            ans[b, s0:s1] = 1.0
            oth[b, s0:s1] = 0.0
        for s0, s1 in qspans:
            qst[b, s0:s1] = 1.0
            oth[b, s0:s1] = 0.0
    return ids, *(x[:, 1:].reshape(-1) for x in (ans, qst, oth))


def target_counts(seqs):
    """(answer, follow-up question, other) target counts of a batch: the
    denominators of batch_loss's means."""
    _, ans, qst, oth = _targets(seqs)
    return float(ans.sum()), float(qst.sum()), float(oth.sum())


def lookup_targets(ids, spans):
    """[(query position, value position)] of a training sequence's answers whose value
    the context holds once: the position that predicts an answer's first token, and
    where that value starts in the context before the answer (outside earlier answers).
    The answer's tokens without its <|im_end|> are matched whole, or without their
    first token (a word or a code starts with another token after a space in the
    context: " MN" vs "MN"), which then is the token before the match."""
    out = []
    for k, (s0, s1) in enumerate(spans):
        val = ids[s0:s1 - 1]
        if not val:
            continue
        taken = set()
        for a0, a1 in spans[:k]:
            taken.update(range(a0, a1))
        hits = set()
        for pat, back in ((val, 0), (val[1:], 1)):
            if len(pat) < 2 and back:
                continue
            n = len(pat)
            for j in range(back, s0 - n + 1):
                if ids[j:j + n] == pat and j not in taken:
                    hits.add(j - back)
            if hits:
                break
        if len(hits) == 1:
            out.append((s0 - 1, hits.pop()))
    return out


def _att_loss(att, seqs):
    """Mean over the batch's lookup_targets of -log(the largest attention weight any
    head of `att` [B, heads, n, n] gives the value's first token from the position
    that predicts the answer's first token): the lookup as one attention pick."""
    import torch
    terms = []
    for b, (s, spans, _) in enumerate(seqs):
        for p, t in lookup_targets(s, spans):
            terms.append(att[b, :, p, t].max())
    if not terms:
        return att.new_zeros(())
    return -torch.log(torch.stack(terms) + 1e-6).mean()


def batch_loss(model, seqs, lm_w, q_w=0.0, device="cpu", counts=None, att_w=0.0, att=None,
               bind=None, route=None):
    """(loss, answer loss) of a right-padded batch of (ids, answer spans, question
    spans): mean cross-entropy over answer tokens + q_w * mean over follow-up
    question tokens + lm_w * mean over the other tokens (+ att_w * _att_loss of the
    last full-attention layer; its value goes into the dict `att` when given;
    + bind.weight * the binding loss of the binding.Binder bind, when given; with a
    route.RouteDrop, its layers' mixers dropped at a share of the answer positions).
    counts (target_counts of a whole batch this is part of, and its sequence count)
    divides the sums instead of this part's own counts, so the parts' losses add up to
    the whole batch's (the attention term's parts weigh by their sequences: within ~2%
    of one piece)."""
    import torch
    ids, ans, qst, oth = (x.to(device) for x in _targets(seqs))
    if lm_w == 0:
        oth = torch.zeros_like(oth)
    # the vocabulary projection only at the positions that carry a loss (a tiny
    # model spends as much on it as on its layers; with --lm-w 0 that is ~1/5 of them)
    keep = ((ans + qst + oth) > 0).nonzero().squeeze(1)                # [P]
    if route is not None:
        route.set(ans.reshape(ids.shape[0], -1), device)
    try:
        out = model.model(input_ids=ids, output_attentions=bool(att_w),
                          output_hidden_states=bind is not None)
    finally:
        if route is not None:
            route.clear()
    lat = None
    if att_w:
        full = [x for x in out.attentions if x is not None]            # [B, heads, n, n] each
        lat = _att_loss(full[-1], seqs)
        if att is not None:
            att["loss"] = att.get("loss", 0.0) + float(lat.detach()) * len(seqs)
            att["seqs"] = att.get("seqs", 0) + len(seqs)
    h = out.last_hidden_state[:, :-1]                                  # [B, n-1, H]
    h = h.reshape(-1, h.shape[-1]).index_select(0, keep)               # [P, H]
    logits = model.lm_head(h).float()                                  # [P, V]
    ce = torch.nn.functional.cross_entropy(logits, ids[:, 1:].reshape(-1).index_select(0, keep),
                                           reduction="none")
    ans, qst, oth = (x.index_select(0, keep) for x in (ans, qst, oth))
    na, nq, no = counts[:3] if counts else (float(ans.sum()), float(qst.sum()), float(oth.sum()))
    la = (ce * ans).sum() / max(na, 1.0)
    lq = (ce * qst).sum() / max(nq, 1.0)
    lo = (ce * oth).sum() / max(no, 1.0) if lm_w else ce.new_zeros(())
    loss = la + q_w * lq + lm_w * lo
    if lat is not None:
        loss = loss + att_w * lat * len(seqs) / (counts[3] if counts else len(seqs))
    if bind is not None:
        lb = bind.loss(out.hidden_states, seqs, [lookup_targets(s, sp) for s, sp, _ in seqs])
        if att is not None:
            att["bind"] = att.get("bind", 0.0) + float(lb.detach()) * len(seqs)
            att["bind_seqs"] = att.get("bind_seqs", 0) + len(seqs)
        loss = loss + bind.weight * lb * len(seqs) / (counts[3] if counts else len(seqs))
    return loss, la


def backward_batch(model, seqs, lm_w, q_w, device, micro=1, att_w=0.0, att=None, bind=None,
                   route=None):
    """Accumulate into the parameters' .grad the gradient of batch_loss over seqs,
    run as `micro` micro-batches of consecutive sequences (the same loss: each part
    divided by the whole batch's counts); returns (loss, answer loss, padded
    positions) of the batch."""
    counts = target_counts(seqs) + (len(seqs),)
    loss, la, padded = 0.0, 0.0, 0
    for k in range(micro):
        part = seqs[k * len(seqs) // micro:(k + 1) * len(seqs) // micro]
        if not part:
            continue
        lk, lak = batch_loss(model, part, lm_w, q_w, device, counts, att_w, att, bind, route)
        lk.backward()
        loss, la = loss + lk.detach(), la + lak.detach()
        padded += len(part) * max(len(s[0]) for s in part)
    return loss, la, padded


def pool_batches(items, start, lv, batch_tokens, group):
    """([(sequences, tokens)] batches, the item after them) of the pool of training
    items from `start` at level lv (a pure function of those and the arguments):
    the items until group * batch_tokens tokens, sorted by length (then by index), cut
    into consecutive runs of at least batch_tokens tokens (a last run under half
    of that joins the one before), in an order shuffled by random.Random(start).
    A right-padded batch of near-equal lengths computes ~its tokens, where one of
    consecutive items computes ~2.3x them (level 1)."""
    import random
    seqs, ntok, i = [], 0, start
    while ntok < group * batch_tokens:
        sq = items.get(i, lv)
        seqs.append((len(sq[0]), i, sq))
        ntok += len(sq[0])
        i += 1
    seqs.sort(key=lambda t: (t[0], t[1]))
    runs, cur, n = [], [], 0
    for ln, _, sq in seqs:
        cur.append(sq)
        n += ln
        if n >= batch_tokens:
            runs.append((cur, n))
            cur, n = [], 0
    if cur:
        if runs and n < batch_tokens // 2:
            runs[-1] = (runs[-1][0] + cur, runs[-1][1] + n)
        else:
            runs.append((cur, n))
    random.Random(start).shuffle(runs)
    return runs, i


def greedy_text(model, tok, ids, eos, n, device="cpu"):
    """The answer greedy decoding gives after the prompt ids: up to n tokens, stopped
    at eos, decoded (no cache: every step runs the whole sequence)."""
    import torch
    out, x = [], list(ids)
    with torch.no_grad():
        for _ in range(n):
            t = int(model(input_ids=torch.tensor([x], device=device)).logits[0, -1].argmax())
            if t == eos:
                break
            out.append(t)
            x.append(t)
    return tok.decode(out)


def evaluate(model, tok, eos, level, n, tasks_=None, device="cpu", bs=8, dacc=None,
             strings=False, tf=None, first=0):
    """({task: exact match}, {task: answer-token accuracy}, {task: answer loss}) on
    held-out seeds [first, first + n) at `level` (teacher-forced, batches of bs); dacc (a dict)
    gets {task: accuracy over the answer's digit tokens} (the values: 0.1 is
    chance; names and punctuation of a list answer do not count; 0 when an
    answer has no digit).  Exact match is teacher-forced argmax over the answer's
    ids and <|im_end|>; strings=True also decodes every item that fails it greedily
    and counts it right when tasks.answer_ok() says so (the answer's text produced
    by other token ids: 1-2 items in 100); tf (a dict) then gets {task: the
    teacher-forced exact match}."""
    import torch
    model.eval()
    acc, tacc, aloss = {}, {}, {}
    dacc = {} if dacc is None else dacc
    digits = {tok.token_to_id(str(i)) for i in range(10)}
    with torch.no_grad():
        for task in tasks_ or tasks.TASKS:
            ok, tf_ok, tok_ok, tok_n, ce_sum, d_ok, d_n = 0, 0, 0, 0, 0.0, 0, 0
            its = [tasks.item(task, s, level) for s in range(first, first + n)]
            items = [encode_item(tok, it, eos) for it in its]
            for b0 in range(0, n, bs):
                part = items[b0:b0 + bs]
                x, hs = _hidden(model, part, device)
                for b, (ids, a0) in enumerate(part):
                    lg = model.lm_head(hs[b, a0 - 1:len(ids) - 1]).float()
                    gold = x[b, a0:len(ids)].to(lg.device)
                    hit = lg.argmax(-1) == gold
                    isd = torch.tensor([int(t) in digits for t in gold.tolist()], device=lg.device)
                    d_ok += int((hit & isd).sum())
                    d_n += int(isd.sum())
                    tf_ok += bool(hit.all())
                    if strings and not bool(hit.all()):
                        ans = greedy_text(model, tok, ids[:a0], eos, len(ids) - a0 + 4, device)
                        ok += tasks.answer_ok(ans, its[b0 + b]["answer"])
                    else:
                        ok += bool(hit.all())
                    tok_ok += int(hit.sum())
                    tok_n += len(gold)
                    ce_sum += float(torch.nn.functional.cross_entropy(lg, gold, reduction="sum"))
            acc[task] = ok / n
            if tf is not None:
                tf[task] = tf_ok / n
            tacc[task] = round(tok_ok / tok_n, 4)
            aloss[task] = round(ce_sum / tok_n, 4)
            dacc[task] = round(d_ok / max(d_n, 1), 4)
    model.train()
    return acc, tacc, aloss


def lr_at(step, a):
    """Learning rate at `step` steps into this run (warmup restarts with each run:
    a resumed run may change the loss, and the moments must catch up)."""
    if step < a.warmup:
        return a.lr * (step + 1) / a.warmup
    return max(a.lr_min, a.lr)


def lr_sched(step, gstep, a):
    """lr_at, times a cosine from 1 to --lr-min/--lr over global steps
    [--decay-start, --decay-steps) when --decay-steps is set (a pure function of the
    global step, so a resumed run continues the schedule)."""
    lr = lr_at(step, a)
    if a.decay_steps:
        f = min(1.0, max(0.0, gstep - a.decay_start) / max(1, a.decay_steps - a.decay_start))
        lo = min(a.lr_min, a.lr) / a.lr
        lr *= lo + (1 - lo) * 0.5 * (1 + math.cos(math.pi * f))
    return lr


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", default=os.path.join(HERE, "run"))
    ap.add_argument("--out", default=os.path.join(ROOT, "models", "pic-qa"))
    ap.add_argument("--minutes", type=float, default=60.0, help="wall-clock budget")
    ap.add_argument("--until", default=None, help="stop at this UTC time HH:MM instead")
    ap.add_argument("--until-step", type=int, default=0,
                    help="stop after this optimizer step (reproducible phases)")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (1 on a shared machine: spinning OpenMP threads waste it)")
    ap.add_argument("--device", default="auto", help="cpu, cuda or auto (cuda when present)")
    ap.add_argument("--workers", type=int, default=1,
                    help="processes making the training items (a GPU outruns one; same items)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--batch-tokens", type=int, default=1024)
    ap.add_argument("--group", type=int, default=0,
                    help="batches of near-equal lengths: sort pools of GROUP batches' "
                         "items by length (pool_batches; 0: consecutive items, as before; "
                         "evaluations and the end wait for a pool's last batch)")
    ap.add_argument("--micro", type=int, default=1,
                    help="micro-batches per batch (gradients accumulated; doubled on "
                         "running out of GPU memory)")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--lr-min", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--decay-steps", type=int, default=0,
                    help="cosine decay of the lr to --lr-min over global steps [0, N) (0: none)")
    ap.add_argument("--decay-start", type=int, default=0,
                    help="global step where the cosine decay starts (default 0)")
    ap.add_argument("--decay-minutes", type=float, default=0.0,
                    help="set --decay-start to this run's first step and --decay-steps to where "
                         "the cosine ends this many minutes from the start, from the step rate "
                         "measured over steps 50-100 (logged as a 'schedule' record: replay with "
                         "those two values)")
    ap.add_argument("--dense-frac", type=float, default=0.0,
                    help="share of the items that are raw-token recall (--dense-shape) at the "
                         "chat levels (keeps the circuit)")
    ap.add_argument("--dense-shape", default="line",
                    help="tasks.RAW_SHAPES names the --dense-frac items cycle through, or "
                         "L<level> (e.g. L-2: the mix's chat item at that level; the dense "
                         "fact lists of level -2)")
    ap.add_argument("--stream", type=int, default=1, choices=[1, 2],
                    help="item stream: 1 the committed lineage's (dense items and the level-below "
                         "quarter by the place in the mix's cycle: with the 4-task mix and "
                         "--dense-frac 0.25 no mix[3] item is trained), 2 both by a hash of the "
                         "item (train_item)")
    ap.add_argument("--wd", type=float, default=0.01)
    ap.add_argument("--lm-w", type=float, default=0.1,
                    help="weight of the mean loss over non-answer tokens")
    ap.add_argument("--q-w", type=float, default=0.5,
                    help="weight of the mean loss over follow-up question tokens")
    ap.add_argument("--follow", type=int, default=4,
                    help="follow-up question turns appended to a training item (at most)")
    ap.add_argument("--mix", default="single,distract,tool,multihop,shift",
                    help="training tasks, in the order item i cycles through (tasks.TRAIN_TASKS: "
                         "the benchmark's and `hard`, single-hop among the asked "
                         "attribute's confusions)")
    ap.add_argument("--level", type=int, default=None,
                    help="set the curriculum level (else the state's; 0 on a fresh start)")
    ap.add_argument("--promote", type=float, default=0.9,
                    help="held-out exact match on every mix task that raises the level")
    ap.add_argument("--promote-on", default="em", choices=["em", "digits"],
                    help="what --promote measures: exact match, or teacher-forced accuracy "
                         "over the answer tokens without <|im_end|>")
    ap.add_argument("--max-level", type=int, default=max(tasks.LEVELS))
    ap.add_argument("--raw-eval-n", type=int, default=0,
                    help="also log held-out accuracy of --dense-shape on this many items")
    ap.add_argument("--eval-level", type=int, default=0,
                    help="level of the held-out set that picks the release checkpoint")
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--eval-every", type=float, default=12.0, help="minutes between evals")
    ap.add_argument("--eval-steps", type=int, default=0,
                    help="evaluate every this many steps instead (0: --eval-every minutes)")
    ap.add_argument("--eval-n", type=int, default=50)
    ap.add_argument("--save-every", type=float, default=10.0,
                    help="minutes between saves of state.pt alone (no evaluation); 0: never")
    ap.add_argument("--eval-tasks", default=None,
                    help="tasks of the --eval-level evaluation (default: all)")
    ap.add_argument("--preset", default=None, choices=sorted(ckpt.PRESETS),
                    help="model size (ckpt.PRESETS; else the state's, else ckpt.PRESET_NAME)")
    ap.add_argument("--gdn-init", default="fla", choices=["fla", "hf"],
                    help="GDN decay init of a fresh model (make_model; a resumed one keeps its weights)")
    ap.add_argument("--att-w", type=float, default=0.0,
                    help="weight of the lookup-attention loss: -log of the largest weight a "
                         "head of the last full-attention layer gives the answer's value in "
                         "the context from the position that predicts its first token "
                         "(lookup_targets; eager attention); 0: off")
    ap.add_argument("--bind-w", type=float, default=0.0,
                    help="weight of the binding loss (binding.py: training-only heads name a "
                         "planted value's attribute at its tokens and the copied value's at "
                         "the answer's query position); 0: off")
    ap.add_argument("--bind-layers", default="7",
                    help="the binding heads read the inputs of these layers (comma-separated)")
    ap.add_argument("--route-drop", type=float, default=0.0,
                    help="share of sequences whose --route-layers mixers are zeroed at the "
                         "positions that predict answer tokens (route.py); 0: off")
    ap.add_argument("--route-layers", default="0,1,2",
                    help="the layers --route-drop zeroes (comma-separated)")
    ap.add_argument("--resume-from-release", action="store_true",
                    help="no state.pt: start from the release checkpoint in --out")
    a = ap.parse_args(argv)

    import random
    import torch
    from tokenizers import Tokenizer
    from train import fastgdn
    fastgdn.patch()
    torch.set_num_threads(a.threads)
    os.makedirs(a.run, exist_ok=True)
    mix = a.mix.split(",")
    for t in mix:
        if t not in tasks.TRAIN_TASKS:
            sys.exit("train: unknown task %r in --mix" % t)

    state_path = os.path.join(a.run, "state.pt")
    tok_dir = a.out
    if not os.path.exists(os.path.join(tok_dir, "tokenizer.json")):
        print("train: training the tokenizer into %s" % tok_dir, flush=True)
        ckpt.write_tokenizer(tok_dir)
        ckpt.write_json_files(tok_dir)
    tok = Tokenizer.from_file(os.path.join(tok_dir, "tokenizer.json"))
    voc = tasks.raw_vocab(tok)
    eos = ckpt.specials(tok_dir)["<|im_end|>"]
    device = a.device if a.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    s = None
    rel_state = os.path.join(a.out, "train_state.json")
    if os.path.exists(state_path):
        s = torch.load(state_path, weights_only=False, map_location="cpu")
        had = s["st"].get("preset", ckpt.LEGACY_PRESET)
    elif a.resume_from_release and os.path.exists(rel_state):
        with open(rel_state) as f:
            had = json.load(f)["state"].get("preset", ckpt.LEGACY_PRESET)
    else:
        had = a.preset or ckpt.PRESET_NAME
    if a.preset and a.preset != had:
        sys.exit("train: --preset %s but the state to resume is %s (use another --run/--out)"
                 % (a.preset, had))
    ckpt.use_preset(had)
    model = make_model(ckpt.text_config_dict(tok_dir), a.seed, a.gdn_init)
    if a.att_w:
        model.set_attn_implementation("eager")     # _att_loss reads the attention weights
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.95),
                            weight_decay=a.wd)
    route = None
    if a.route_drop:
        from train import route as route_mod
        route = route_mod.RouteDrop(model, [int(x) for x in a.route_layers.split(",")],
                                    a.route_drop, a.seed)
    bind, opt_b = None, None
    if a.bind_w:            # its heads and their optimizer: training state, not the release
        from train import binding
        bind = binding.Binder(tok, model.config.hidden_size,
                              [int(x) for x in a.bind_layers.split(",")], a.bind_w)
        opt_b = torch.optim.AdamW(bind.heads.parameters(), lr=10 * a.lr, betas=(0.9, 0.95),
                                  weight_decay=a.wd)     # a probe learns faster than the model
        if s is not None and "bind" in s:
            bind.heads.load_state_dict(s["bind"])
            opt_b.load_state_dict(s["bind_opt"])
    st = {"step": 0, "item": 0, "tokens": 0, "seconds": 0.0, "best": -1.0, "level": 0,
          "digest": tasks.corpus_digest(), "preset": had}
    if s is not None:
        model.load_state_dict(s["model"])
        opt.load_state_dict(s["opt"])
        st.update(s["st"])
        print("train: resumed %s at step %d, %d tokens" % (state_path, st["step"],
                                                           st["tokens"]), flush=True)
    elif a.resume_from_release and os.path.exists(os.path.join(a.out, "train_state.json")):
        ckpt.load_weights(model, a.out)
        with open(os.path.join(a.out, "train_state.json")) as f:
            rel = json.load(f)
        st.update(rel["state"])
        if "level" not in rel["state"]:     # releases before the level was kept in the state
            st["level"] = rel.get("level", 0)
        print("train: resumed release %s at step %d, %d tokens" % (a.out, st["step"],
                                                                   st["tokens"]), flush=True)
    if a.level is not None:
        st["level"] = a.level
    if st["digest"] != tasks.corpus_digest():
        print("train: WARNING prose corpus digest %s != %s (other Python version): "
              "items differ from the original run" % (tasks.corpus_digest(), st["digest"]),
              flush=True)
    items = ItemSource(a.workers, mix, tok, eos, voc, a)    # forks before CUDA starts
    model.to(device)
    if bind:
        bind.heads.to(device)
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

    args = dict(vars(a))
    for k in ("run", "out"):
        args[k] = os.path.relpath(args[k], ROOT)
    log({"step": st["step"], "tokens": st["tokens"], "item": st["item"],
         "level": st["level"], "start": args})

    def save_state():
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "st": st}
                   | ({"bind": bind.heads.state_dict(), "bind_opt": opt_b.state_dict()}
                      if bind else {}),
                   state_path + ".tmp")
        os.replace(state_path + ".tmp", state_path)

    def save(acc):
        save_state()
        mean = sum(acc.values()) / len(acc)
        if mean >= st["best"]:
            st["best"] = mean
            with open(log_path) as f:
                ckpt.write_release(model, a.out, st, acc, a.eval_level, args, f.readlines())
            print("train: release checkpoint written to %s" % a.out, flush=True)

    def eval_and_save(final=False):
        dacc = {}
        acc, tacc, aloss = evaluate(model, tok, eos, a.eval_level, a.eval_n, device=device,
                                    dacc=dacc, tasks_=a.eval_tasks and a.eval_tasks.split(","))
        rec = {"step": st["step"], "tokens": st["tokens"], "level": a.eval_level,
               "heldout": acc, "answer_token_acc": tacc, "digit_acc": dacc,
               "answer_loss": aloss, "n": a.eval_n}
        if final:
            rec["final"] = True
        log(rec)
        lacc, ldacc = acc, dacc
        if st["level"] in tasks.RAW_LEVELS:     # every target is a value digit
            lacc, tacc, aloss = evaluate_raw(model, voc, tasks.RAW_LEVELS[st["level"]], a.eval_n,
                                             device=device)
            ldacc = tacc
            log({"step": st["step"], "tokens": st["tokens"], "level": st["level"],
                 "heldout": lacc, "digit_acc": ldacc, "answer_loss": aloss, "n": a.eval_n})
        elif st["level"] != a.eval_level:
            ldacc = {}
            lacc, tacc, aloss = evaluate(model, tok, eos, st["level"], a.eval_n,
                                         tasks_=sorted(set(mix)), device=device, dacc=ldacc)
            log({"step": st["step"], "tokens": st["tokens"], "level": st["level"],
                 "heldout": lacc, "answer_token_acc": tacc, "digit_acc": ldacc,
                 "answer_loss": aloss, "n": a.eval_n})
        if a.raw_eval_n and st["level"] not in tasks.RAW_LEVELS:
            racc, rtacc, raloss = evaluate_raw(model, voc, [x for x in a.dense_shape.split(",")
                                                            if not x.startswith("L")],
                                               a.raw_eval_n, device=device)
            log({"step": st["step"], "tokens": st["tokens"], "raw": a.dense_shape,
                 "heldout": racc, "digit_acc": rtacc, "answer_loss": raloss,
                 "n": a.raw_eval_n})
        by = ldacc if a.promote_on == "digits" else lacc
        if (not final and st["level"] < a.max_level
                and all(by[t] >= a.promote for t in (by if st["level"] in tasks.RAW_LEVELS
                                                     else set(mix)))):
            st["level"] += 1
            log({"step": st["step"], "tokens": st["tokens"], "promoted_to": st["level"]})
        save(acc)

    if a.until:
        hh, mm_ = (int(x) for x in a.until.split(":"))
        now = time.gmtime()
        left = (hh * 60 + mm_) - (now.tm_hour * 60 + now.tm_min) - now.tm_sec / 60.0
        a.minutes = max(0.0, left)
    t_start = time.time()
    t_end = t_start + a.minutes * 60
    t_eval = time.time() + a.eval_every * 60
    t_save = time.time() + a.save_every * 60
    step0 = st["step"]
    stop = []

    def ask_stop(signum, frame):
        stop.append(signum)
        signal.signal(signum, signal.SIG_DFL)       # a second one kills at once
        print("train: signal %d: stopping after this batch group" % signum, flush=True)

    signal.signal(signal.SIGTERM, ask_stop)
    signal.signal(signal.SIGINT, ask_stop)
    model.train()
    run_loss, run_ans, run_tok, n_run, t_log = 0.0, 0.0, 0, 0, time.time()
    att_run = {}
    oom = getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)
    queue, pool_end, eval_due, run_pad = [], st["item"], False, 0
    while True:
        t0 = time.time()
        if not queue:
            st["item"] = pool_end
            if (time.time() >= t_end or stop
                    or (a.until_step and st["step"] >= a.until_step)):
                break
            if a.save_every and time.time() >= t_save and st["step"] > step0:
                save_state()                        # st["item"] is the next group's start
                log({"step": st["step"], "tokens": st["tokens"], "saved": "state"})
                t_save = time.time() + a.save_every * 60
            if a.group:
                queue, pool_end = pool_batches(items, st["item"], st["level"],
                                               a.batch_tokens, a.group)
            else:
                seqs, ntok, pool_end = [], 0, st["item"]
                while ntok < a.batch_tokens:
                    sq = items.get(pool_end, st["level"])
                    seqs.append(sq)
                    ntok += len(sq[0])
                    pool_end += 1
                queue = [(seqs, ntok)]
        lv = st["level"]
        seqs, ntok = queue.pop(0)
        for g in opt.param_groups:
            g["lr"] = lr_sched(st["step"] - step0, st["step"], a)
        while True:
            opt.zero_grad(set_to_none=True)
            if opt_b:
                opt_b.zero_grad(set_to_none=True)
            try:
                loss, aloss, padded = backward_batch(model, seqs, a.lm_w, a.q_w, device,
                                                     a.micro, a.att_w, att_run, bind, route)
                break
            except oom:
                if a.micro >= len(seqs):
                    raise
            opt.zero_grad(set_to_none=True)
            torch.cuda.empty_cache()
            a.micro *= 2
            log({"step": st["step"], "micro": a.micro, "reason": "out of memory"})
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        if not (torch.isfinite(loss) and torch.isfinite(gn)):
            # skip the batch rather than poison the weights and the moments
            log({"step": st["step"], "tokens": st["tokens"], "skipped": "non-finite",
                 "loss": float(loss)})
            continue
        opt.step()
        if opt_b:
            for g in opt_b.param_groups:
                g["lr"] = 10 * opt.param_groups[0]["lr"]
            opt_b.step()
        st["step"] += 1
        if a.decay_minutes and st["step"] - step0 == 50:
            t50 = time.time()
        if a.decay_minutes and st["step"] - step0 == 100:
            rate = 50 / (time.time() - t50)
            left = a.decay_minutes * 60 - (time.time() - t_start)
            a.decay_start, a.decay_steps = step0, st["step"] + int(rate * max(left, 0))
            log({"step": st["step"], "schedule": {"decay_start": a.decay_start,
                                                  "decay_steps": a.decay_steps,
                                                  "steps_per_s": round(rate, 2)}})
        st["tokens"] += ntok
        st["seconds"] += time.time() - t0
        run_loss += loss.item()
        run_ans += aloss.item()
        run_tok += ntok
        run_pad += padded
        n_run += 1
        if st["step"] % a.log_every == 0:
            dt = time.time() - t_log
            log({"step": st["step"], "tokens": st["tokens"], "level": lv,
                 "loss": round(run_loss / n_run, 4), "answer_loss": round(run_ans / n_run, 4),
                 "tok_per_s": round(run_tok / dt, 1), "padded": round(run_pad / run_tok, 2),
                 "lr": round(lr_sched(st["step"] - 1 - step0, st["step"] - 1, a), 6)}
                | ({"att_loss": round(att_run["loss"] / max(att_run["seqs"], 1), 4)}
                   if a.att_w else {})
                | ({"bind_loss": round(att_run["bind"] / max(att_run["bind_seqs"], 1), 4)}
                   | bind.report() if bind else {}))
            run_loss, run_ans, run_tok, n_run, t_log = 0.0, 0.0, 0, 0, time.time()
            att_run.clear()
            run_pad = 0
        eval_due |= (st["step"] % a.eval_steps == 0 if a.eval_steps else time.time() >= t_eval)
        if eval_due and not queue:
            st["item"] = pool_end
            eval_and_save()
            t_eval = time.time() + a.eval_every * 60
            eval_due = False
    eval_and_save(final=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
