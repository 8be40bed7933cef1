"""Vocabulary gradients added in place: the same sums as autograd's, without its copies."""

import copy
from contextlib import nullcontext

import pytest
import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile
from transformers import Qwen2Config, Qwen2ForCausalLM

from coplay.train.vocab_grads import (
    IN_PLACE_FROM,
    _index_add,
    _index_put,
    grads_in_place,
    vocab_modules,
    worth_it,
)


def _model(tied=True, vocab=300):
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=tied,
        pad_token_id=0,
    )
    return Qwen2ForCausalLM(config)


def _batches(vocab=300):
    generator = torch.Generator().manual_seed(1)
    batches = [torch.randint(1, vocab, (3, 7), generator=generator) for _ in range(2)]
    for ids in batches:
        ids[0, :3] = 0  # left padding: the padding row gets no gradient
    return batches


def _backward(model, ids, in_place):
    with grads_in_place(model) if in_place else nullcontext():
        logits = model(input_ids=ids, logits_to_keep=2).logits
        (logits.log_softmax(-1)[..., :5] * torch.arange(5.0)).sum().backward()


@pytest.mark.parametrize("tied", [True, False])
def test_accumulated_gradients_equal_autograds(tied):
    plain, fast = _model(tied), _model(tied)
    for ids in _batches():  # two micro-batches: the first makes .grad, the second adds
        _backward(plain, ids, in_place=False)
        _backward(fast, ids, in_place=True)
    for (name, a), b in zip(plain.named_parameters(), fast.parameters(), strict=True):
        assert torch.allclose(a.grad, b.grad, atol=1e-7, rtol=1e-5), name
    embedding = fast.get_input_embeddings().weight.grad
    assert embedding.abs().sum() > 0
    if not tied:  # tied, the output projection writes the padding row too
        assert embedding[0].abs().max() == 0


def test_the_gpu_way_of_adding_rows_sums_repeated_rows_alike():
    # Only a GPU takes index_put_ (index_add_ races there); its sums are checked here.
    generator = torch.Generator().manual_seed(2)
    rows = torch.tensor([3, 0, 3, 7, 3, 0])
    g = torch.randn(6, 5, generator=generator)
    start = torch.randn(8, 5, generator=generator)
    put, add = _index_put(start.clone(), rows, g), _index_add(start.clone(), rows, g)
    assert torch.allclose(put, add, atol=1e-6)
    assert torch.allclose(put[3], start[3] + g[[0, 2, 4]].sum(0), atol=1e-6)


def test_no_vocabulary_sized_tensor_is_built_in_backward():
    vocab = 4096
    model = _model(vocab=vocab)
    ids = _batches(vocab)
    weight = model.get_input_embeddings().weight
    size = weight.numel() * weight.element_size()
    built = {}
    for in_place in (False, True):
        model.zero_grad(set_to_none=True)
        _backward(model, ids[0], in_place)  # .grad exists: what follows only adds
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            _backward(model, ids[1], in_place)
        built[in_place] = {e.name for e in prof.events() if e.cpu_memory_usage >= size}
    assert "aten::embedding_dense_backward" in built[False]  # the check sees the copies
    assert built[True] == set()


def test_outside_the_block_and_without_a_graph_the_modules_run_as_they_are():
    model = _model()
    ids = _batches()[0]
    modules = vocab_modules(model)
    assert [type(m) for m in modules] == [nn.Embedding, nn.Linear]
    with torch.no_grad():
        expected = model(input_ids=ids).logits
        with grads_in_place(model):
            assert torch.equal(model(input_ids=ids).logits, expected)
    assert all("forward" not in vars(m) for m in modules)
    with pytest.raises(RuntimeError), grads_in_place(model):
        raise RuntimeError  # restored on the way out of an error too
    assert all("forward" not in vars(m) for m in modules)


def test_a_frozen_vocabulary_trains_the_rest_alike():
    plain, fast = _model(), _model()
    for model in (plain, fast):
        model.get_input_embeddings().weight.requires_grad_(False)
    for ids in _batches():
        _backward(plain, ids, in_place=False)
        _backward(fast, ids, in_place=True)
    assert fast.get_input_embeddings().weight.grad is None
    for a, b in zip(plain.parameters(), fast.parameters(), strict=True):
        assert (a.grad is None) == (b.grad is None)
        assert a.grad is None or torch.allclose(a.grad, b.grad, atol=1e-7, rtol=1e-5)


def _backward_node(module, x):
    return type(module(x).grad_fn).__name__


def test_nested_blocks_and_copies_made_inside_one_keep_to_their_own():
    model = _model()
    embedding, ids = model.get_input_embeddings(), _batches()[0]
    with grads_in_place(model):
        with grads_in_place(model):
            pass
        assert _backward_node(embedding, ids) == "_LookupBackward"  # still the outer's
        twin = copy.deepcopy(model)  # copies the instance's forward with it
    assert _backward_node(embedding, ids) == "EmbeddingBackward0"
    twin_embedding = twin.get_input_embeddings()
    assert _backward_node(twin_embedding, ids) == "EmbeddingBackward0"
    with grads_in_place(twin):
        assert _backward_node(twin_embedding, ids) == "_LookupBackward"
    assert "forward" not in vars(twin_embedding)


def test_modules_of_another_shape_keep_their_own_backward():
    model = _model()
    model.model.embed_tokens = nn.Embedding(300, 32, sparse=True)
    assert [type(m) for m in vocab_modules(model)] == [nn.Linear]
    hooked = copy.deepcopy(_model())
    hooked.lm_head.forward = hooked.lm_head.forward  # a wrapper set on the instance
    assert [type(m) for m in vocab_modules(hooked)] == [nn.Embedding]
    assert vocab_modules(nn.Linear(2, 2)) == []

    class Unsaid(nn.Module):  # a model class that does not name its embedding
        def get_input_embeddings(self):
            raise NotImplementedError

        def get_output_embeddings(self):
            return nn.Linear(2, 3, bias=False)

    assert [type(m) for m in vocab_modules(Unsaid())] == [nn.Linear]


def test_worth_it_from_the_size_of_a_vocabulary_matrix():
    assert not worth_it(_model())
    rows = IN_PLACE_FROM // (32 * 4)
    big = _model(vocab=rows)
    assert worth_it(big)
    assert not worth_it(_model(vocab=rows - 1))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("tied", [True, False])
def test_on_a_gpu_the_sums_equal_autograds_and_repeat_bit_for_bit(tied):
    # The GPU adds embedding rows with an accumulating index_put_ (deterministic there,
    # unlike index_add_'s atomics): the same sums as autograd's, and the same bits twice.
    def grads(model, in_place):
        model.zero_grad(set_to_none=True)
        weights = torch.arange(5.0, device="cuda")
        for ids in batches:
            with grads_in_place(model) if in_place else nullcontext():
                logits = model(input_ids=ids, logits_to_keep=2).logits
                (logits.log_softmax(-1)[..., :5] * weights).sum().backward()
        return [p.grad.clone() for p in model.parameters()]

    batches = [ids.repeat(4, 3).cuda() for ids in _batches()]  # many repeated rows
    plain, fast = _model(tied).cuda(), _model(tied).cuda()
    want, got, again = grads(plain, False), grads(fast, True), grads(fast, True)
    for a, b, c in zip(want, got, again, strict=True):
        assert torch.allclose(a, b, atol=1e-6, rtol=1e-4)
        assert torch.equal(b, c)
