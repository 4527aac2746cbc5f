#!/usr/bin/env python3
"""release.py — the release checkpoint of any train.py state (issue 11): a run's
state.pt or a copy of it taken at an evaluation (train.py writes the release only
when the evaluation beats the state's best), in the layout train.py writes
(train/ckpt.py: bf16, tokenizer files copied from --like), with train_state.json
(the state's counters, the run's last `start` arguments, the exact match the log
recorded at that step) and the logs up to that step as train_log.jsonl (--log, in
order: the runs the state descends from, each a `start` record and what followed).

    .venv-oracle/bin/python -m train.release train/run/L9/state.pt /tmp/rel \
        --log train/run/L8/log.jsonl --log train/run/L9/log.jsonl

Then `heldout.py OUT --record` measures it (all tasks) into train_state.json.
"""
import argparse
import json
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

from train import ckpt    # noqa: E402


def default_log(state):
    """The log.jsonl of the run a state belongs to: next to it (RUN/state.pt), or one
    folder up (a copy in RUN/snap/)."""
    here = os.path.dirname(os.path.abspath(state))
    for d in (here, os.path.dirname(here)):
        if os.path.exists(os.path.join(d, "log.jsonl")):
            return os.path.join(d, "log.jsonl")
    sys.exit("release.py: no log.jsonl next to %s or above it (use --log)" % state)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("state", help="a train.py state (RUN/state.pt or a copy)")
    ap.add_argument("out")
    ap.add_argument("--log", action="append",
                    help="log.jsonl of the runs, oldest first (default: the one next to the state, "
                         "or one folder up)")
    ap.add_argument("--like", default=os.path.join(ROOT, "models", "pic-qa"),
                    help="a release whose tokenizer files are the state's")
    a = ap.parse_args(argv)
    import torch
    from train import train
    s = torch.load(a.state, weights_only=False, map_location="cpu")
    st = s["st"]
    os.makedirs(a.out, exist_ok=True)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        if os.path.abspath(a.like) != os.path.abspath(a.out):
            shutil.copyfile(os.path.join(a.like, f), os.path.join(a.out, f))
    ckpt.use_preset(st.get("preset", ckpt.LEGACY_PRESET))
    ckpt.write_json_files(a.out)        # the config make_model reads
    model = train.make_model(ckpt.text_config_dict(a.out), 0)
    model.load_state_dict(s["model"])
    lines, args, acc, lvl = [], {}, {}, None
    for log in a.log or [default_log(a.state)]:
        with open(log) as f:
            for ln in f:
                r = json.loads(ln)
                if r.get("step", 0) > st["step"]:
                    break
                lines.append(ln)
                if "start" in r:
                    args, acc, lvl = r["start"], {}, r["start"].get("eval_level")
                elif r.get("step") == st["step"] and r.get("level") == lvl and "heldout" in r:
                    acc = r["heldout"]
    ckpt.write_release(model, a.out, st, acc, lvl, args, lines)
    print("release.py: step %d written to %s" % (st["step"], a.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
