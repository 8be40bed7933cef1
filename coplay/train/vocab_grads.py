"""Gradients of the vocabulary matrices added straight into their ``.grad``.

A language model's largest tensors are its vocabulary matrices: the input embedding
and the output projection (one tensor when they are tied), 151,936 x 512 floats =
297 MiB in a 0.1B Qwen2. Autograd builds each one's gradient as a new tensor of that
size and adds it to ``.grad`` afterwards: the projection's as soon as backward starts,
held until the embedding's arrives at its end when the two are tied. In a micro-batched
update of the 0.1B model those copies weighed more than the activations (about 600 MiB
against a 256 MiB budget, docs/results.md). Here the two modules' backward passes add
into ``.grad`` in place instead, the projection with one ``addmm_``, the embedding with
one ``index_add_`` (an accumulating ``index_put_`` on a GPU), and make no
vocabulary-sized tensor but the first ``.grad`` itself.

The sum is the same up to float rounding (the order of additions differs). It is made
for a plain ``loss.backward()`` run inside the block, as the learner's micro-steps are,
with the forward pass inside it too: hooks on the weights themselves
(``Tensor.register_hook``) do not see these contributions, ``torch.autograd.grad`` and
``backward(inputs=...)`` would still find them written into ``.grad``, and a second
derivative is refused. That is why this is a learner setting
(``optim.vocab_grads_in_place``) and not a change to the model. One thread at a time:
the block changes the modules, which every thread shares.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import torch
from torch import nn
from torch.autograd.function import once_differentiable
from torch.nn import functional as F

IN_PLACE_FROM = 32 * 2**20
"""Bytes of a vocabulary matrix from which its gradient is added in place by default:
an eighth of the default activation budget. Below it the copy is small next to the
activations, and the tiny models keep autograd's float rounding, which their reproduced
results were taken with."""

_ACTIVE: weakref.WeakSet[nn.Module] = weakref.WeakSet()
"""The modules inside a ``grads_in_place`` block now. A copy of one (``copy.deepcopy``
inside the block copies the instance's forward too) is not in it and runs its own."""


def _add_to_grad(weight: torch.Tensor, fresh, in_place) -> None:
    """``weight.grad = fresh()`` the first time, ``in_place(weight.grad)`` after."""
    with torch.no_grad():
        if weight.grad is None:
            weight.grad = fresh()
        else:
            in_place(weight.grad)


class _Project(torch.autograd.Function):
    """``x @ weight.T`` whose weight gradient is added into ``weight.grad``."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        return F.linear(x, weight)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: torch.Tensor):
        x, weight = ctx.saved_tensors
        grad_x = grad @ weight.to(grad.dtype) if ctx.needs_input_grad[0] else None
        g = grad.reshape(-1, grad.shape[-1]).to(weight.dtype)  # (positions, vocab)
        h = x.reshape(-1, x.shape[-1]).to(weight.dtype)  # (positions, hidden)
        _add_to_grad(weight, lambda: g.T @ h, lambda acc: acc.addmm_(g.T, h))
        return grad_x, None


class _Lookup(torch.autograd.Function):
    """``weight[ids]`` whose gradient is added into ``weight.grad`` row by row (the
    padding row, as ``nn.Embedding`` defines it, gets none)."""

    @staticmethod
    def forward(ctx, ids: torch.Tensor, weight: torch.Tensor, padding_idx: int | None):
        ctx.save_for_backward(ids, weight)
        ctx.padding_idx = padding_idx
        return F.embedding(ids, weight, padding_idx)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: torch.Tensor):
        ids, weight = ctx.saved_tensors
        rows, g = ids.reshape(-1), grad.reshape(-1, grad.shape[-1]).to(weight.dtype)
        if ctx.padding_idx is not None:
            keep = rows != ctx.padding_idx
            rows, g = rows[keep], g[keep]
        _add_to_grad(
            weight,
            lambda: _add_rows(torch.zeros_like(weight), rows, g),
            lambda acc: _add_rows(acc, rows, g),
        )
        return None, None, None


def _add_rows(acc: torch.Tensor, rows: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """``acc[rows[i]] += g[i]`` in an order that does not change from run to run, as
    the embedding's own backward: ``index_add_`` races on a GPU (atomic adds) and an
    accumulating ``index_put_`` on a multi-threaded CPU, so each device gets the other."""
    add = _index_add if acc.device.type == "cpu" else _index_put
    return add(acc, rows, g)


def _index_add(acc: torch.Tensor, rows: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    return acc.index_add_(0, rows, g)


def _index_put(acc: torch.Tensor, rows: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    return acc.index_put_((rows,), g, accumulate=True)


def _trains(module: nn.Module) -> bool:
    return module in _ACTIVE and torch.is_grad_enabled() and module.weight.requires_grad


def _lookup(module: nn.Embedding, ids: torch.Tensor) -> torch.Tensor:
    if not _trains(module):
        return nn.Embedding.forward(module, ids)
    return _Lookup.apply(ids, module.weight, module.padding_idx)


def _project(module: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    if not _trains(module):
        return nn.Linear.forward(module, x)
    out = _Project.apply(x, module.weight)
    return out if module.bias is None else out + module.bias.to(out.dtype)


def _own_forward(module: nn.Module) -> bool:
    """Whether a forward is set on the instance that is not this module's (a hook
    library's wrapper, such as accelerate's device placement)."""
    forward = vars(module).get("forward")
    return forward is not None and getattr(forward, "__func__", None) not in (_lookup, _project)


def _get(model: nn.Module, name: str) -> nn.Module | None:
    getter = getattr(model, name, None)
    try:
        return getter() if getter is not None else None
    except NotImplementedError:  # a model class that does not say which module it is
        return None


def _plain_embedding(module) -> bool:
    # A subclass, a max-norm renormalisation, per-frequency scaling or sparse gradients
    # mean a backward of another shape: such modules keep their own.
    return (
        type(module) is nn.Embedding
        and module.max_norm is None
        and not module.scale_grad_by_freq
        and not module.sparse
    )


def vocab_modules(model: nn.Module) -> list[nn.Module]:
    """The model's input embedding and output projection that can add in place: plain
    ``nn.Embedding`` / ``nn.Linear`` modules with no other forward set on the instance."""
    found = []
    embedding = _get(model, "get_input_embeddings")
    if _plain_embedding(embedding) and not _own_forward(embedding):
        found.append(embedding)
    projection = _get(model, "get_output_embeddings")
    if type(projection) is nn.Linear and not _own_forward(projection):
        found.append(projection)
    return found


def worth_it(model: nn.Module) -> bool:
    """Whether a vocabulary matrix of ``model`` weighs ``IN_PLACE_FROM`` or more."""
    return any(
        m.weight.numel() * m.weight.element_size() >= IN_PLACE_FROM for m in vocab_modules(model)
    )


@contextmanager
def grads_in_place(model: nn.Module) -> Iterator[None]:
    """Within the block, passes through ``model``'s vocabulary modules that build a graph
    add their weight gradients into ``.grad`` in place (outside it, and under
    ``no_grad`` or for a frozen weight, the modules run as they are). A block inside
    another leaves the outer one's modules to it."""
    with ExitStack() as stack:
        for module in vocab_modules(model):
            if module in _ACTIVE:
                continue
            forward = _lookup if isinstance(module, nn.Embedding) else _project
            module.forward = forward.__get__(module)
            _ACTIVE.add(module)
            stack.callback(_ACTIVE.discard, module)
            stack.callback(vars(module).pop, "forward", None)
        yield
