"""binding.py — the binding loss of train.py --bind-w (issue 11, train/README
"Session 24"): training-only linear heads on the residual stream that name, at
every token of a planted value, the attribute (or tool-result field) the value
belongs to, and at the position that predicts an answer's first token, the
attribute of the value the answer copies.  binding_probe.py measured the first
fading within two tokens of the attribute word (.917 at the word, .691 at the
value's first token at the last attention layer's input): a lookup whose keys
do not say what they are picks a value of the wrong attribute.

The targets are a pure function of a training sequence's token ids: the tokens
are decoded one by one (the fact sentences are ASCII), the planted facts found
by the templates' shape, and the query positions are train.lookup_targets' whose
value is one of those facts."""
import bisect
import re

from train import tasks

FIELDS = ["order_id", "status", "total", "items", "warehouse", "name", "user_id",
          "team", "room", "tracking_id", "depot", "eta_days"]
CLASSES = [a for a, _ in tasks.ATTRS] + FIELDS          # the heads' classes
_VALUE = r"([\w-]+(?: Harbour| Falls)?)"
_FACT = re.compile(r"\b(%s)(?: of [^.?\n]{1,60}? is| is)? %s\.(?=\s|$)"
                   % ("|".join(re.escape(a) for a, _ in tasks.ATTRS), _VALUE))
_FIELD = re.compile(r'"(%s)": "?([^",}]+)' % "|".join(FIELDS))
_RESPONSE = re.compile(r"<tool_response>.*?</tool_response>", re.S)


def fact_tokens(strs):
    """[(first token, end token, class)] of the planted values in a sequence whose
    tokens decode to the strings strs: the fact sentences of tasks.FACT_TEMPLATES
    and the fields of the tools' JSON results."""
    text = "".join(strs)
    starts, c = [], 0
    for s in strs:
        starts.append(c)
        c += len(s)
    at = lambda ch: bisect.bisect_right(starts, ch) - 1   # noqa: E731  token holding char ch
    out = []
    found = list(_FACT.finditer(text))
    for r in _RESPONSE.finditer(text):         # JSON fields of tool results, not of schemas
        found += _FIELD.finditer(text, r.start(), r.end())
    for m in found:
        out.append((at(m.start(2)), at(m.end(2) - 1) + 1, CLASSES.index(m.group(1))))
    return out


def targets(ids, spans, strs, lookups):
    """([(position, class)] of value tokens, [(position, class)] of queries) of a
    training sequence: strs its tokens' strings, lookups train.lookup_targets(ids,
    spans) [(query position, value position)]; a query's class is that of the fact
    whose value holds (or directly follows) its value position."""
    facts = fact_tokens(strs)
    keys = [(j, k) for j0, j1, k in facts for j in range(j0, j1)]
    queries = []
    for p, t in lookups:
        ks = {k for j0, j1, k in facts if j0 - 1 <= t < j1}
        if len(ks) == 1:
            queries.append((p, ks.pop()))
    return keys, queries


class Binder:
    """The binding loss's heads (one Linear per layer of `layers`, on the RMS-normalised
    inputs of those layers, zero at start) and its token strings; `run` gathers the
    heads' accuracy."""

    def __init__(self, tok, hidden, layers, weight):
        import torch
        self.strs = [tok.decode([i], skip_special_tokens=True) for i in range(tok.get_vocab_size())]
        self.layers = layers
        self.weight = weight
        self.heads = torch.nn.ModuleList(torch.nn.Linear(hidden, len(CLASSES)) for _ in layers)
        for h in self.heads:        # zero: the first gradients into the model are none
            torch.nn.init.zeros_(h.weight)
            torch.nn.init.zeros_(h.bias)
        self.run = {}

    def loss(self, hidden_states, seqs, lookups):
        """Mean over layers of (mean cross-entropy of the heads over the batch's value
        tokens + the same over its queries); hidden_states the model's (input of layer
        L at [L], each [B, n, H]), lookups [lookup_targets] per sequence."""
        import torch
        rows, cls, isq = [], [], []
        for b, (s, spans, _) in enumerate(seqs):
            keys, queries = targets(s, spans, [self.strs[i] for i in s], lookups[b])
            for (p, k), q in [(x, 0) for x in keys] + [(x, 1) for x in queries]:
                rows.append((b, p))
                cls.append(k)
                isq.append(q)
        if not rows:
            return hidden_states[0].new_zeros(())
        dev = hidden_states[0].device
        bi = torch.tensor([r[0] for r in rows], device=dev)
        pi = torch.tensor([r[1] for r in rows], device=dev)
        y = torch.tensor(cls, device=dev)
        q = torch.tensor(isq, device=dev, dtype=torch.bool)
        total = 0.0
        for L, head in zip(self.layers, self.heads):
            x = hidden_states[L][bi, pi].float()                            # [R, H]
            x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)     # the stream's scale out
            logits = head(x)                                                # [R, classes]
            ce = torch.nn.functional.cross_entropy(logits, y, reduction="none")
            total = total + ce[~q].mean() + (ce[q].mean() if q.any() else 0.0)
            ok = (logits.argmax(-1) == y).float()
            r = self.run.setdefault(L, [0.0, 0, 0.0, 0])
            r[0] += float(ok[~q].sum())
            r[1] += int((~q).sum())
            r[2] += float(ok[q].sum())
            r[3] += int(q.sum())
        return total / len(self.layers)

    def report(self):
        """{"bind_acc": {layer: [value-token accuracy, query accuracy]}} since the last
        report (then cleared)."""
        out = {str(L): [round(r[0] / max(r[1], 1), 3), round(r[2] / max(r[3], 1), 3)]
               for L, r in sorted(self.run.items())}
        self.run.clear()
        return {"bind_acc": out}
