"""The planner's one decoder-layer loop: every forward of the planner LM runs through `DecoderStack`.

Pruned prefill, decode, constrained decoding, candidate scoring and predictor / adapter training all call
`DecoderStack.forward`, passing in what differs (token selection, key bias, KV cache, abort check); inference packs
each layer's weights and may decode with smaller `decode_weights`. Why: docs/planner.md, "The decoder-layer loop".
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F

from .architecture import SUPPORTED_MODEL_TYPES, Architecture, architecture
from .call_aborted import CallAborted

__all__ = ["SUPPORTED_MODEL_TYPES", "Architecture", "CallAborted", "DecoderStack", "ForwardOut", "KVCache",
           "int8_available"]

DECODE_WEIGHTS = ("model", "float16", "int8")
HALF_MAX_TOKENS = 4
"""Forwards of at most this many new tokens read float16 weights; longer ones are faster with the model's."""
INT8_MAX_TOKENS = 32
"""Forwards of at most this many new tokens read int8 weights."""
CHUNK_TOKENS = 512
"""A forward that may be aborted runs a layer over a longer prompt in chunks of this many tokens, checking between."""


class KVCache:
    """Per-layer key / value buffers, grown in place; each layer holds its own number of tokens (pruning).

    Keys and values are [batch, kv_heads, capacity, head_dim]; `lengths[i]` of
    them are filled, and `positions[i]` holds the original positions of those
    tokens (what a sliding-window layer's mask reads). Appending writes into
    spare capacity (`reserve` extra slots are allocated on first use and on
    growth), so a decode step copies one token per layer instead of
    re-concatenating the cache.
    """

    def __init__(self, num_layers: int, reserve: int = 64, expected: int = 0):
        self.keys: list[Optional[torch.Tensor]] = [None] * num_layers
        self.values: list[Optional[torch.Tensor]] = [None] * num_layers
        self.positions: list[Optional[torch.Tensor]] = [None] * num_layers
        self.lengths = [0] * num_layers
        self.reserve = max(0, int(reserve))
        self.expected = max(0, int(expected))  # tokens the first allocation makes room for (the prompt)

    def __len__(self) -> int:
        return len(self.lengths)

    def seq_length(self, layer: int) -> int:
        """Tokens cached at `layer`."""
        return self.lengths[layer]

    def append(self, layer: int, keys: torch.Tensor, values: torch.Tensor,
               positions: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Store [b, h, q, d] new keys / values at `layer` (at original `positions` [q]; default: right after the
        last cached one, from 0); return views of everything cached there."""
        n, q = self.lengths[layer], keys.shape[2]
        buf = self.keys[layer]
        if buf is None or n + q > buf.shape[2]:
            capacity = max(n + q, self.expected if buf is None else 0) + max(self.reserve, n // 2)
            shape = (keys.shape[0], keys.shape[1], capacity, keys.shape[3])
            new_k = torch.empty(shape, dtype=keys.dtype, device=keys.device)
            new_v = torch.empty(shape, dtype=values.dtype, device=values.device)
            new_p = torch.empty(capacity, dtype=torch.long, device=keys.device)
            if n:
                new_k[:, :, :n] = buf[:, :, :n]
                new_v[:, :, :n] = self.values[layer][:, :, :n]
                new_p[:n] = self.positions[layer][:n]
            self.keys[layer], self.values[layer], self.positions[layer] = new_k, new_v, new_p
        if positions is None:
            first = int(self.positions[layer][n - 1]) + 1 if n else 0
            positions = torch.arange(first, first + q, device=keys.device)
        self.keys[layer][:, :, n:n + q] = keys
        self.values[layer][:, :, n:n + q] = values
        self.positions[layer][n:n + q] = positions
        self.lengths[layer] = n + q
        return self.keys[layer][:, :, :n + q], self.values[layer][:, :, :n + q]

    def key_positions(self, layer: int) -> torch.Tensor:
        """The original positions [n] of the tokens cached at `layer` (empty when none)."""
        n = self.lengths[layer]
        if not n:
            return torch.empty(0, dtype=torch.long)
        return self.positions[layer][:n]

    def view(self, layer: int) -> tuple[Optional[torch.Tensor], Optional[torch.Tensor]]:
        """The cached keys and values of `layer` (None when empty)."""
        n = self.lengths[layer]
        if not n:
            return None, None
        return self.keys[layer][:, :, :n], self.values[layer][:, :, :n]

    def nbytes(self) -> int:
        """Bytes of the filled part of the cache."""
        total = 0
        for layer in range(len(self)):
            k, v = self.view(layer)
            if k is not None:
                total += k.numel() * k.element_size() + v.numel() * v.element_size()
        return total


# ---------------------------------------------------------------------------- projections


class ModuleProjections:
    """A layer's projections as its nn.Linear modules compute them (autograd, LoRA wrappers)."""

    def __init__(self, layer):
        self.attn, self.mlp = layer.self_attn, layer.mlp

    def qkv(self, x: torch.Tensor) -> torch.Tensor:
        """q | k | v along the last dimension."""
        return torch.cat([self.attn.q_proj(x), self.attn.k_proj(x), self.attn.v_proj(x)], dim=-1)

    def o(self, x: torch.Tensor) -> torch.Tensor:
        """Attention output projection."""
        return self.attn.o_proj(x)

    def gate_up(self, x: torch.Tensor) -> torch.Tensor:
        """gate | up along the last dimension."""
        return torch.cat([self.mlp.gate_proj(x), self.mlp.up_proj(x)], dim=-1)

    def down(self, x: torch.Tensor) -> torch.Tensor:
        """MLP output projection."""
        return self.mlp.down_proj(x)


def _fuse(linears: list) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """One weight (and bias) for several nn.Linear with the same input; the modules then view into it."""
    weight = torch.cat([m.weight.detach() for m in linears], dim=0).contiguous()
    biases = [m.bias for m in linears]
    bias = None
    if any(b is not None for b in biases):
        bias = torch.cat([b.detach() if b is not None else weight.new_zeros(m.out_features)
                          for b, m in zip(biases, linears, strict=True)]).contiguous()
    row = 0
    for m in linears:
        rows = m.out_features
        m.weight.data = weight[row:row + rows]
        if m.bias is not None:
            m.bias.data = bias[row:row + rows]
        row += rows
    return weight, bias


def _int8_packed(weight: torch.Tensor, bias: Optional[torch.Tensor]):
    """fbgemm / x86 packed int8 weight (symmetric, per output channel) for quantized::linear_dynamic."""
    w = weight.detach().float()
    scale = (w.abs().amax(dim=1) / 127.0).clamp(min=1e-12).double()
    with warnings.catch_warnings():  # quantized-tensor constructors warn of a future deprecation
        warnings.simplefilter("ignore")
        q = torch.quantize_per_channel(w, scale, torch.zeros(w.shape[0], dtype=torch.long), 0, torch.qint8)
        return torch.ops.quantized.linear_prepack(q, None if bias is None else bias.detach().float())


class PackedProjections:
    """A layer's projections as fused matrices of the model's dtype, with a smaller copy for decode-sized forwards."""

    def __init__(self, layer, decode_weights: str = "model"):
        attn, mlp = layer.self_attn, layer.mlp
        self.qkv_w, self.qkv_b = _fuse([attn.q_proj, attn.k_proj, attn.v_proj])
        self.gu_w, self.gu_b = _fuse([mlp.gate_proj, mlp.up_proj])
        self.o_w, self.o_b = attn.o_proj.weight.detach(), _detached(attn.o_proj.bias)
        self.down_w, self.down_b = mlp.down_proj.weight.detach(), _detached(mlp.down_proj.bias)
        pairs = ((self.qkv_w, self.qkv_b), (self.o_w, self.o_b), (self.gu_w, self.gu_b), (self.down_w, self.down_b))
        self.decode = None
        if decode_weights in ("int8", "float16"):
            self.decode = tuple(_decode_copy(w, b, decode_weights) for w, b in pairs)
        self.decode_linear = _int8_linear if decode_weights == "int8" else _half_linear
        self.use_decode = False  # set per forward by DecoderStack

    def _linear(self, x: torch.Tensor, which: int, weight: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
        if self.use_decode:
            return self.decode_linear(x, self.decode[which])
        return F.linear(x, weight, bias)

    def qkv(self, x: torch.Tensor) -> torch.Tensor:
        """q | k | v along the last dimension."""
        return self._linear(x, 0, self.qkv_w, self.qkv_b)

    def o(self, x: torch.Tensor) -> torch.Tensor:
        """Attention output projection."""
        return self._linear(x, 1, self.o_w, self.o_b)

    def gate_up(self, x: torch.Tensor) -> torch.Tensor:
        """gate | up along the last dimension."""
        return self._linear(x, 2, self.gu_w, self.gu_b)

    def down(self, x: torch.Tensor) -> torch.Tensor:
        """MLP output projection."""
        return self._linear(x, 3, self.down_w, self.down_b)


def _decode_copy(weight: torch.Tensor, bias: Optional[torch.Tensor], kind: str):
    if kind == "int8":
        return _int8_packed(weight, bias)
    return weight.detach().half(), None if bias is None else bias.detach().half()


def _half_linear(x: torch.Tensor, weight_bias) -> torch.Tensor:
    weight, bias = weight_bias
    return F.linear(x.half(), weight, bias).to(x.dtype)


def _int8_linear(x: torch.Tensor, packed) -> torch.Tensor:
    # quantized::linear_dynamic takes float32 activations; reduce_range keeps AVX2 and VNNI results identical.
    if x.dtype == torch.float32:
        return torch.ops.quantized.linear_dynamic(x, packed, True)
    return torch.ops.quantized.linear_dynamic(x.float(), packed, True).to(x.dtype)


def _detached(t: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    return None if t is None else t.detach()


def int8_available() -> tuple[bool, str]:
    """Whether dynamic int8 GEMMs run here, and why not when they do not."""
    engine = torch.backends.quantized.engine
    if engine not in ("x86", "fbgemm", "qnnpack", "onednn"):
        return False, f"no quantized engine (torch.backends.quantized.engine = {engine!r})"
    try:
        packed = _int8_packed(torch.ones(2, 2), None)
        torch.ops.quantized.linear_dynamic(torch.ones(1, 2), packed, True)
    except (RuntimeError, NotImplementedError) as exc:
        return False, f"quantized::linear_dynamic failed: {exc}"
    return True, f"quantized engine {engine}"


# ---------------------------------------------------------------------------- the stack


@dataclass
class ForwardOut:
    """Hidden states after the last layer run, and the original positions of the tokens they belong to."""

    hidden: torch.Tensor      # [batch, n, d]
    positions: torch.Tensor   # [n]


Selection = Callable[[int, torch.Tensor, torch.Tensor], Optional[torch.Tensor]]
KeyBias = Callable[[int, torch.Tensor], Optional[torch.Tensor]]


@dataclass(frozen=True)
class LayerNorms:
    """A layer's RMSNorm modules: before attention and MLP; after them and per head of q / k where the family has
    them (None otherwise)."""

    pre_attn: object
    pre_mlp: object
    post_attn: Optional[object] = None
    post_mlp: Optional[object] = None
    q: Optional[object] = None
    k: Optional[object] = None


def layer_norms(layer, arch: Architecture) -> LayerNorms:
    """The norm modules of one Hugging Face decoder layer."""
    attn = layer.self_attn
    q, k = (attn.q_norm, attn.k_norm) if arch.qk_norm else (None, None)
    if arch.sandwich:
        return LayerNorms(layer.input_layernorm, layer.pre_feedforward_layernorm, layer.post_attention_layernorm,
                          layer.post_feedforward_layernorm, q, k)
    return LayerNorms(layer.input_layernorm, layer.post_attention_layernorm, q=q, k=k)


class DecoderStack:
    """The decoder layers of a decoder-only causal LM (`architecture.SUPPORTED_MODEL_TYPES`), run one by one."""

    def __init__(self, model, packed: bool = True, decode_weights: str = "model"):
        config = model.config
        self.arch = architecture(config)
        if decode_weights not in DECODE_WEIGHTS:
            raise ValueError(f"decode_weights '{decode_weights}' is not one of {DECODE_WEIGHTS}")
        if decode_weights != "model" and not packed:
            raise ValueError("decode weights need packed projections")
        if decode_weights == "int8" and model.device.type != "cpu":
            raise ValueError("int8 decode weights run on the CPU only")
        self.model = model
        self.config = config
        self.backbone = model.model
        self.num_layers = config.num_hidden_layers
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        self.scaling = self.arch.scaling
        self.sliding_window = self.arch.sliding_window
        # heavy: torch / transformers load only when a model is built or run
        from transformers.activations import ACT2FN

        self.act = ACT2FN[self.arch.activation]
        layers = list(self.backbone.layers[: self.num_layers])
        self.norms = [layer_norms(layer, self.arch) for layer in layers]
        self.decode_weights = decode_weights
        self.projections = [PackedProjections(layer, decode_weights) if packed else ModuleProjections(layer)
                            for layer in layers]
        self._decode = False
        self.decode_max_tokens = {"int8": INT8_MAX_TOKENS, "float16": HALF_MAX_TOKENS}.get(decode_weights, 0)
        self.head_decode = None
        if decode_weights != "model":
            head = model.lm_head
            self.head_decode = _decode_copy(head.weight, getattr(head, "bias", None), decode_weights)

    @property
    def device(self) -> torch.device:
        """Device of the weights."""
        return self.model.device

    @property
    def dtype(self) -> torch.dtype:
        """Dtype of the hidden states."""
        return self.backbone.embed_tokens.weight.dtype

    # ------------------------------------------------------------------ pieces

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        """[batch, n] token ids -> [batch, n, d] embeddings (scaled where the family scales them)."""
        return self.backbone.embed_tokens(ids.to(self.device))

    def rotary(self, hidden: torch.Tensor, positions: torch.Tensor) -> dict:
        """cos, sin [1, n, head_dim] of the tokens' original positions, per layer type."""
        if self.arch.rotary_by_type:
            return {t: self.backbone.rotary_emb(hidden, positions[None], t) for t in set(self.arch.layer_types)}
        cos_sin = self.backbone.rotary_emb(hidden, position_ids=positions[None])
        return {t: cos_sin for t in set(self.arch.layer_types)}

    def logits(self, hidden: torch.Tensor, token_ids: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Final norm + LM head of [..., d] hidden states; only the `token_ids` columns when given."""
        normed = self._norm(self.backbone.norm, hidden)
        head = self.model.lm_head
        if token_ids is None:
            if self._decode and self.head_decode is not None:
                out = self.projections[0].decode_linear(normed, self.head_decode)
            else:
                out = head(normed)
        else:
            weight = head.weight.index_select(0, token_ids.to(head.weight.device))
            bias = head.bias.index_select(0, token_ids) if getattr(head, "bias", None) is not None else None
            out = F.linear(normed, weight, bias)
        cap = self.arch.final_softcap
        return out if cap is None else torch.tanh(out / cap) * cap

    def _norm(self, module, x: torch.Tensor) -> torch.Tensor:
        eps = getattr(module, "variance_epsilon", None) or module.eps
        if self.arch.norm_offset:
            # Gemma: normalise and scale by (1 + weight) in float32, then cast back
            scale = module.weight.float() + self.arch.norm_offset
            return (F.rms_norm(x.float(), (x.shape[-1],), eps=eps) * scale).to(x.dtype)
        # transformers' RMSNorm: normalise in float32, cast back, then scale. In float32 that is one fused
        # operator with the weight (the same values; a decode step runs 61 of them).
        if x.dtype == torch.float32 and module.weight.dtype == torch.float32:
            return F.rms_norm(x, (x.shape[-1],), module.weight, eps=eps)
        normed = F.rms_norm(x.float(), (x.shape[-1],), eps=eps)
        return module.weight * normed.to(x.dtype)

    @staticmethod
    def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        # x [b, n, heads, d]; cos / sin [1, n, d]
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * cos[:, :, None] + rotated * sin[:, :, None]

    def _qkv(self, idx: int, hidden: torch.Tensor, cos_sin) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Queries, keys and values [b, heads, q, d] of `hidden` [b, q, d] at layer `idx` (RoPE applied)."""
        proj, norms = self.projections[idx], self.norms[idx]
        b, q, _ = hidden.shape
        nh, nkv, hd = self.num_heads, self.num_kv_heads, self.head_dim
        qkv = proj.qkv(self._norm(norms.pre_attn, hidden)).view(b, q, nh + 2 * nkv, hd)
        qk = qkv[:, :, : nh + nkv]
        if norms.q is not None:
            qk = torch.cat([self._norm(norms.q, qk[:, :, :nh]), self._norm(norms.k, qk[:, :, nh:])], dim=2)
        cos, sin = cos_sin
        qk = self._rope(qk, cos, sin)
        return qk[:, :, :nh].transpose(1, 2), qk[:, :, nh:].transpose(1, 2), qkv[:, :, nh + nkv:].transpose(1, 2)

    def _after_attention(self, idx: int, hidden: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
        """The residual stream after attention output `attn` [b, heads, q, d] and the MLP of layer `idx`."""
        proj, norms = self.projections[idx], self.norms[idx]
        b, _, q, _ = attn.shape
        out = proj.o(attn.transpose(1, 2).reshape(b, q, self.num_heads * self.head_dim))
        if norms.post_attn is not None:
            out = self._norm(norms.post_attn, out)
        hidden = hidden + out
        gate_up = proj.gate_up(self._norm(norms.pre_mlp, hidden))
        inter = gate_up.shape[-1] // 2
        out = proj.down(self.act(gate_up[..., :inter]) * gate_up[..., inter:])
        if norms.post_mlp is not None:
            out = self._norm(norms.post_mlp, out)
        return hidden + out

    @staticmethod
    def _positions(cache: Optional[KVCache], idx: int, past: int, q: int, device) -> torch.Tensor:
        """The original positions of `q` new tokens placed right after what `cache` holds at layer `idx`."""
        first = int(cache.key_positions(idx)[-1]) + 1 if past else 0
        return torch.arange(first, first + q, device=device)

    def _key_positions(self, idx: int, cache: Optional[KVCache], past: int,
                       positions: torch.Tensor) -> Optional[torch.Tensor]:
        """The keys' original positions (cached, then new) where layer `idx` slides a window; None elsewhere (the
        other layers never read them: no work per decode step)."""
        if not self.arch.sliding(idx):
            return None
        return torch.cat([cache.key_positions(idx), positions]) if past else positions

    def _window(self, queries: torch.Tensor, keys: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
        """The boolean [1, 1, q, kv] mask of the keys each query reaches through the sliding window (causal, less
        than the window back, by original positions); None without a window or where every causal key is in it."""
        if keys is None or int(queries.max()) - int(keys.min()) < self.sliding_window:
            return None
        back = queries[:, None] - keys[None, :]
        return ((back >= 0) & (back < self.sliding_window))[None, None]

    def layer(self, idx: int, hidden: torch.Tensor, cos_sin, cache: Optional[KVCache] = None,
              mask: Optional[torch.Tensor] = None, store: bool = True,
              valid: Optional[torch.Tensor] = None, positions: Optional[torch.Tensor] = None) -> torch.Tensor:
        """One decoder layer. `mask`: additive or boolean [b|1, 1, q, kv] attention mask; None = causal.

        `valid` [b, q] marks which new tokens may be attended to as keys (padding of a batch of candidates);
        `positions` [q] are the new tokens' original positions (default: right after the cache's).
        """
        b, q, _ = hidden.shape
        past = cache.seq_length(idx) if cache is not None else 0
        if positions is None:
            positions = self._positions(cache, idx, past, q, hidden.device)
        query, keys, values = self._qkv(idx, hidden, cos_sin)
        key_positions = self._key_positions(idx, cache, past, positions)     # before this layer's append
        if cache is not None:
            if store:
                keys, values = cache.append(idx, keys, values, positions)
            elif past:
                past_k, past_v = cache.view(idx)
                keys = torch.cat([past_k.expand(b, -1, -1, -1), keys], dim=2)
                values = torch.cat([past_v.expand(b, -1, -1, -1), values], dim=2)
        causal = False
        if mask is None and (q > 1 or valid is not None):
            if past or valid is not None:
                mask = torch.ones(q, past + q, dtype=torch.bool, device=hidden.device).tril(past)[None, None]
                if valid is not None:
                    keys_ok = torch.ones(b, 1, 1, past + q, dtype=torch.bool, device=hidden.device)
                    keys_ok[:, 0, 0, past:] = valid
                    mask = mask & keys_ok
            else:
                causal = True
        window = self._window(positions, key_positions)
        if window is not None:
            causal = False
            if mask is None:
                mask = window
            elif mask.dtype == torch.bool:
                mask = mask & window
            else:
                mask = mask.masked_fill(~window, float("-inf"))
        attn = F.scaled_dot_product_attention(query, keys, values, attn_mask=mask, is_causal=causal,
                                              scale=self.scaling, enable_gqa=self.num_kv_heads != self.num_heads)
        return self._after_attention(idx, hidden, attn)

    def layer_chunked(self, idx: int, hidden: torch.Tensor, cos_sin, cache: Optional[KVCache], store: bool,
                      should_abort: Callable[[], bool], chunk: int = 0,
                      positions: Optional[torch.Tensor] = None) -> torch.Tensor:
        """One causal decoder layer over a long [1, q, d] prompt in chunks of `chunk` (CHUNK_TOKENS) tokens.

        The same computation as `layer` without a mask, split so `should_abort()` is checked between chunks
        (CallAborted): a deadline or a cancel stops a call within one chunk's work whatever the context's length.
        """
        chunk = chunk or CHUNK_TOKENS
        b, q, _ = hidden.shape
        cos, sin = cos_sin
        spans = [(s, min(s + chunk, q)) for s in range(0, q, chunk)]
        past = cache.seq_length(idx) if cache is not None else 0
        if positions is None:
            positions = self._positions(cache, idx, past, q, hidden.device)
        key_positions = self._key_positions(idx, cache, past, positions)

        def check(where: str) -> None:
            if should_abort():
                raise CallAborted(f"stopped in layer {idx} ({where})")

        queries, keys, values = [], [], []
        for s, e in spans:
            check("projections")
            query, key, value = self._qkv(idx, hidden[:, s:e], (cos[:, s:e], sin[:, s:e]))
            queries.append(query)
            keys.append(key)
            values.append(value)
        new_k, new_v = torch.cat(keys, dim=2), torch.cat(values, dim=2)
        if cache is not None and store:
            all_k, all_v = cache.append(idx, new_k, new_v, positions)
        elif cache is not None and past:
            past_k, past_v = cache.view(idx)
            all_k, all_v = torch.cat([past_k, new_k], dim=2), torch.cat([past_v, new_v], dim=2)
        else:
            all_k, all_v = new_k, new_v
        out = []
        for (s, e), query in zip(spans, queries, strict=True):
            check("attention")
            mask = torch.ones(e - s, past + e, dtype=torch.bool, device=hidden.device).tril(past + s)[None, None]
            window = None if key_positions is None else self._window(positions[s:e], key_positions[: past + e])
            if window is not None:
                mask = mask & window
            attn = F.scaled_dot_product_attention(query, all_k[:, :, : past + e], all_v[:, :, : past + e],
                                                  attn_mask=mask, scale=self.scaling,
                                                  enable_gqa=self.num_kv_heads != self.num_heads)
            out.append(self._after_attention(idx, hidden[:, s:e], attn))
        return torch.cat(out, dim=1)

    # ------------------------------------------------------------------ the loop

    def forward(self, hidden: torch.Tensor, positions: torch.Tensor, cache: Optional[KVCache] = None, *,
                start: int = 0, stop: Optional[int] = None, select: Optional[Selection] = None,
                key_bias: Optional[KeyBias] = None, mask: Optional[torch.Tensor] = None,
                should_abort: Optional[Callable[[], bool]] = None, store: bool = True,
                valid: Optional[torch.Tensor] = None) -> ForwardOut:
        """Run layers [start, stop) on `hidden` [batch, n, d] whose tokens sit at original `positions` [n].

        `select(idx, hidden[0], positions)` may return the indices of the tokens
        layer idx and every later layer keep (pruning; rotary embeddings
        follow the kept tokens' original positions, causality the compacted
        order). `key_bias(idx, hidden)` may return an additive [n] key bias
        that applies from that layer on (soft pruning; needs `mask`).
        `should_abort()` is checked before every layer and, in a layer over more than CHUNK_TOKENS
        tokens, between chunks of them; true raises CallAborted.
        With `cache` each layer appends its keys / values there (or, with
        `store=False`, only attends to them); `valid` [batch, n] marks padding
        tokens no query may attend to.
        """
        stop = self.num_layers if stop is None else stop
        self._set_decode(hidden.shape[0] * hidden.shape[1])
        cos_sin = self.rotary(hidden, positions)
        bias = None
        for idx in range(start, stop):
            if should_abort is not None and should_abort():
                raise CallAborted(f"stopped before layer {idx}")
            if select is not None:
                keep = select(idx, hidden[0], positions)
                if keep is not None:
                    hidden, positions = hidden[:, keep], positions[keep]
                    cos_sin = self.rotary(hidden, positions)
                    self._set_decode(hidden.shape[0] * hidden.shape[1])
            if key_bias is not None:
                extra = key_bias(idx, hidden)
                if extra is not None:
                    bias = extra if bias is None else bias + extra
            layer_mask = mask if bias is None else mask + bias[None, None, None, :]
            rope = cos_sin[self.arch.layer_types[idx]]
            if should_abort is not None and layer_mask is None and valid is None and hidden.shape[1] > CHUNK_TOKENS \
                    and not torch.is_grad_enabled():
                hidden = self.layer_chunked(idx, hidden, rope, cache, store, should_abort, positions=positions)
            else:
                hidden = self.layer(idx, hidden, rope, cache, layer_mask, store, valid, positions)
        return ForwardOut(hidden, positions)

    def _set_decode(self, new_tokens: int) -> None:
        use = new_tokens <= self.decode_max_tokens
        if use != self._decode:
            for proj in self.projections:
                proj.use_decode = use
            self._decode = use

    def extend(self, cache: KVCache, ids: torch.Tensor, start_pos: int, valid: Optional[torch.Tensor] = None,
               last_only: bool = False, token_ids: Optional[torch.Tensor] = None, store: bool = True,
               should_abort: Optional[Callable[[], bool]] = None) -> torch.Tensor:
        """Run [batch, q] new tokens after everything in `cache`; logits [batch, q | 1, vocab | len(token_ids)].

        `valid` [batch, q] marks padding keys of the new tokens that no query may attend to; `should_abort()` is
        checked before every layer (true raises CallAborted).
        """
        q = ids.shape[1]
        positions = torch.arange(start_pos, start_pos + q, device=self.device)
        hidden = self.forward(self.embed(ids), positions, cache, store=store, valid=valid,
                              should_abort=should_abort).hidden
        if last_only:  # the vocabulary projection is a fifth of a token's cost: skip it where no one reads it
            hidden = hidden[:, -1:]
        return self.logits(hidden, token_ids)
