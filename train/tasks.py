#!/usr/bin/env python3
"""tasks.py — seeded, deterministic retrieval and agent tasks whose answer must be
read from the context (issue 11), rendered with the Qwen3.5 chat template.

Prose comes from the docstrings of the Python standard library (present on every
machine with python3); facts ("the registration number of Vornak is 48213") are
planted in it.  Task kinds:

  single    single-hop RAG: k documents, one holds the asked fact (the others hold
            facts about other entities and attributes)
  distract  distractors: the same entity in two documents with different
            attributes, and the same attribute for another entity; the question
            names both
  tool      agent tool loop: tool calls with JSON and prose results; the final
            question needs a value from an earlier (not the last) result
  multihop  document A says who manages X, document B holds an attribute of that
            manager; the question asks for the manager's attribute
  shift     a single / distract / tool item re-ordered, behind another per-agent
            header, with another subset of tool schemas (same answer)

Every item is a dict: {"task", "seed", "messages", "tools" (or None), "answer",
"docs" (the document strings, for the PIC benchmark's markers), "qa" (the other
questions its context answers, [(question, answer)]: training appends some as
follow-up turns; recorded without touching the item's random stream)}.  `item(task, seed)`
is a pure function of its arguments (and of the prose corpus, whose digest
`corpus_digest()` is recorded with every checkpoint).

Seeds: training draws seeds from TRAIN_SEEDS_FROM upwards; held-out evaluation uses
seeds below HELDOUT_SEEDS (never used in training).

Usage:  tasks.py [--task T] [--seed S] [--n N] [--level L] [--json]   print items
"""
import argparse
import hashlib
import importlib
import inspect
import json
import os
import random
import re
import sys
import unicodedata
import warnings

TASKS = ["single", "distract", "tool", "multihop", "shift"]      # the benchmark's
# training-only tasks (train.py --mix): `hard` is single-hop whose other facts'
# attributes share the asked one's head word or value kind (_hard_attrs); `rounds`
# agent conversations that ask every question before its results (_rounds_item);
# `twin` is hard whose other values begin as the answer does (_twin_value)
TRAIN_TASKS = TASKS + ["hard", "rounds", "twin"]
HELDOUT_SEEDS = 100000          # seeds [0, HELDOUT_SEEDS) are held out
TRAIN_SEEDS_FROM = 1000000

# --------------------------------------------------------------------- prose

_MODULES = (
    "abc argparse array ast asyncio base64 bisect calendar cmd codecs collections colorsys "
    "configparser contextlib copy csv dataclasses datetime decimal difflib email enum "
    "fileinput fnmatch fractions ftplib functools getopt gettext glob gzip hashlib heapq "
    "hmac html http.client http.server imaplib inspect io ipaddress itertools json locale "
    "logging lzma mailbox mimetypes numbers operator optparse os pathlib pickle pkgutil "
    "platform plistlib poplib pprint queue random re sched secrets selectors shelve shlex "
    "shutil signal smtplib socket socketserver sqlite3 statistics string struct subprocess "
    "tarfile tempfile textwrap threading timeit tokenize trace traceback types typing "
    "unittest urllib.parse urllib.request uuid warnings wave weakref xml.dom.minidom "
    "zipfile zlib").split()

_PROSE = None


def prose():
    """Sorted list of prose paragraphs (120-700 ASCII chars, one line each) from
    the standard library's docstrings; or the lines of the file $PIC_PROSE (a dump
    of this list made by `python3 -m train.tasks --dump-prose FILE`, so another
    Python version makes the same items)."""
    global _PROSE
    if _PROSE is None and os.environ.get("PIC_PROSE"):
        with open(os.environ["PIC_PROSE"]) as f:
            _PROSE = [line.rstrip("\n") for line in f if line.strip()]
    if _PROSE is None:
        paras = set()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for name in _MODULES:
                try:
                    mod = importlib.import_module(name)
                except Exception:
                    continue
                objs = [mod] + [getattr(mod, n, None) for n in sorted(dir(mod))
                                if not n.startswith("_")]
                for o in objs:
                    if o is not mod and getattr(o, "__module__", None) != mod.__name__:
                        continue
                    d = inspect.getdoc(o)
                    if not d:
                        continue
                    for p in re.split(r"\n\s*\n", d):
                        p = " ".join(p.split())
                        if (120 <= len(p) <= 700 and p.isascii() and ">>>" not in p
                                and not p.startswith(("-", "*", ":"))):
                            paras.add(p)
        _PROSE = sorted(paras)
    return _PROSE


def corpus_digest():
    """sha256 prefix of the prose corpus (differs across Python versions)."""
    return hashlib.sha256("\n".join(prose()).encode()).hexdigest()[:16]


# --------------------------------------------------------------------- vocabulary

_SYL = ("ka ri to na me shi lo vu pe ga zo di fu ne ra mo te su wa ba "
        "dor vel mar tis len hol kes bri sa nor quin fal tor").split()

ATTRS = [  # (attribute phrase, value kind)
    ("registration number", "n5"), ("port number", "n4"), ("access code", "n4"),
    ("serial number", "n6"), ("room number", "n3"), ("account number", "n6"),
    ("badge number", "n5"), ("ticket number", "n5"), ("home city", "city"),
    ("favourite colour", "colour"), ("project code", "code"), ("shelf label", "code"),
]
COLOURS = ("red green blue amber violet silver golden crimson teal ivory olive "
           "maroon indigo scarlet").split()
KINDS = ["", "", "the device ", "the ship ", "project ", "agent ", "the server "]

FACT_TEMPLATES = [
    "The {a} of {e} is {v}.",
    "{E}'s {a} is {v}.",
    "For {e}, the {a} is {v}.",
    "{E} has the {a} {v}.",
    "Note that the {a} of {e} is {v}.",
]
QUESTION_TEMPLATES = [
    "What is the {a} of {e}?",
    "Which {a} does {e} have?",
    "Give the {a} of {e}.",
    "Tell me the {a} of {e}.",
]
HEADERS = [
    "You are a helpful assistant.",
    "You are {n}, a research assistant of the {t} team. Answer from the documents.",
    "You are {n}, the support agent for {t}. Be brief.",
    "Agent {n} ({t} division). Use only the given context.",
    "You are the retrieval agent of {t}. Reply with the value only.",
    "",
]


def _name(r, lo=2, hi=3):
    return "".join(r.choice(_SYL) for _ in range(r.randint(lo, hi))).capitalize()


def _value(r, kind):
    if kind[0] == "n":
        k = int(kind[1:])
        return str(r.randint(10 ** (k - 1), 10 ** k - 1))
    if kind == "city":
        return _name(r, 2, 3) + r.choice(["", "", " Harbour", " Falls", "ton"])
    if kind == "colour":
        return r.choice(COLOURS)
    return "%s-%d" % ("".join(r.choice("ABCDEFGHKMNPRSTVXZ") for _ in range(2)),
                      r.randint(10, 999))


def _entities(r, n):
    """n distinct entity phrases."""
    out = []
    while len(out) < n:
        e = r.choice(KINDS) + _name(r)
        if e not in out and not any(e.split()[-1] == o.split()[-1] for o in out):
            out.append(e)
    return out


def _fact(r, e, a, v):
    t = r.choice(FACT_TEMPLATES)
    E = e[0].upper() + e[1:]
    return t.format(a=a, e=e, E=E, v=v)


def _question(r, e, a):
    return r.choice(QUESTION_TEMPLATES).format(a=a, e=e)


# --------------------------------------------------------------------- documents

# curriculum level -> (documents, paragraphs per document); levels -2 and -1 are
# training's warm-ups, not benchmark levels: -1 has documents of one short sentence
# plus the facts; -2 is dense associative recall (_recall_item: `single` and
# `distract` are a list of 2-8 facts and nothing else; the other tasks are their
# level -1 items); -6..-3 grow -2 from where a small model learns it (RECALL_SHAPES);
# -7 is _list_item (every answer token a target)
LEVELS = {
    -7: ((0, 0), (0, 0)),
    -6: ((0, 0), (0, 0)),
    -5: ((0, 0), (0, 0)),
    -4: ((0, 0), (0, 0)),
    -3: ((0, 0), (0, 0)),
    -2: ((0, 0), (0, 0)),
    -1: ((2, 3), (0, 0)),
    0: ((2, 3), (1, 1)),
    1: ((2, 4), (1, 2)),
    2: ((3, 5), (1, 3)),
    3: ((3, 8), (1, 4)),
    4: ((4, 10), (2, 6)),     # contexts up to ~4k tokens
}


def _doc(r, paras, facts, title):
    """A document: title line, paragraphs with the fact sentences planted at
    random paragraph ends."""
    if paras == 0:
        s = r.choice(prose())
        body = [s[:s.find(". ") + 1] if 0 < s.find(". ") < 100 else s[:s.rfind(" ", 0, 80)] + "."]
    else:
        body = [r.choice(prose()) for _ in range(paras)]
    for f in facts:
        i = r.randrange(len(body))
        body[i] = body[i] + " " + f if r.random() < 0.5 else f + " " + body[i]
    return "%s\n%s" % (title, "\n".join(body))


def _title(r):
    return r.choice(["Notes on", "Reference:", "About", "Manual:", "Section on",
                     "Report:"]) + " " + r.choice(_MODULES)


def _docs_message(r, docs, question):
    parts = ["[%d] %s" % (i + 1, d) for i, d in enumerate(docs)]
    intro = r.choice(["Documents:", "Context:", "Read the documents below.",
                      "Here are the search results."])
    return intro + "\n\n" + "\n\n".join(parts) + "\n\nQuestion: " + question


def _header(r):
    h = r.choice(HEADERS)
    return h.format(n=_name(r), t=_name(r))


def _ask(known, skip):
    """Follow-up questions [(question, answer)] of planted facts known =
    [(entity, attribute, value)] other than `skip`; phrasing from their own
    random stream (the item's stream is untouched)."""
    out = []
    for e, a, v in known:
        if (e, a) != skip:
            out.append((_question(random.Random("qa|%s|%s|%s" % (e, a, v)), e, a), v))
    return out


def _hard_attrs(r):
    """Four attributes for a hard single-hop item: the asked one first, then
    those sharing its head word ("ticket number" / "badge number"), then those
    of its value kind's family (digits, codes), then any: the confusions the
    trained model makes (train/README "Session 18")."""
    t = r.choice(ATTRS)
    fam = lambda a: "n" if a[1][0] == "n" else a[1]   # noqa: E731
    same = [a for a in ATTRS if a != t and a[0].split()[-1] == t[0].split()[-1]]
    kin = [a for a in ATTRS if a != t and a not in same and fam(a) == fam(t)]
    rest = [a for a in ATTRS if a != t and a not in same and a not in kin]
    r.shuffle(same)
    r.shuffle(kin)
    r.shuffle(rest)
    return [t] + (same + kin + rest)[:3]


def _twin_value(r, kind, answer):
    """A value of `kind` that begins with the answer's first one or two characters
    (three for a code: "VF-") where the kinds allow, else any value of `kind`: the
    second answer token must then be read from the right fact, not continued from
    whichever value shares the first (train/README "Session 25")."""
    if kind[0] == "n" and answer.isdigit():
        p = min(r.randint(1, 2), int(kind[1:]) - 1)
        if p > 0:
            v = answer[:p] + "".join(r.choice("0123456789")
                                     for _ in range(int(kind[1:]) - p))
            if v != answer:
                return v
    if kind == "code" and "-" in answer:
        p = r.randint(1, 3)
        v = answer[:p] + _value(r, kind)[p:]
        if v != answer:
            return v
    return _value(r, kind)


def _rag(r, level, n_extra_same=0, hard=False, twin=False):
    """Shared body of single / distract / hard / twin: returns (docs, question,
    answer, qa).  hard: the attributes from _hard_attrs and one to two more facts per
    document; twin: hard, and the other values begin as the answer (_twin_value)."""
    (dlo, dhi), (plo, phi) = LEVELS[level]
    k = r.randint(dlo, dhi)
    ents = _entities(r, 2 * k + 2)
    attrs = _hard_attrs(r) if hard else r.sample(ATTRS, 4)
    target_e, target_a = ents[0], attrs[0]
    answer = _value(r, target_a[1])
    facts = [[] for _ in range(k)]
    gold = r.randrange(k)
    facts[gold].append(_fact(r, target_e, target_a[0], answer))
    known = []
    if n_extra_same:
        # distractors: same entity, another attribute (another document when k > 1);
        # same attribute, another entity
        other = (gold + 1 + r.randrange(k - 1)) % k if k > 1 else gold
        a2 = attrs[1]
        v2 = _value(r, a2[1])
        facts[other].append(_fact(r, target_e, a2[0], v2))
        i2, v3 = r.randrange(k), _value(r, target_a[1])
        facts[i2].append(_fact(r, ents[1], target_a[0], v3))
        known += [(target_e, a2[0], v2), (ents[1], target_a[0], v3)]
    used = set()
    for i in range(k):
        n_fill = r.randint(0, 1) + (1 if i != gold else 0) + (r.randint(1, 2) if hard else 0)
        for _ in range(n_fill):
            e = r.choice(ents[2:])
            a = r.choice(attrs[1:])
            if (e, a) in used:          # one value per (entity, attribute)
                continue
            used.add((e, a))
            v = _twin_value(r, a[1], answer) if twin else _value(r, a[1])
            facts[i].append(_fact(r, e, a[0], v))
            known.append((e, a[0], v))
    docs = [_doc(r, r.randint(plo, phi), facts[i], _title(r)) for i in range(k)]
    return docs, _question(r, target_e, target_a[0]), answer, _ask(known, None)


def _rag_item(r, level, distract, hard=False, twin=False):
    docs, q, ans, qa = _rag(r, level, n_extra_same=1 if distract else 0, hard=hard or twin,
                            twin=twin)
    msgs = []
    h = _header(r)
    if h:
        msgs.append({"role": "system", "content": h})
    msgs.append({"role": "user", "content": _docs_message(r, docs, q)})
    return {"messages": msgs, "tools": None, "answer": ans, "docs": docs, "qa": qa}


NUM_ATTRS = [a for a in ATTRS if a[1][0] == "n"]

# recall levels below -2: (fewest, most facts), (fewest, most digits of a value);
# level -2 is (2, 8) facts with the attribute's own digits (3-6)
RECALL_SHAPES = {
    -6: ((2, 4), (1, 1)),
    -5: ((2, 6), (1, 2)),
    -4: ((3, 8), (2, 3)),
    -3: ((4, 8), (3, 5)),
}


def _recall_item(r, distract, shape=None):
    """Level -2: dense associative recall (the copy circuit's warm-up).  2-8
    facts (entity -> number), one question; every other fact is a follow-up
    ("qa"), so almost every token of a training sequence is a fact or an answer.
    single: "Registration number of Vornak: 48213" lines (the question repeats
    the key; the answer is what follows it: plain induction); distract: fact
    sentences of the other levels, two attributes shared by the entities, so a
    question needs entity and attribute together.  shape: RECALL_SHAPES entry
    (levels -6..-3: fewer facts, shorter values)."""
    (nlo, nhi), digits = shape or ((2, 8), None)
    n = r.randint(nlo, nhi)
    ents = _entities(r, n)
    attrs = r.sample(NUM_ATTRS, 2 if distract else n)
    pairs = []
    for i, e in enumerate(ents):
        if distract:
            for a in attrs:
                if len(pairs) < 8 and (r.random() < 0.6 or a is attrs[i % 2]):
                    pairs.append((e, a))
        else:
            pairs.append((e, attrs[i] if r.random() < 0.5 else r.choice(attrs)))
    if digits:
        known = [(e, a[0], _value(r, "n%d" % r.randint(*digits))) for e, a in pairs]
    else:
        known = [(e, a[0], _value(r, a[1])) for e, a in pairs]
    r.shuffle(known)
    if distract:
        facts = [_fact(r, e, a, v) for e, a, v in known]
    else:       # "key: value" lines: the question repeats the key, the value follows it
        facts = ["%s%s of %s: %s" % (a[0].upper(), a[1:], e, v) for e, a, v in known]
    e, a, v = known[r.randrange(len(known))]
    q = _question(r, e, a)
    msgs = []
    h = _header(r)
    if h:
        msgs.append({"role": "system", "content": h})
    intro = r.choice(["Facts:", "Context:", "Remember these.", "Records:"])
    msgs.append({"role": "user", "content": intro + "\n" + "\n".join(facts) +
                 "\n\nQuestion: " + q})
    return {"messages": msgs, "tools": None, "answer": v, "docs": facts,
            "qa": _ask(known, (e, a))}


def _list_item(r):
    """Level -7: multi-query associative recall in chat form.  4-8 "- Name: d" facts
    (1-digit values), a question naming every entity in a shuffled order, and an
    answer listing "Name: d" in that order: every answer token is a target (the
    names are copies from the question, the digits a lookup in the facts), where a
    level -6 sequence has ~3 targets in ~120 tokens).  The "- " keeps a space
    before every name, so a name is the same tokens in facts, question and answer."""
    n = r.randint(4, 8)
    names = []
    while len(names) < n:
        e = _name(r)
        if e not in names:
            names.append(e)
    vals = [str(r.randint(0, 9)) for _ in names]
    facts = ["- %s: %s" % (e, v) for e, v in zip(names, vals)]
    order = list(range(n))
    r.shuffle(order)
    q = "List the values of " + ", ".join(names[i] for i in order) + "."
    msgs = [{"role": "user", "content": "Facts:\n" + "\n".join(facts) + "\n\nQuestion: " + q}]
    return {"messages": msgs, "tools": None, "docs": facts, "qa": [],
            "answer": "\n".join(facts[i] for i in order)}


def _multihop_item(r, level):
    (dlo, dhi), (plo, phi) = LEVELS[level]
    k = max(2, r.randint(dlo, dhi))
    ents = _entities(r, 2 * k + 4)
    x, boss = ents[0], ents[1]
    a = r.choice(ATTRS)
    answer = _value(r, a[1])
    rel = r.choice([("is managed by", "the manager of"), ("reports to", "the person {x} reports to"),
                    ("is stored with", "the item stored with")])
    link = "%s %s %s." % (x[0].upper() + x[1:], rel[0], boss)
    da, db = r.sample(range(k), 2)
    facts = [[] for _ in range(k)]
    facts[da].append(link)
    facts[db].append(_fact(r, boss, a[0], answer))
    # distractors: the same attribute for x itself and for another entity
    ix, vx = r.randrange(k), _value(r, a[1])
    facts[ix].append(_fact(r, x, a[0], vx))
    i2, v2 = r.randrange(k), _value(r, a[1])
    facts[i2].append(_fact(r, ents[2], a[0], v2))
    other = ents[3]
    facts[r.randrange(k)].append("%s %s %s." % (ents[4][0].upper() + ents[4][1:], rel[0], other))
    docs = [_doc(r, r.randint(plo, phi), facts[i], _title(r)) for i in range(k)]
    target = rel[1].format(x=x) if "{x}" in rel[1] else rel[1] + " " + x
    q = "What is the %s of %s?" % (a[0], target)
    # follow-ups: the first hop, and each planted value directly
    hop = {"is managed by": "Who manages %s?", "reports to": "Who does %s report to?",
           "is stored with": "What is %s stored with?"}[rel[0]]
    qa = [(hop % x, boss), (hop % ents[4], other)] + _ask(
        [(boss, a[0], answer), (x, a[0], vx), (ents[2], a[0], v2)], None)
    msgs = []
    h = _header(r)
    if h:
        msgs.append({"role": "system", "content": h})
    msgs.append({"role": "user", "content": _docs_message(r, docs, q)})
    return {"messages": msgs, "tools": None, "answer": answer, "docs": docs, "qa": qa}


# --------------------------------------------------------------------- tools


def _schema(name, desc, params):
    return {"type": "function", "function": {
        "name": name, "description": desc,
        "parameters": {"type": "object",
                       "properties": {p: {"type": t, "description": d} for p, t, d in params},
                       "required": [p for p, _, _ in params]}}}


TOOLS = {
    "get_order": _schema("get_order", "Look up an order by its id.",
                         [("order_id", "integer", "The order id.")]),
    "get_user": _schema("get_user", "Fetch the profile of a user.",
                        [("name", "string", "The user's name.")]),
    "get_weather": _schema("get_weather", "Current weather report for a city.",
                           [("city", "string", "City name.")]),
    "search_docs": _schema("search_docs", "Search the internal documentation.",
                           [("query", "string", "Search terms.")]),
    "read_file": _schema("read_file", "Read a text file from the workspace.",
                         [("path", "string", "File path.")]),
    "get_shipment": _schema("get_shipment", "Track a shipment.",
                            [("tracking_id", "string", "Tracking id.")]),
}


def _tool_call(r, name):
    """(arguments, result text, [(question, answer)]) for one call of tool `name`."""
    if name == "get_order":
        oid = r.randint(1000, 99999)
        total, items, wh = r.randint(10, 9999), r.randint(1, 20), _name(r)
        res = json.dumps({"order_id": oid, "status": r.choice(["open", "shipped", "held"]),
                          "total": total, "items": items, "warehouse": wh})
        qa = [("What was the total of order %d?" % oid, str(total)),
              ("How many items are in order %d?" % oid, str(items)),
              ("Which warehouse holds order %d?" % oid, wh)]
        return {"order_id": oid}, res, qa
    if name == "get_user":
        n = _name(r)
        uid, room, team = r.randint(10000, 99999), r.randint(100, 999), _name(r)
        res = json.dumps({"name": n, "user_id": uid, "team": team, "room": room})
        qa = [("What is the user id of %s?" % n, str(uid)),
              ("Which room is %s in?" % n, str(room)),
              ("Which team is %s on?" % n, team)]
        return {"name": n}, res, qa
    if name == "get_weather":
        c = _name(r)
        t, w = r.randint(-9, 39), r.randint(100, 9999)
        res = ("In %s it is %d degrees with %s; the station code is %d." %
               (c, t, r.choice(["light rain", "clear skies", "fog", "snow", "wind"]), w))
        qa = [("What was the station code for %s?" % c, str(w)),
              ("How many degrees was it in %s?" % c, str(t))]
        return {"city": c}, res, qa
    if name == "get_shipment":
        tid = "%s%d" % (r.choice("ABCDEFGHKMNPRSTVXZ"), r.randint(1000, 9999))
        dep, days = _name(r), r.randint(2, 30)
        res = json.dumps({"tracking_id": tid, "depot": dep, "eta_days": days})
        qa = [("Which depot is shipment %s at?" % tid, dep),
              ("In how many days does shipment %s arrive?" % tid, str(days))]
        return {"tracking_id": tid}, res, qa
    # search_docs / read_file: prose with a planted fact
    e = _entities(r, 1)[0]
    a = r.choice(ATTRS)
    v = _value(r, a[1])
    text = _doc(r, r.randint(1, 2), [_fact(r, e, a[0], v)], _title(r))
    arg = ({"query": e.split()[-1] + " " + a[0]} if name == "search_docs"
           else {"path": "notes/%s.txt" % e.split()[-1].lower()})
    return arg, text, [(_question(r, e, a[0]), v)]


def _request_text(r, calls):
    bits = []
    for name, args in calls:
        v = list(args.values())[0]
        bits.append({"get_order": "check order %s", "get_user": "look up %s",
                     "get_weather": "get the weather in %s", "search_docs": "search for '%s'",
                     "read_file": "read %s", "get_shipment": "track shipment %s"}[name] % v)
    return "Please " + ", then ".join(bits) + "."


def _call_messages(calls):
    """The assistant tool-call turn and the tool result of each (name, args, result)."""
    msgs = []
    for name, args, res in calls:
        msgs.append({"role": "assistant", "content": "",
                     "tool_calls": [{"type": "function",
                                     "function": {"name": name, "arguments": args}}]})
        msgs.append({"role": "tool", "content": res})
    return msgs


def _tool_item(r, level, tool_names=None):
    names = list(TOOLS)
    n_calls = min(2 + level // 2 + r.randint(0, 1), 5)
    seq = [r.choice(names) for _ in range(n_calls)]
    if tool_names is None:
        pool = sorted(set(seq) | set(r.sample(names, r.randint(0, 2))), key=names.index)
    else:
        pool = tool_names
    calls, results, qas = [], [], []
    for name in seq:
        args, res, qa = _tool_call(r, name)
        calls.append((name, args))
        results.append(res)
        qas.append(qa)
    # the question is about an earlier result (not the last) when there are >= 2
    pick = r.randrange(len(seq) - 1) if len(seq) > 1 else 0
    q, ans = r.choice(qas[pick])
    msgs = []
    h = _header(r)
    if h:
        msgs.append({"role": "system", "content": h})
    ask_last = r.random() < 0.5
    req = _request_text(r, calls)
    if not ask_last:
        req += " " + q
    msgs.append({"role": "user", "content": req})
    msgs += _call_messages([(n, a, res) for (n, a), res in zip(calls, results)])
    if ask_last:
        msgs.append({"role": "user", "content": q})
    qa = [x for qs in qas for x in qs if x != (q, ans)]
    return {"messages": msgs, "tools": [TOOLS[n] for n in pool], "answer": ans,
            "docs": results, "qa": qa}


def _rounds_item(r, level):
    """Training only: an agent conversation of 2-3 rounds, each a request (two tool
    calls in the first, 1-2 in the others from level 1) that asks its question with
    it, the calls and their results, and the answer; a question asks about a result
    of its round or an earlier one (not the round's last).  The benchmark's tool items ask with the request half the time,
    but follow-up turns (train.py --follow) always ask after the results, so one
    answer in ~17 was of that shape (exact match .34 against .75 asked after them,
    step 20,238, session 19); here every round's answer is.  The earlier rounds'
    answers are assistant messages ("turn_answers", the loss spans of train.py);
    the last round's is the item's answer."""
    names = list(TOOLS)
    n_rounds = 2 + r.randint(0, 1)
    msgs, qas, used, turn_answers = [], [], [], []
    h = _header(r)
    if h:
        msgs.append({"role": "system", "content": h})
    for k in range(n_rounds):
        calls = []
        for _ in range(2 if k == 0 else 1 + r.randint(0, 1 if level > 0 else 0)):
            name = r.choice(names)
            args, res, qa = _tool_call(r, name)
            calls.append((name, args, res))
            used.append(name)
            qas.append(qa)
        # any result so far but the last that has a question left (the first
        # round has two calls)
        pick = r.choice([i for i in range(len(qas) - 1) if qas[i]] or [len(qas) - 1])
        q, ans = r.choice(qas[pick])
        qas[pick] = [x for x in qas[pick] if x != (q, ans)]
        msgs.append({"role": "user",
                     "content": _request_text(r, [(n, a) for n, a, _ in calls]) + " " + q})
        msgs += _call_messages(calls)
        if k < n_rounds - 1:
            msgs.append({"role": "assistant", "content": ans})
            turn_answers.append(ans)
    pool = sorted(set(used) | set(r.sample(names, r.randint(0, 2))), key=names.index)
    docs = [m["content"] for m in msgs if m["role"] == "tool"]
    return {"messages": msgs, "tools": [TOOLS[n] for n in pool], "answer": ans,
            "docs": docs, "qa": [x for qs in qas for x in qs], "turn_answers": turn_answers}


def turn_answer_spans(it, text):
    """Character spans [start, end) in text (prompt_text(it)) of the item's earlier
    answers, each with its closing <|im_end|> (rounds items; [] for the others)."""
    spans, pos = [], 0
    for ans in it.get("turn_answers") or []:
        head = "<|im_start|>assistant\n"
        i = text.index(head + ans + "<|im_end|>", pos) + len(head)
        spans.append((i, i + len(ans) + len("<|im_end|>")))
        pos = spans[-1][1]
    return spans


def _shift_item(r, level):
    """A base item re-ordered / re-headed / with another tool subset."""
    base = r.choice(["single", "distract", "tool"])
    bseed = r.randrange(1 << 62)
    it = _make(base, bseed, level)
    r2 = random.Random(bseed ^ 0x5DEECE66D)
    msgs = [dict(m) for m in it["messages"]]
    h = _header(r2)
    if msgs[0]["role"] == "system":
        msgs = msgs[1:]
    if h:
        msgs.insert(0, {"role": "system", "content": h})
    if base == "tool":
        used = sorted({m["tool_calls"][0]["function"]["name"] for m in msgs
                       if m.get("tool_calls")}, key=list(TOOLS).index)
        extra = [n for n in TOOLS if n not in used]
        pool = sorted(set(used) | set(r2.sample(extra, r2.randint(0, len(extra)))),
                      key=list(TOOLS).index)
        return {"messages": msgs, "tools": [TOOLS[n] for n in pool],
                "answer": it["answer"], "docs": it["docs"], "base": base, "qa": it["qa"]}
    docs = list(it["docs"])
    r2.shuffle(docs)
    u = msgs[-1]["content"]
    q = u[u.rindex("\n\nQuestion: ") + len("\n\nQuestion: "):]
    msgs[-1] = {"role": "user", "content": _docs_message(r2, docs, q)}
    return {"messages": msgs, "tools": None, "answer": it["answer"], "docs": docs,
            "base": base, "qa": it["qa"]}


def _make(task, seed, level):
    r = random.Random("%s/%d/%d" % (task, seed, level))
    if level == -7 and task == "single":
        return _list_item(r)
    if level <= -2:
        if task in ("single", "distract", "hard", "twin"):
            return _recall_item(r, task == "distract", RECALL_SHAPES.get(level))
        level = -1
    if task == "single":
        return _rag_item(r, level, False)
    if task == "distract":
        return _rag_item(r, level, True)
    if task == "hard":
        return _rag_item(r, level, False, hard=True)
    if task == "twin":
        return _rag_item(r, level, False, twin=True)
    if task == "tool":
        return _tool_item(r, level)
    if task == "rounds":
        return _rounds_item(r, level)
    if task == "multihop":
        return _multihop_item(r, level)
    if task == "shift":
        return _shift_item(r, level)
    raise ValueError("unknown task %r" % task)


def item(task, seed, level=2):
    """The item of `task` for `seed` at curriculum `level` (deterministic)."""
    it = _make(task, seed, level)
    it["task"], it["seed"], it["level"] = task, seed, level
    return it


# --------------------------------------------------------------------- raw tokens

# Raw-token multi-query recall (train.py's levels below -7, train/recall_probe.py):
# token ids of the committed tokenizer without the chat wrapper.  A sequence is n
# key/value pairs, then every key again in a shuffled order followed by its value;
# the targets are the query values (every one a lookup).  keys: "piece" = one
# entity-name piece (the ids tasks._name() names tokenize into), "name" = a whole
# " Name" (2-3 pieces, shared between names as in the chat levels); sep: the ids
# put between key and value ("" adjacent, ": " as in "- Name: 4"); line: each pair
# as a "- Name: 4\n" line (the level -7 facts, minus the chat wrapper);
# digits: (fewest, most) digits of a value.
RAW_SHAPES = {
    "adj4": dict(keys="piece", sep="", n=(2, 4), digits=(1, 1)),
    "sep4": dict(keys="piece", sep=": ", n=(2, 4), digits=(1, 1)),
    "adj":  dict(keys="piece", sep="", n=(8, 8), digits=(1, 1)),
    "sep":  dict(keys="piece", sep=": ", n=(8, 8), digits=(1, 1)),
    "name": dict(keys="name", sep=": ", n=(4, 8), digits=(1, 1)),
    "line": dict(keys="name", sep=": ", n=(4, 8), digits=(1, 1), line=True),
    "line3": dict(keys="name", sep=": ", n=(4, 8), digits=(1, 3), line=True),
}

# train.py's raw-token levels (below the chat levels): level -> the shapes its items
# cycle through (item i of the level is shape [i % len]); promotion goes up to -7
RAW_LEVELS = {
    -13: ["adj4", "sep4"],
    -12: ["adj", "sep"],
    -11: ["sep", "name", "adj"],
    -10: ["name", "line", "sep"],
    -9: ["line", "line3", "name"],
    -8: ["line3", "line"],
}


def raw_vocab(tok):
    """What raw_item needs of a tokenizer (tokenizers.Tokenizer): the name pieces,
    the digit ids, the separators and an encoder (cached)."""
    r = random.Random("raw-vocab")
    pieces = set()
    for _ in range(20000):
        pieces.update(tok.encode(" " + _name(r)).ids)
    digits = [tok.token_to_id(str(d)) for d in range(10)]
    cache = {}

    def enc(text):
        if text not in cache:
            cache[text] = tok.encode(text).ids
        return cache[text]
    return {"keys": sorted(pieces - set(digits)), "digits": digits, "enc": enc}


def raw_item(shape, seed, voc):
    """(ids, targets) of RAW_SHAPES[shape] for seed: targets[j] = 1 where ids[j] is
    a query value's token (the loss positions; every digit of a value)."""
    sh = RAW_SHAPES[shape]
    r = random.Random("raw/%s/%d" % (shape, seed))
    enc = voc["enc"]
    n = r.randint(*sh["n"])
    keys = []
    while len(keys) < n:
        k = (r.choice(voc["keys"]),) if sh["keys"] == "piece" else tuple(enc(" " + _name(r)))
        if k not in keys:
            keys.append(k)
    vals = [[r.choice(voc["digits"]) for _ in range(r.randint(*sh["digits"]))] for _ in keys]
    sep = enc(sh["sep"]) if sh["sep"] else []
    pre, post = (enc("-"), enc("\n")) if sh.get("line") else ([], [])
    ids, tgt = [], []
    for k, v in zip(keys, vals):
        ids += pre + list(k) + sep + v + post
    tgt = [0] * len(ids)
    order = list(range(n))
    r.shuffle(order)
    for i in order:
        head = pre + list(keys[i]) + sep
        ids += head + vals[i] + post
        tgt += [0] * len(head) + [1] * len(vals[i]) + [0] * len(post)
    return ids, tgt


# --------------------------------------------------------------------- template
# The Qwen3.5 chat template for what the tasks use (system, tools, tool calls,
# tool results, thinking off), as core/prompt/pic_template.c renders it.  The
# template's fixed text has one source, that C file: its string constants are
# read from it here; tests/integration/test_tasks.py checks that render() and
# the engine's renderer (`pic-engine tokenize --chat`) give the same ids.

def _template_text(name):
    """The C string constant `name` of core/prompt/pic_template.c."""
    import ast
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "core", "prompt",
                        "pic_template.c")
    with open(path, encoding="utf-8") as f:
        src = f.read()
    m = re.search(r"static const char %s\[\] =\s*((?:\"(?:\\.|[^\"\\])*\"\s*)+);" % name, src)
    if m is None:
        raise RuntimeError("%s: no string constant %s" % (path, name))
    return "".join(ast.literal_eval(lit) for lit in re.findall(r'"(?:\\.|[^"\\])*"', m.group(1)))


QWEN35_TOOLS_HEAD = _template_text("QWEN35_TOOLS_HEAD")
QWEN35_TOOLS_TAIL = _template_text("QWEN35_TOOLS_TAIL")


# The same subset as a Jinja chat template (tokenizer_config.json), for
# transformers' apply_chat_template; written for this project.
CHAT_TEMPLATE = (
    "{%- set ns = namespace(last_query=messages|length) -%}"
    "{%- for m in messages[::-1] -%}"
    "{%- if ns.last_query == messages|length and m.role == 'user' -%}"
    "{%- set c = m.content|trim -%}"
    "{%- if not (c.startswith('<tool_response>') and c.endswith('</tool_response>')) -%}"
    "{%- set ns.last_query = messages|length - loop.index -%}"
    "{%- endif -%}{%- endif -%}{%- endfor -%}"
    "{%- if ns.last_query == messages|length -%}"
    "{{- raise_exception('No user query found in messages.') -}}{%- endif -%}"
    "{%- if tools -%}"
    "{{- '" + json.dumps(QWEN35_TOOLS_HEAD)[1:-1].replace("'", "\\'") + "' -}}"
    "{%- for t in tools -%}{{- '\\n' + (t|tojson) -}}{%- endfor -%}"
    "{{- '" + json.dumps(QWEN35_TOOLS_TAIL)[1:-1].replace("'", "\\'") + "' -}}"
    "{%- if messages[0].role == 'system' and messages[0].content|trim -%}"
    "{{- '\\n\\n' + messages[0].content|trim -}}{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- elif messages[0].role == 'system' -%}"
    "{{- '<|im_start|>system\\n' + messages[0].content|trim + '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- for m in messages -%}{%- set i = loop.index0 -%}"
    "{%- if m.role == 'user' -%}"
    "{{- '<|im_start|>user\\n' + m.content|trim + '<|im_end|>\\n' -}}"
    "{%- elif m.role == 'assistant' -%}"
    "{%- set content = (m.content or '')|trim -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- if i > ns.last_query -%}{{- '<think>\\n\\n</think>\\n\\n' -}}{%- endif -%}"
    "{{- content -}}"
    "{%- for tc in m.tool_calls or [] -%}"
    "{%- if loop.first -%}{{- ('\\n\\n' if content else '') + '<tool_call>\\n<function=' -}}"
    "{%- else -%}{{- '\\n<tool_call>\\n<function=' -}}{%- endif -%}"
    "{{- tc.function.name + '>\\n' -}}"
    "{%- for k, v in tc.function.arguments.items() -%}"
    "{{- '<parameter=' + k + '>\\n' -}}"
    "{%- if v is mapping or (v is sequence and v is not string) -%}{{- v|tojson -}}"
    "{%- else -%}{{- v|string -}}{%- endif -%}"
    "{{- '\\n</parameter>\\n' -}}{%- endfor -%}"
    "{{- '</function>\\n</tool_call>' -}}{%- endfor -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- elif m.role == 'tool' -%}"
    "{%- if i > 0 and messages[i - 1].role != 'tool' -%}{{- '<|im_start|>user' -}}{%- endif -%}"
    "{{- '\\n<tool_response>\\n' + m.content|trim + '\\n</tool_response>' -}}"
    "{%- if loop.last or messages[i + 1].role != 'tool' -%}{{- '<|im_end|>\\n' -}}{%- endif -%}"
    "{%- endif -%}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}"
    "{%- if enable_thinking is defined and enable_thinking is false -%}"
    "{{- '<think>\\n\\n</think>\\n\\n' -}}{%- else -%}{{- '<think>\\n' -}}{%- endif -%}"
    "{%- endif -%}"
)


def _arg_str(v):
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "True" if v else "False"
    if isinstance(v, (int, float)):
        return str(v)
    return json.dumps(v, ensure_ascii=False)


def render(messages, tools=None, add_generation_prompt=True):
    """Qwen3.5 chat text (enable_thinking false) of an OpenAI messages list."""
    out = []
    n = len(messages)
    last_query = n
    for k in range(n - 1, -1, -1):
        m = messages[k]
        if m["role"] != "user":
            continue
        c = m["content"].strip()
        if not (c.startswith("<tool_response>") and c.endswith("</tool_response>")):
            last_query = k
            break
    if last_query == n:
        raise ValueError("No user query found in messages.")
    if tools:
        out.append(QWEN35_TOOLS_HEAD)
        for t in tools:
            out.append("\n" + json.dumps(t, ensure_ascii=False))
        out.append(QWEN35_TOOLS_TAIL)
        if messages[0]["role"] == "system" and messages[0]["content"].strip():
            out.append("\n\n" + messages[0]["content"].strip())
        out.append("<|im_end|>\n")
    elif messages[0]["role"] == "system":
        out.append("<|im_start|>system\n" + messages[0]["content"].strip() + "<|im_end|>\n")
    for i, m in enumerate(messages):
        role = m["role"]
        if role == "user":
            out.append("<|im_start|>user\n" + m["content"].strip() + "<|im_end|>\n")
        elif role == "assistant":
            content = (m.get("content") or "").strip()
            body = "<think>\n\n</think>\n\n" if i > last_query else ""
            body += content
            for j, tc in enumerate(m.get("tool_calls") or []):
                f = tc["function"]
                if j == 0:
                    body += "\n\n<tool_call>\n<function=" if content else "<tool_call>\n<function="
                else:
                    body += "\n<tool_call>\n<function="
                body += f["name"] + ">\n"
                for k, v in f["arguments"].items():
                    body += "<parameter=%s>\n%s\n</parameter>\n" % (k, _arg_str(v))
                body += "</function>\n</tool_call>"
            out.append("<|im_start|>assistant\n" + body + "<|im_end|>\n")
        elif role == "tool":
            if i > 0 and messages[i - 1]["role"] != "tool":
                out.append("<|im_start|>user")
            out.append("\n<tool_response>\n" + m["content"].strip() + "\n</tool_response>")
            if i == n - 1 or messages[i + 1]["role"] != "tool":
                out.append("<|im_end|>\n")
    if add_generation_prompt:
        out.append("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    return "".join(out)


def prompt_text(it):
    """The prompt (generation prompt included) of an item."""
    return render(it["messages"], it["tools"], True)


def normalise_answer(text):
    """An answer as exact match compares it: NFC, runs of whitespace as one space,
    none at either end."""
    return " ".join(unicodedata.normalize("NFC", text).split())


def answer_ok(text, answer):
    """Exact match of a decoded answer `text` against an item's `answer` (the one
    rule of heldout.py, errors.py, bench/accuracy.py and the tests): the strings
    equal after normalise_answer(), whatever token ids produced them."""
    return normalise_answer(text) == normalise_answer(answer)


PIC_MARK = "<|pic_sep|>"      # the engine's and the gateway's default document marker


def docs_message(it, order=None, marker=None):
    """The last user message of a RAG item with its documents in `order` (default:
    as generated; each keeps its number); marker: every document between markers,
    a segment of its own for the gateway and the engine (the rendered prompt is the
    same text without them)."""
    u = it["messages"][-1]["content"]
    intro = u[:u.index("\n\n")]
    q = u[u.rindex("\n\nQuestion: ") + 2:]
    parts = ["[%d] %s" % (i + 1, it["docs"][i])
             for i in (range(len(it["docs"])) if order is None else order)]
    if marker:
        return intro + "\n\n" + "".join(marker + p + "\n\n" for p in parts) + marker + q
    return intro + "\n\n" + "\n\n".join(parts) + "\n\n" + q


def request_json(it):
    """The item as an OpenAI chat request body (thinking off; tool-call arguments
    as JSON strings, as the API has them)."""
    msgs = []
    for i, m in enumerate(it["messages"]):
        m = dict(m)
        if m.get("tool_calls"):
            m["tool_calls"] = [
                {"id": "call_%d_%d" % (i, j), "type": "function",
                 "function": {"name": tc["function"]["name"],
                              "arguments": json.dumps(tc["function"]["arguments"])}}
                for j, tc in enumerate(m["tool_calls"])]
        msgs.append(m)
    body = {"messages": msgs, "chat_template_kwargs": {"enable_thinking": False}}
    if it["tools"]:
        body["tools"] = it["tools"]
    return body


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--task", default="single", choices=TRAIN_TASKS)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--n", type=int, default=1)
    ap.add_argument("--level", type=int, default=2, choices=sorted(LEVELS))
    ap.add_argument("--json", action="store_true", help="print OpenAI request bodies")
    ap.add_argument("--marked", action="store_true",
                    help="with --json: only the bodies, one a line, every document of a "
                    "RAG item between <|pic_sep|> markers (pic-engine calibrate --prompts)")
    ap.add_argument("--dump-prose", metavar="FILE",
                    help="write the prose corpus, one paragraph a line (for $PIC_PROSE)")
    args = ap.parse_args(argv)
    if args.dump_prose:
        with open(args.dump_prose, "w") as f:
            f.write("\n".join(prose()) + "\n")
        print("%d paragraphs, digest %s" % (len(prose()), corpus_digest()))
        return 0
    for s in range(args.seed, args.seed + args.n):
        it = item(args.task, s, args.level)
        if args.json and args.marked:
            body = request_json(it)
            if it["tools"] is None:
                body["messages"][-1] = dict(body["messages"][-1],
                                            content=docs_message(it, marker=PIC_MARK))
            print(json.dumps(body))
        elif args.json:
            print(json.dumps({"request": request_json(it), "answer": it["answer"]}))
        else:
            print(prompt_text(it) + it["answer"] + "<|im_end|>")
            print("=" * 72)
    return 0


if __name__ == "__main__":
    sys.exit(main())
