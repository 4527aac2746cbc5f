#!/usr/bin/env python3
"""heldout.py — held-out accuracy of a release checkpoint (issue 11): exact match,
answer-token and digit accuracy per task at a level (train.evaluate: seeds [0, n),
never trained on), or per shape at a raw-token level (train.evaluate_raw).  Exact
match compares the greedy answer's decoded text with the item's answer
(tasks.answer_ok, the rule of bench/accuracy.py and the tests): an answer produced
by other token ids than the answer's own counts right ("tf_exact_match": the
teacher-forced count of the training log, which does not).

    .venv-oracle/bin/python -m train.heldout models/pic-qa --level -1 --n 100 --tasks single
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

from train import ckpt    # noqa: E402
from train import tasks   # noqa: E402


def load(ckpt_dir, threads):
    """(model fp32 in eval mode, tokenizer, id of <|im_end|>) of a release checkpoint."""
    import torch
    from train import fastgdn
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM
    fastgdn.patch()
    torch.set_num_threads(threads)
    tok = Tokenizer.from_file(os.path.join(ckpt_dir, "tokenizer.json"))
    eos = ckpt.specials(ckpt_dir)["<|im_end|>"]
    return AutoModelForCausalLM.from_pretrained(ckpt_dir, dtype=torch.float32).eval(), tok, eos


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("ckpt")
    ap.add_argument("--level", type=int, default=0)
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--first", type=int, default=0,
                    help="seeds [FIRST, FIRST + N) (held out: below tasks.HELDOUT_SEEDS; "
                         "the training log evaluates [0, --eval-n))")
    ap.add_argument("--tasks", default=None, help="tasks (default all; raw levels: their shapes)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--record", action="store_true",
                    help="write the exact match into CKPT/train_state.json (heldout, "
                         "heldout_level, heldout_n, heldout_digit_acc)")
    a = ap.parse_args(argv)
    from train import train
    model, tok, eos = load(a.ckpt, a.threads)
    rec = {"ckpt": a.ckpt, "level": a.level, "n": a.n}
    if a.first:
        rec["first"] = a.first
    assert a.first + a.n <= tasks.HELDOUT_SEEDS
    if a.level in tasks.RAW_LEVELS:
        sh = a.tasks.split(",") if a.tasks else tasks.RAW_LEVELS[a.level]
        em, tacc, loss = train.evaluate_raw(model, tasks.raw_vocab(tok), sh, a.n)
        rec.update(exact_match=em, digit_acc=tacc, answer_loss=loss)
    else:
        dacc = {}
        ts = a.tasks and a.tasks.split(",")
        tf = {}
        em, tacc, loss = train.evaluate(model, tok, eos, a.level, a.n, dacc=dacc, tasks_=ts,
                                        strings=True, tf=tf, first=a.first)
        rec.update(exact_match=em, tf_exact_match=tf, answer_token_acc=tacc, digit_acc=dacc,
                   answer_loss=loss)
    st = os.path.join(a.ckpt, "train_state.json")
    if os.path.exists(st):
        with open(st) as f:
            js = json.load(f)
        rec["step"] = js["state"]["step"]
        if a.record:
            js.update(heldout=rec["exact_match"], heldout_level=a.level, heldout_n=a.n,
                      heldout_digit_acc=rec["digit_acc"])
            with open(st, "w") as f:
                json.dump(js, f, indent=1, sort_keys=True)
                f.write("\n")
    print(json.dumps(rec))
    return 0


if __name__ == "__main__":
    sys.exit(main())
