"""DecoderStack: the one layer loop equals transformers' forward; caches, decode weights, selections."""

from __future__ import annotations

import pytest
import torch

from erecap_planner.testing import KINDS, TINY_WINDOW, tiny
from erecap_planner.transformer import DecoderStack, KVCache, int8_available


def ids(n: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, 256, (1, n), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("packed", [True, False])
def test_forward_equals_transformers(kind, packed):
    model = tiny(kind)
    x = ids(50)
    with torch.no_grad():
        reference = model(x).logits[0]
        stack = DecoderStack(model, packed=packed)
        out = stack.forward(stack.embed(x), torch.arange(50))
        torch.testing.assert_close(stack.logits(out.hidden)[0], reference, atol=1e-5, rtol=0)
        # Packing re-points the modules' weights into the fused matrices: the model itself is unchanged.
        torch.testing.assert_close(model(x).logits[0], reference, atol=1e-6, rtol=0)


def test_a_windowed_mistral_attends_within_its_window_as_transformers_does():
    model = tiny("mistral", sliding_window=TINY_WINDOW)
    x = ids(50)
    with torch.no_grad():
        reference = model(x).logits[0]
        stack = DecoderStack(model)
        out = stack.forward(stack.embed(x), torch.arange(50))
        torch.testing.assert_close(stack.logits(out.hidden)[0], reference, atol=1e-5, rtol=0)
        unwindowed = tiny("mistral")(x).logits[0]
    assert not torch.allclose(reference, unwindowed, atol=1e-3)         # the window changes what it computes


@pytest.mark.parametrize("kind", ["gemma3", "mistral"])
def test_sliding_windows_follow_original_positions_through_pruning_and_the_cache(kind):
    # A pruned, cached, chunked forward equals the same selection run in one piece without a cache: the window is
    # counted in original positions, which the cache keeps for every layer.
    import erecap_planner.transformer as transformer

    model = tiny(kind, **({"sliding_window": TINY_WINDOW} if kind == "mistral" else {}))
    x = ids(60)
    stack = DecoderStack(model)

    def every_other(idx, hidden, positions):
        return torch.arange(0, hidden.shape[0], 2) if idx == 2 else None

    with torch.no_grad():
        whole = stack.logits(stack.forward(stack.embed(x), torch.arange(60), select=every_other).hidden)[0]
        cache = KVCache(stack.num_layers)
        old, transformer.CHUNK_TOKENS = transformer.CHUNK_TOKENS, 8
        try:
            out = stack.forward(stack.embed(x[:, :59]), torch.arange(59), cache, select=every_other,
                                should_abort=lambda: False)
        finally:
            transformer.CHUNK_TOKENS = old
        assert cache.key_positions(3).tolist() == list(range(0, 59, 2))
        last = stack.extend(cache, x[:, 59:], 59)[0, -1]
    assert out.positions.tolist() == list(range(0, 59, 2))
    torch.testing.assert_close(stack.logits(out.hidden)[0], whole[:30], atol=1e-5, rtol=0)   # positions 0 .. 58
    assert torch.isfinite(last).all()


def test_features_the_loop_does_not_compute_are_refused_by_name():
    from transformers import Gemma3TextConfig

    from erecap_planner.architecture import architecture

    with pytest.raises(ValueError, match="soft-capping"):
        architecture(Gemma3TextConfig(attn_logit_softcapping=50.0))
    with pytest.raises(ValueError, match="bidirectional"):
        architecture(Gemma3TextConfig(use_bidirectional_attention=True))
    config = Gemma3TextConfig(num_hidden_layers=6, sliding_window=TINY_WINDOW)
    arch = architecture(config)
    assert arch.norm_offset == 1.0 and arch.qk_norm and arch.sandwich and arch.activation == "gelu_pytorch_tanh"
    assert [arch.sliding(i) for i in range(6)] == [True] * 5 + [False]


@pytest.mark.parametrize("kind", KINDS)
def test_cached_extension_equals_one_forward(kind):
    model = tiny(kind)
    x = ids(40)
    stack = DecoderStack(model)
    with torch.no_grad():
        full = stack.logits(stack.forward(stack.embed(x), torch.arange(40)).hidden)[0]
        cache = KVCache(stack.num_layers, reserve=0)  # no spare room: every extension grows the buffers
        stack.forward(stack.embed(x[:, :25]), torch.arange(25), cache)
        step = stack.extend(cache, x[:, 25:33], 25)[0]          # several tokens at once (explicit mask)
        one = stack.extend(cache, x[:, 33:34], 33)[0]           # one token (no mask)
        rest = stack.extend(cache, x[:, 34:], 34)[0]
    torch.testing.assert_close(torch.cat([step, one, rest]), full[25:], atol=1e-5, rtol=0)
    assert [cache.seq_length(i) for i in range(stack.num_layers)] == [40] * stack.num_layers


def test_extension_without_storing_leaves_the_cache_and_matches():
    model = tiny("llama")
    x = ids(30)
    stack = DecoderStack(model)
    with torch.no_grad():
        cache = KVCache(stack.num_layers)
        stack.forward(stack.embed(x[:, :20]), torch.arange(20), cache)
        batch = torch.cat([x[:, 20:], x[:, 20:].flip(1)])  # two candidates of 10 tokens after the same prefix
        scratch = stack.extend(cache, batch, 20, store=False)
        assert cache.seq_length(0) == 20
        stored = stack.extend(cache, x[:, 20:], 20)
    torch.testing.assert_close(scratch[:1], stored, atol=1e-5, rtol=0)


def test_restricted_logits_are_the_full_logits_columns():
    model = tiny("qwen2")
    stack = DecoderStack(model)
    with torch.no_grad():
        hidden = stack.forward(stack.embed(ids(12)), torch.arange(12)).hidden[0, -1]
        wanted = torch.tensor([5, 17, 200])
        torch.testing.assert_close(stack.logits(hidden, wanted), stack.logits(hidden)[wanted], atol=1e-6, rtol=0)


@pytest.mark.parametrize("weights", ["float16", "int8"])
def test_decode_weights_serve_decode_sized_forwards_only(weights):
    if weights == "int8" and not int8_available()[0]:
        pytest.skip(int8_available()[1])
    model = tiny("llama")
    x = ids(60)
    exact, small = DecoderStack(model), DecoderStack(model, decode_weights=weights)
    with torch.no_grad():
        caches = [KVCache(exact.num_layers), KVCache(small.num_layers)]
        prefill = [s.logits(s.forward(s.embed(x[:, :56]), torch.arange(56), c).hidden[0, -1])
                   for s, c in zip((exact, small), caches, strict=True)]
        torch.testing.assert_close(prefill[1], prefill[0], atol=1e-6, rtol=0)  # the prefill keeps the model's weights
        assert small.decode_max_tokens >= 1
        steps = [s.extend(c, x[:, 56:57], 56)[0, -1] for s, c in zip((exact, small), caches, strict=True)]
    diff = (steps[1] - steps[0]).abs().max() / steps[0].abs().max()
    assert 0 < diff < (2e-3 if weights == "float16" else 0.2)  # a smaller copy was read, and it is close


def test_selection_prunes_tokens_and_rotary_follows_their_positions():
    model = tiny("llama")
    x = ids(30)
    stack = DecoderStack(model)
    keep = torch.tensor([0, 1, 2, 10, 20, 29])

    def select(idx, hidden, positions):
        return keep if idx == 0 else None

    with torch.no_grad():
        out = stack.forward(stack.embed(x), torch.arange(30), select=select)
        # Selecting before layer 0 is running the model on the kept tokens at their original positions.
        direct = stack.forward(stack.embed(x[:, keep]), keep)
    assert out.positions.tolist() == keep.tolist()
    torch.testing.assert_close(out.hidden, direct.hidden, atol=1e-6, rtol=0)


def test_abort_is_checked_before_every_layer():
    from erecap_planner.transformer import CallAborted

    model = tiny("llama")
    stack = DecoderStack(model)
    calls = []

    def abort():
        calls.append(1)
        return len(calls) > 3

    with torch.no_grad(), pytest.raises(CallAborted, match="layer 3"):
        stack.forward(stack.embed(ids(10)), torch.arange(10), should_abort=abort)


def test_unknown_decode_weights_are_refused():
    with pytest.raises(ValueError, match="decode_weights"):
        DecoderStack(tiny("llama"), decode_weights="int4")


def test_a_long_prompt_runs_in_chunks_equal_to_one_pass_and_stops_inside_a_layer():
    from erecap_planner.transformer import CHUNK_TOKENS, CallAborted

    model = tiny("llama")
    stack = DecoderStack(model)
    ids = torch.randint(0, 256, (1, 2 * CHUNK_TOKENS + 100), generator=torch.Generator().manual_seed(1))
    positions = torch.arange(ids.shape[1])
    with torch.inference_mode():
        whole = stack.forward(stack.embed(ids), positions).hidden
        checks = []
        chunked = stack.forward(stack.embed(ids), positions, should_abort=lambda: checks.append(1) and False).hidden
        assert torch.allclose(whole, chunked, atol=1e-4, rtol=1e-4)
        assert len(checks) > 3 * stack.num_layers  # before every layer and between its chunks
        calls = iter(range(10**6))
        with pytest.raises(CallAborted, match="in layer 0"):  # the third check is inside the first layer
            stack.forward(stack.embed(ids), positions, should_abort=lambda: next(calls) >= 2)
