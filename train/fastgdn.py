"""fastgdn.py — faster CPU training paths for transformers' Qwen3.5 GatedDeltaNet.

transformers' reference fallbacks are correct but slow to train on CPU: the
depthwise causal conv's backward (aten::convolution_backward) and the batched
64x64 triangular solves of the chunked delta rule dominate a step.  `patch()`
swaps in two equivalent formulations (same function, different arithmetic):

  * the causal conv as K shifted multiply-adds (cheap forward and backward);
  * (I + A)^-1 of the unit lower-triangular UT system once per chunk (one
    triangular solve against the identity), then matmuls.

Only training uses it; evaluation and the oracle comparison use the unpatched
model (`unpatch()`), and check_model.py compares the two.
"""
import torch
import torch.nn.functional as F

_ORIG = {}


def causal_conv1d_fn(hidden_states, weight, bias=None, activation=None, **kwargs):
    """[B, C, T] -> [B, C, T]: y[c,t] = sum_j w[c,j] x[c, t-K+1+j] (+ bias), then act."""
    B, C, T = hidden_states.shape
    K = weight.shape[-1]
    x = F.pad(hidden_states.to(weight.dtype), (K - 1, 0))
    out = x[:, :, 0:T] * weight[:, 0].unsqueeze(-1)
    for j in range(1, K):
        out = out + x[:, :, j:j + T] * weight[:, j].unsqueeze(-1)
    if bias is not None:
        out = out + bias.unsqueeze(-1)
    if activation is not None:
        out = F.silu(out)
    return out.to(hidden_states.dtype)


def _unit_lower_inverse(a):
    """(I + strict_lower(a))^-1 for [..., n, n].  Repeated squaring
    ((I - A)(I + A^2)(I + A^4)...) was faster but its powers of A overflow fp32
    once keys align (NaN after ~200k training tokens); a triangular solve against
    the identity is as exact as forward substitution."""
    n = a.shape[-1]
    eye = torch.eye(n, dtype=a.dtype, device=a.device).expand_as(a)
    return torch.linalg.solve_triangular(a.tril(-1) + eye, eye, upper=False,
                                         unitriangular=True)


def chunk_gated_delta_rule(query, key, value, g, beta, chunk_size=64, initial_state=None,
                           output_final_state=False, use_qk_l2norm_in_kernel=False, **kwargs):
    """Same contract as transformers' torch_chunk_gated_delta_rule."""
    initial_dtype = query.dtype
    B, T, Hk, dk = key.shape
    Hv, dv = value.shape[-2:]
    if Hk != Hv:
        query = query.repeat_interleave(Hv // Hk, dim=2)
        key = key.repeat_interleave(Hv // Hk, dim=2)
    query, key, value, beta, g = [x.transpose(1, 2).to(torch.float32).contiguous()
                                  for x in (query, key, value, beta, g)]
    if use_qk_l2norm_in_kernel:
        query = query * torch.rsqrt((query * query).sum(-1, keepdim=True) + 1e-6)
        key = key * torch.rsqrt((key * key).sum(-1, keepdim=True) + 1e-6)
    query = query * dk ** -0.5
    pad = (chunk_size - T % chunk_size) % chunk_size
    query, key, value = (F.pad(x, (0, 0, 0, pad)) for x in (query, key, value))
    beta, g = (F.pad(x, (0, pad)) for x in (beta, g))
    N = (T + pad) // chunk_size
    v_beta = value * beta.unsqueeze(-1)
    k_beta = key * beta.unsqueeze(-1)
    query, key, k_beta, v_beta = [x.reshape(B, Hv, N, chunk_size, x.shape[-1])
                                  for x in (query, key, k_beta, v_beta)]
    g = g.reshape(B, Hv, N, chunk_size)
    upper = torch.ones(chunk_size, chunk_size, dtype=torch.bool, device=query.device).triu(1)
    G = g.cumsum(-1)
    D = (G.unsqueeze(-1) - G.unsqueeze(-2)).masked_fill(upper, float("-inf")).exp()
    ut = (k_beta @ key.transpose(-1, -2)) * D
    attn = (query @ key.transpose(-1, -2)) * D
    Tinv = _unit_lower_inverse(ut)
    new_values = Tinv @ v_beta
    k_cumdecay = Tinv @ (k_beta * G.exp().unsqueeze(-1))
    S = (torch.zeros(B, Hv, dk, dv, dtype=torch.float32, device=query.device)
         if initial_state is None else initial_state.to(torch.float32))
    query = query * G.exp().unsqueeze(-1)
    key = key * (G[..., -1:] - G).exp().unsqueeze(-1)
    cdecay = G[..., -1].exp()[..., None, None]
    outs = []
    for i in range(N):
        v_new = new_values[:, :, i] - k_cumdecay[:, :, i] @ S
        outs.append(query[:, :, i] @ S + attn[:, :, i] @ v_new)
        S = S * cdecay[:, :, i] + key[:, :, i].transpose(-1, -2) @ v_new
    o = torch.stack(outs, 2).reshape(B, Hv, -1, dv)[:, :, :T]
    o = o.transpose(1, 2).contiguous().to(initial_dtype)
    return o, (S if output_final_state else None)


def patch():
    from transformers.models.qwen3_5 import modeling_qwen3_5 as m
    if not _ORIG:
        _ORIG["conv"] = m.causal_conv1d_fn
        _ORIG["chunk"] = m.torch_chunk_gated_delta_rule
    m.causal_conv1d_fn = causal_conv1d_fn
    m.torch_chunk_gated_delta_rule = chunk_gated_delta_rule


def unpatch():
    from transformers.models.qwen3_5 import modeling_qwen3_5 as m
    if _ORIG:
        m.causal_conv1d_fn = _ORIG["conv"]
        m.torch_chunk_gated_delta_rule = _ORIG["chunk"]
