"""route.py — route dropout of train.py --route-drop (issue 11, train/README "Session 24"):
at the positions that predict answer tokens, zero the token-mixer outputs (Gated
DeltaNet or attention) of chosen layers in a random share of a batch's sequences, so
that the answer has to come through the other layers.  Measured on run B1 (mixer
ablation at the answer position, `route_probe.py`): the first answer token comes from
the first three GDN layers' recurrent memory (zero them there: 8 of 134 right answers
stay right; zero both attention layers: 128 of 134), although the last attention layer
has a head that puts .97 on the asked value: the lossy memory answers, the exact
lookup is ignored."""


def mixer(layer):
    """The token mixer of a decoder layer: its attention or its Gated DeltaNet."""
    return layer.self_attn if hasattr(layer, "self_attn") else layer.linear_attn


class RouteDrop:
    """Forward hooks on the mixers of `layers` that zero their output where `mask`
    ([B, n, 1], 1 = drop) says; `set` draws the mask of a batch (or assign `mask`),
    `clear` lifts it, `remove` takes the hooks off."""

    def __init__(self, model, layers, p, seed=0):
        import torch
        self.p, self.layers, self.mask = p, layers, None
        self.gen = torch.Generator().manual_seed(seed)
        self.handles = [mixer(model.model.layers[i]).register_forward_hook(self._hook)
                        for i in layers]

    def _hook(self, mod, args, out):
        if self.mask is None:
            return None
        if isinstance(out, tuple):
            return (out[0] * (1 - self.mask).to(out[0].dtype),) + tuple(out[1:])
        return out * (1 - self.mask).to(out.dtype)

    def set(self, ans, device):
        """Draw the mask: ans [B, n-1] the answer-target mask of train._targets (1 where
        position j predicts an answer token), kept for a p share of the sequences."""
        import torch
        B = ans.shape[0]
        keep = (torch.rand(B, generator=self.gen) < self.p).float()       # [B]
        m = torch.zeros(B, ans.shape[1] + 1)
        m[:, :-1] = ans.cpu() * keep[:, None]
        self.mask = m[:, :, None].to(device)                               # [B, n, 1]

    def clear(self):
        self.mask = None

    def remove(self):
        for h in self.handles:
            h.remove()
