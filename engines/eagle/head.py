"""An EAGLE-3 head: one decoder layer over the target's fused features and the next token.

The target's features at a low, a middle and a high layer (what enters those decoder layers)
are fused by `fc` into one hidden vector. Row t pairs the fused feature at position t with the
embedding of token t+1 (the target's own embedding table) and predicts token t+2: both halves
are normed, concatenated (embedding first) and attended over the rows before it; the residual
stream is the hidden half. Drafting goes on by feeding a row's output (before the final norm)
back as the next row's hidden, with the token it predicted. Logits come from the head's own
`lm_head` over a reduced draft vocabulary (published heads: `d2t` maps draft ids to the
target's) or, for heads trained here, the target's LM head itself, frozen.

The tensor names follow the published format (fc, midlayer.*, norm, lm_head, d2t), so one
module reads both.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F


@dataclass
class HeadShape:
    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    target_hidden_size: int
    vocab_size: int  # the target's
    draft_vocab_size: int | None = None  # None: the target's LM head, no lm_head of its own
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0


class Attention(nn.Module):
    def __init__(self, s: HeadShape) -> None:
        super().__init__()
        self.n_heads, self.n_kv, self.head_dim = (s.num_attention_heads, s.num_key_value_heads,
                                                  s.head_dim)
        self.q_proj = nn.Linear(2 * s.hidden_size, self.n_heads * s.head_dim, bias=False)
        self.k_proj = nn.Linear(2 * s.hidden_size, self.n_kv * s.head_dim, bias=False)
        self.v_proj = nn.Linear(2 * s.hidden_size, self.n_kv * s.head_dim, bias=False)
        self.o_proj = nn.Linear(self.n_heads * s.head_dim, s.hidden_size, bias=False)
        inv = 1.0 / s.rope_theta ** (torch.arange(0, s.head_dim, 2).float() / s.head_dim)
        self.register_buffer("inv_freq", inv, persistent=False)

    def project(self, x: torch.Tensor, positions: torch.Tensor):
        """(B, T, 2H) -> rotated q (B, nH, T, hd), k and v (B, nKV, T, hd)."""
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.n_kv, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.n_kv, self.head_dim).transpose(1, 2)
        cos, sin = self._rope(positions, x.dtype)
        return _rotate(q, cos, sin), _rotate(k, cos, sin), v

    def attend(self, q, k, v, allowed: torch.Tensor) -> torch.Tensor:
        """q (B, nH, T, hd) over k, v (B, nKV, S, hd); allowed (B or 1, T, S) bool."""
        repeat = self.n_heads // self.n_kv
        if repeat > 1:
            k, v = k.repeat_interleave(repeat, 1), v.repeat_interleave(repeat, 1)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed[:, None])
        b, _, t, _ = out.shape
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))

    def _rope(self, positions: torch.Tensor, dtype):
        freqs = positions.float()[..., None] * self.inv_freq  # (B, T, hd/2)
        emb = torch.cat([freqs, freqs], dim=-1)
        return emb.cos().to(dtype)[:, None], emb.sin().to(dtype)[:, None]


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    turned = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + turned * sin


class Mlp(nn.Module):
    def __init__(self, s: HeadShape) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(s.hidden_size, s.intermediate_size, bias=False)
        self.up_proj = nn.Linear(s.hidden_size, s.intermediate_size, bias=False)
        self.down_proj = nn.Linear(s.intermediate_size, s.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class MidLayer(nn.Module):
    def __init__(self, s: HeadShape) -> None:
        super().__init__()
        self.input_layernorm = nn.RMSNorm(s.hidden_size, eps=s.rms_norm_eps)
        self.hidden_norm = nn.RMSNorm(s.hidden_size, eps=s.rms_norm_eps)
        self.self_attn = Attention(s)
        self.post_attention_layernorm = nn.RMSNorm(s.hidden_size, eps=s.rms_norm_eps)
        self.mlp = Mlp(s)


class KeyValues:
    """The head's own cache: keys and values of the rows it has read, (1, nKV, S, hd)."""

    def __init__(self) -> None:
        self.k: torch.Tensor | None = None
        self.v: torch.Tensor | None = None

    def __len__(self) -> int:
        return 0 if self.k is None else self.k.shape[2]

    def append(self, k: torch.Tensor, v: torch.Tensor) -> None:
        self.k = k if self.k is None else torch.cat([self.k, k], dim=2)
        self.v = v if self.v is None else torch.cat([self.v, v], dim=2)

    def crop(self, n: int) -> None:
        if self.k is not None:
            self.k, self.v = (self.k[:, :, :n], self.v[:, :, :n]) if n > 0 else (None, None)


class EagleHead(nn.Module):
    def __init__(self, shape: HeadShape) -> None:
        super().__init__()
        self.shape = shape
        self.fc = nn.Linear(3 * shape.target_hidden_size, shape.hidden_size, bias=False)
        self.midlayer = MidLayer(shape)
        self.norm = nn.RMSNorm(shape.hidden_size, eps=shape.rms_norm_eps)
        self.lm_head = (nn.Linear(shape.hidden_size, shape.draft_vocab_size, bias=False)
                        if shape.draft_vocab_size else None)
        if shape.draft_vocab_size:
            self.register_buffer("d2t", torch.zeros(shape.draft_vocab_size, dtype=torch.long))
        else:
            self.d2t = None

    def step(self, hidden: torch.Tensor, embeds: torch.Tensor, positions: torch.Tensor,
             cache: KeyValues | None, allowed: torch.Tensor) -> torch.Tensor:
        """Rows (B, T, H) of hidden and token embeddings at `positions` (B, T) -> the rows'
        outputs before the final norm. `allowed` (B or 1, T, S + T): which cached rows and which
        of these rows each row sees; the rows' keys join `cache` when one is given."""
        layer = self.midlayer
        x = torch.cat([layer.input_layernorm(embeds), layer.hidden_norm(hidden)], dim=-1)
        q, k, v = layer.self_attn.project(x, positions)
        if cache is not None:
            cache.append(k, v)
            k, v = cache.k, cache.v
        h = hidden + layer.self_attn.attend(q, k, v, allowed)
        return h + layer.mlp(layer.post_attention_layernorm(h))

    def logits(self, out: torch.Tensor, target_head: nn.Module | None = None) -> torch.Tensor:
        """Logits over the head's vocabulary: the draft vocabulary, or the target's when the
        head uses the target's LM head (`target_head`)."""
        normed = self.norm(out)
        if self.lm_head is not None:
            return self.lm_head(normed)
        return target_head(normed)  # float32 or its int8 copy (engines.machine.precision)

    def to_target_ids(self, ids: torch.Tensor) -> torch.Tensor:
        """Draft-vocabulary ids to the target's (identity without a reduced vocabulary)."""
        return ids if self.d2t is None else ids + self.d2t[ids]
