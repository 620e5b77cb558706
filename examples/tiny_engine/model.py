"""A small decoder-only transformer (RMSNorm, rotary embeddings, grouped-query attention,
SwiGLU MLP) with weights drawn from a fixed seed, running over a paged KV cache.

The forward pass computes a step's tokens layer by layer (layer outer, requests and chunks
inner), calling ``hooks.before_layer(l)`` before layer l reads the KV cache and
``hooks.after_layer(l)`` once every request's layer-l KV of the step is written — where an
engine calls the connector's ``wait_for_layer_load`` and ``save_kv_layer``.

Bitwise identity: every token is computed in a chunk fixed by its position alone — chunks
end at multiples of ``block_size`` and at the prompt's last token, which is always a chunk of
its own — so a token's arithmetic (matrix shapes, attention length) is the same whether the
tokens before it were computed in this step, an earlier step, or loaded from tierkv
(docs/engine.md).
"""

import math
from dataclasses import asdict, dataclass

import torch

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


@dataclass
class ModelConfig:
    vocab_size: int = 512
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: int = 2
    d_ff: int = 128
    rope_theta: float = 10000.0
    max_positions: int = 4096
    dtype: str = "float32"
    seed: int = 0
    name: str = "tiny-engine/tiny-64"

    @property
    def head_dim(self):
        return self.d_model // self.n_heads

    def kv_bytes_per_token(self):
        """KV bytes one token occupies (all layers, K and V)."""
        return 2 * self.n_layers * self.n_kv_heads * self.head_dim * torch.tensor([], dtype=_DTYPES[self.dtype]).element_size()

    def prefill_flops_per_token(self, context):
        """Multiply-adds x 2 of one token at position ~context (linear layers + attention)."""
        d, hd, h, kv, ff = self.d_model, self.head_dim, self.n_heads, self.n_kv_heads, self.d_ff
        linear = d * h * hd + 2 * d * kv * hd + h * hd * d + 3 * d * ff
        attn = 2 * h * hd * context
        return 2 * (self.n_layers * (linear + attn) + d * self.vocab_size)

    def to_dict(self):
        return asdict(self)


class TinyModel:
    def __init__(self, cfg: ModelConfig):
        if cfg.d_model % cfg.n_heads or cfg.n_heads % cfg.n_kv_heads:
            raise ValueError("d_model must divide by n_heads and n_heads by n_kv_heads")
        self.cfg = cfg
        self.dtype = _DTYPES[cfg.dtype]
        g = torch.Generator().manual_seed(cfg.seed)
        d, hd, ff = cfg.d_model, cfg.head_dim, cfg.d_ff

        def w(*shape, fan_in):
            return (torch.randn(*shape, generator=g) / math.sqrt(fan_in)).to(self.dtype)

        self.embed = w(cfg.vocab_size, d, fan_in=1)
        self.layers = []
        for _ in range(cfg.n_layers):
            self.layers.append({
                "attn_norm": torch.ones(d, dtype=self.dtype),
                "wq": w(d, cfg.n_heads * hd, fan_in=d),
                "wk": w(d, cfg.n_kv_heads * hd, fan_in=d),
                "wv": w(d, cfg.n_kv_heads * hd, fan_in=d),
                "wo": w(cfg.n_heads * hd, d, fan_in=cfg.n_heads * hd),
                "mlp_norm": torch.ones(d, dtype=self.dtype),
                "w_gate": w(d, ff, fan_in=d),
                "w_up": w(d, ff, fan_in=d),
                "w_down": w(ff, d, fan_in=ff),
            })
        self.final_norm = torch.ones(d, dtype=self.dtype)
        self.lm_head = w(d, cfg.vocab_size, fan_in=d)
        inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
        ang = torch.arange(cfg.max_positions, dtype=torch.float64)[:, None] * inv[None, :]
        self.cos = torch.cos(ang).to(self.dtype)  # [pos, hd/2]
        self.sin = torch.sin(ang).to(self.dtype)

    def new_kv_cache(self, num_blocks, block_size):
        """One tensor per layer, [num_blocks, 2 (K, V), block_size, n_kv_heads, head_dim]:
        block b of a layer is ``t[b]``, contiguous (what the connector registers)."""
        c = self.cfg
        # fill_ writes every page now (torch.zeros may map untouched zero pages, whose first
        # touch would then be paid inside a request).
        return [torch.empty(num_blocks, 2, block_size, c.n_kv_heads, c.head_dim,
                            dtype=self.dtype).fill_(0) for _ in range(c.n_layers)]

    @staticmethod
    def _rms(x, weight):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * weight

    def _rope(self, x, pos):
        # x [M, heads, hd]; rotate pairs (even, odd) by the position's angles.
        cos = self.cos[pos][:, None, :]
        sin = self.sin[pos][:, None, :]
        x1, x2 = x[..., 0::2], x[..., 1::2]
        out = torch.empty_like(x)
        out[..., 0::2] = x1 * cos - x2 * sin
        out[..., 1::2] = x1 * sin + x2 * cos
        return out

    def forward(self, work, kv, block_size, hooks=None):
        """Runs one step. ``work``: a list of (tokens, start, chunk_ends, block_table) per
        request: compute ``tokens`` (a list) at positions start.. in chunks ending at each of
        ``chunk_ends``. Writes their K/V into ``kv`` and returns each request's logits of its
        last computed token ([vocab], float32)."""
        c = self.cfg
        hs = [self.embed[torch.tensor(t, dtype=torch.long)] for t, _, _, _ in work]
        for li, L in enumerate(self.layers):
            if hooks is not None:
                hooks.before_layer(li)
            pages = kv[li]
            for r, (tokens, start, ends, table) in enumerate(work):
                h = hs[r]
                outs = []
                lo = start
                for hi in ends:
                    outs.append(self._chunk(L, pages, h[lo - start:hi - start], lo, hi, table,
                                            block_size))
                    lo = hi
                hs[r] = torch.cat(outs) if len(outs) > 1 else outs[0]
            if hooks is not None:
                hooks.after_layer(li)
        out = []
        for h in hs:
            x = self._rms(h[-1:], self.final_norm)
            out.append((x @ self.lm_head)[0].float())
        return out

    def _chunk(self, L, pages, x, lo, hi, table, bs):
        c = self.cfg
        m, hd, kvh = hi - lo, c.head_dim, c.n_kv_heads
        g = c.n_heads // kvh
        pos = torch.arange(lo, hi)
        xn = self._rms(x, L["attn_norm"])
        q = self._rope((xn @ L["wq"]).view(m, c.n_heads, hd), pos)
        k = self._rope((xn @ L["wk"]).view(m, kvh, hd), pos)
        v = (xn @ L["wv"]).view(m, kvh, hd)
        tb = torch.tensor(table, dtype=torch.long)
        blk = tb[pos // bs]
        slot = pos % bs
        pages[blk, 0, slot] = k
        pages[blk, 1, slot] = v
        nb = (hi + bs - 1) // bs
        ctx = pages[tb[:nb]]  # [nb, 2, bs, kvh, hd], a new contiguous tensor
        keys = ctx[:, 0].reshape(nb * bs, kvh, hd)[:hi].permute(1, 2, 0)  # [kvh, hd, hi]
        vals = ctx[:, 1].reshape(nb * bs, kvh, hd)[:hi].permute(1, 0, 2)  # [kvh, hi, hd]
        qg = q.view(m, kvh, g, hd).permute(1, 2, 0, 3).reshape(kvh, g * m, hd)
        scores = (qg @ keys) * (1.0 / math.sqrt(hd))  # [kvh, g*m, hi]
        mask = torch.arange(hi)[None, :] > pos[:, None]  # [m, hi]
        scores = scores.masked_fill(mask.repeat(g, 1)[None], float("-inf"))
        p = torch.softmax(scores.float(), dim=-1).to(self.dtype)
        att = (p @ vals).view(kvh, g, m, hd).permute(2, 0, 1, 3).reshape(m, c.n_heads * hd)
        x = x + att @ L["wo"]
        xn = self._rms(x, L["mlp_norm"])
        x = x + (torch.nn.functional.silu(xn @ L["w_gate"]) * (xn @ L["w_up"])) @ L["w_down"]
        return x
