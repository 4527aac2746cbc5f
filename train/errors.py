#!/usr/bin/env python3
"""errors.py — error analysis of a release checkpoint on held-out items (issue 11):
for every failure (teacher-forced argmax != the answer's ids; counted right, class
right_greedy, when greedy decoding gives the answer's text: tasks.answer_ok), where
it failed (context length, position of the fact in the context, answer token
position, value kind) and what it answered greedily: a value of another fact of the
context = wrong lookup (lookup_both / _attr / _entity / _other: what that fact shares
with the question); such a value cut or run on at the asked kind's length, or taken
up after the answer's own first characters = the same wrong lookup (class suffix
_cut); same length within 2 characters of the answer = slip; else other.  The
summary also breaks exact match down by the asked attribute and by the fact
template that planted the answer (tasks.FACT_TEMPLATES index), and counts the
wrong lookups that copied an attribute of the asked one's head word
(`copied_same_head`: "badge number" for "ticket number"), the failures that took
the answer's first token right and went on copying another value that begins the
same way (`continued_twin`), and a tool item's by where it asks (`by_asked`: with
the request, before the results, or after them).

    .venv-oracle/bin/python -m train.errors models/pic-qa --level 0 --n 100 --tasks single,distract,tool
    .venv-oracle/bin/python -m train.errors models/pic-qa --level 0 --first 1000 --n 400 --tasks single

Prints a JSON summary (one line per task) and, with --items FILE, every item's record.
"""
import argparse
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

from train import ckpt    # noqa: E402
from train import tasks   # noqa: E402


def lev(a, b):
    """Levenshtein distance of two strings."""
    d = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        p, d[0] = d[0], i
        for j, cb in enumerate(b, 1):
            p, d[j] = d[j], min(d[j] + 1, d[j - 1] + 1, p + (ca != cb))
    return d[-1]


def values_in(text):
    """Candidate answer values of a context: numbers and capitalised words / codes."""
    return set(re.findall(r"\b[A-Z]{2}-\d+\b|\b[A-Z]?\d+\b|\b[A-Z][a-z]+(?: [A-Z][a-z]+)?\b", text))


def fact_sentence(text, value):
    """The sentence (or JSON line / result) of `text` holding `value` last."""
    k = text.rfind(value)
    if k < 0:
        return ""
    s = max(text.rfind(". ", 0, k), text.rfind("\n", 0, k), text.rfind("{", 0, k)) + 1
    e = min([x for x in (text.find(". ", k), text.find("\n", k), text.find("}", k)) if x >= 0]
            or [len(text)])
    return text[s:e]


def lookup_kind(q, sent):
    """Which fact a wrong lookup copied, against question q: "both" (same attribute
    and entity), "attr" (same attribute, another entity), "entity" (same entity,
    another attribute) or "other"."""
    attr = asked_attr(q)
    same_a = attr is not None and attr in sent
    ents = re.findall(r"\b[A-Z][a-z]+\b", q)
    same_e = bool(ents) and ents[-1] in sent
    return ("both" if same_a and same_e else "attr" if same_a
            else "entity" if same_e else "other")


def copied_prefix(g, ans, vals):
    """The context value (not the answer) that greedy answer g copies from where it
    leaves the answer: g agrees with the answer up to its first differing character
    w, and with that value up to w and at least two characters beyond, or to the
    value's end (g cut or run on); the value sharing the longest prefix with g, or
    None."""
    w = next((i for i, (x, y) in enumerate(zip(g, ans)) if x != y), min(len(g), len(ans)))
    best, blen = None, 0
    for c in vals:
        if c == ans or len(c) <= w or c[:w] != ans[:w]:
            continue
        n = next((i for i, (x, y) in enumerate(zip(g, c)) if x != y), min(len(g), len(c)))
        if n >= min(w + 2, len(c), len(g)) and n > blen:
            best, blen = c, n
    return best


def asked_attr(q):
    """The tasks.ATTRS attribute a question asks (None: a tool / multihop question)."""
    a = [x for x, _ in tasks.ATTRS if x in q]
    return max(a, key=len) if a else None


def fact_template(prompt, attr, value):
    """The index in tasks.FACT_TEMPLATES of the sentence planting (attr, value), or -1."""
    for i, t in enumerate(tasks.FACT_TEMPLATES):
        pat = (re.escape(t).replace(r"\{a\}", re.escape(attr)).replace(r"\{v\}", re.escape(value))
               .replace(r"\{e\}", ".+?").replace(r"\{E\}", ".+?"))
        if re.search(pat, prompt):
            return i
    return -1


def kind(ans):
    if ans.isdigit():
        return "n%d" % len(ans)
    if re.fullmatch(r"[A-Z]{2}-\d+", ans):
        return "code"
    if re.fullmatch(r"[A-Z]\d+", ans):
        return "tracking"
    return "word"


def analyse(model, tok, eos, task, seed, level):
    import torch
    from train import train
    it = tasks.item(task, seed, level)
    ids, a0 = train.encode_item(tok, it, eos)
    with torch.no_grad():
        lg = model(input_ids=torch.tensor([ids])).logits[0]
    pred = lg[a0 - 1:len(ids) - 1].argmax(-1).tolist()
    gold = ids[a0:]
    prob = torch.softmax(lg[a0 - 1:len(ids) - 1].float(), -1)
    p_gold = [round(float(prob[i, g]), 3) for i, g in enumerate(gold)]
    wrong = [i for i, (p, g) in enumerate(zip(pred, gold)) if p != g]
    ans = it["answer"]
    prompt = tasks.prompt_text(it)
    q = question(it)
    # the fact: where the answer value occurs in the context (last occurrence), as a
    # distance in tokens from the end of the prompt, and which document holds it
    docs = it.get("docs") or []
    gdoc = [i for i, d in enumerate(docs) if re.search(r"\b%s\b" % re.escape(ans), d)]
    cpos = prompt.rfind(ans)
    dist = a0 - len(tok.encode(prompt[:cpos]).ids) if cpos >= 0 else -1
    attr = asked_attr(q)
    rec = {"task": task, "seed": seed, "ctx": a0, "answer": ans, "kind": kind(ans),
           "n_docs": len(docs), "doc": gdoc[0] if gdoc else -1, "dist": dist,
           "attr": attr or "-",
           "template": fact_template(prompt, attr, ans) if attr else -1,
           "asked": asked_where(it),
           "n_ans_tok": len(gold), "wrong_pos": wrong, "p_gold": p_gold, "ok": not wrong}
    if wrong:
        g = train.greedy_text(model, tok, ids[:a0], eos, len(gold) + 4).strip()
        rec["greedy"] = g
        ctx_vals = values_in(prompt) - {ans}
        if tasks.answer_ok(g, ans):
            cls = "right_greedy"     # the answer's text from other token ids: right
            rec["ok"] = True
        elif g in ctx_vals:
            sent = fact_sentence(prompt, g)
            cls = "lookup_" + lookup_kind(q, sent)
            rec["copied"] = g
            rec["copied_fact"] = sent
            rec["copied_attr"] = asked_attr(sent)
        elif (c := copied_prefix(g, ans, ctx_vals)) is not None:
            # a copy of another value, cut or run on at the asked kind's length
            # ("966305" answered as "96630"; "76380" as "7638" after the answer's own
            # first digit "7"): the same wrong lookup
            sent = fact_sentence(prompt, c)
            cls = "lookup_" + lookup_kind(q, sent) + "_cut"
            rec["copied"] = c
            rec["copied_fact"] = sent
            rec["copied_attr"] = asked_attr(sent)
        elif len(g) == len(ans) and lev(g, ans) <= 2:
            cls = "slip"
        elif lev(g, ans) <= 2:
            cls = "near"
        else:
            cls = "other"
        rec["class"] = cls
        rec["lev"] = lev(g, ans)
        rec["question"] = q
    return rec


def asked_where(it):
    """Where a tool item asks its question: "first" (with the request, before the
    tool results: the agent loop's usual shape), "last" (after them); "-" otherwise."""
    if not it.get("tools"):
        return "-"
    return "last" if it["messages"][-1]["role"] == "user" else "first"


def question(it):
    """The question an item asks: after "Question: " in the last user message, or a
    tool item's last user message (asked after the results), or the last sentence of
    its request (asked with it)."""
    i = max(k for k, m in enumerate(it["messages"]) if m["role"] == "user")
    q = it["messages"][i]["content"]
    if "Question: " in q:
        return q[q.rfind("Question: ") + 10:]
    if it.get("tools") and i < len(it["messages"]) - 1:
        return q.rsplit(". ", 1)[-1]
    return q


def summary(recs):
    n = len(recs)
    fail = [r for r in recs if r["wrong_pos"]]
    out = {"n": n, "em": round(sum(r["ok"] for r in recs) / n, 3),
           "failures": sum(not r["ok"] for r in recs)}
    cls = {}
    for r in fail:
        cls[r["class"]] = cls.get(r["class"], 0) + 1
    out["class"] = cls
    out["n_wrong_tokens"] = {}
    for r in fail:
        k = str(min(len(r["wrong_pos"]), 3))
        out["n_wrong_tokens"][k] = out["n_wrong_tokens"].get(k, 0) + 1
    # exact match by context length (terciles), fact distance (terciles), doc index,
    # value kind
    def by(key, buckets=None):
        res = {}
        vals = sorted(r[key] for r in recs)
        for r in recs:
            v = r[key]
            if buckets:
                b = sum(v > vals[int(len(vals) * q) - 1] for q in buckets)
                lo = [vals[0]] + [vals[int(len(vals) * q)] for q in buckets]
                hi = [vals[int(len(vals) * q) - 1] for q in buckets] + [vals[-1]]
                k = "%d-%d" % (lo[b], hi[b])
            else:
                k = str(v)
            s = res.setdefault(k, [0, 0])
            s[0] += r["ok"]
            s[1] += 1
        return {k: "%d/%d" % tuple(v) for k, v in sorted(res.items())}
    out["by_ctx_tokens"] = by("ctx", (1 / 3, 2 / 3))
    out["by_fact_dist"] = by("dist", (1 / 3, 2 / 3))
    out["by_doc_index"] = by("doc")
    out["by_kind"] = by("kind")
    # which attribute was asked, which fact template planted it (tasks.FACT_TEMPLATES
    # index), and how many wrong lookups copied an attribute of the asked one's head
    # word ("badge number" for "ticket number")
    out["by_attr"] = by("attr")
    out["by_template"] = by("template")
    out["by_asked"] = by("asked")
    cp = [r for r in fail if r.get("copied_attr") and r["attr"] != "-"]
    out["copied_same_head"] = "%d/%d" % (
        sum(r["copied_attr"].split()[-1] == r["attr"].split()[-1] for r in cp), len(cp))
    # answer token position: first miss, and teacher-forced accuracy per position
    first, acc = {}, {}
    for r in recs:
        if r["wrong_pos"]:
            k = str(r["wrong_pos"][0])
            first[k] = first.get(k, 0) + 1
        for i in range(r["n_ans_tok"]):
            s = acc.setdefault(str(i), [0, 0])
            s[0] += i not in r["wrong_pos"]
            s[1] += 1
    out["first_wrong_token"] = dict(sorted(first.items(), key=lambda kv: int(kv[0])))
    # of the failures, those that took the answer's first token right and then went
    # on copying another value that begins the same way (tasks' `twin` trains them)
    out["continued_twin"] = "%d/%d" % (
        sum(r["wrong_pos"][0] > 0 and r.get("copied", "")[:1] == r["answer"][:1]
            for r in fail if not r["ok"]), out["failures"])
    out["tf_acc_by_token"] = {k: round(v[0] / v[1], 3) for k, v in
                              sorted(acc.items(), key=lambda kv: int(kv[0]))}
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("ckpt")
    ap.add_argument("--level", type=int, default=0)
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--first", type=int, default=0, help="first seed (held-out: < 100000)")
    ap.add_argument("--tasks", default="single,distract,tool")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--items", help="write every item's record here (jsonl)")
    a = ap.parse_args(argv)
    from train import heldout
    model, tok, eos = heldout.load(a.ckpt, a.threads)
    fo = open(a.items, "w") if a.items else None
    for task in a.tasks.split(","):
        recs = [analyse(model, tok, eos, task, s, a.level) for s in range(a.first, a.first + a.n)]
        if fo:
            for r in recs:
                fo.write(json.dumps(r) + "\n")
        print(json.dumps({"task": task, "ckpt": a.ckpt, "level": a.level, **summary(recs)}))
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
