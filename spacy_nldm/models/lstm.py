"""A bidirectional LSTM over a batch of docs whose output for a doc does not depend on the batch.

spaCy's ``spacy.TorchBiLSTMEncoder.v1`` (thinc's ``PyTorchLSTM``) runs ``torch.nn.LSTM`` on a padded
batch: the backward direction of a short doc starts on the padding up to the batch's longest doc,
so a doc's vectors change with its neighbours. :func:`packed_lstm` packs the batch instead
(``torch.nn.utils.rnn.pack_padded_sequence``): each direction reads exactly the doc's own tokens.
Empty docs are left out of the LSTM and get (0, nO) outputs; a batch of empty docs never reaches it.
"""
from typing import List

import torch
from thinc.api import ArgsKwargs, Model, torch2xp, xp2torch
from thinc.types import Floats2d

from .shim import torch_layer, torch_output_to_array


class PackedLSTM(torch.nn.LSTM):
    """``torch.nn.LSTM`` (same parameters, so the same state dict) on a padded (T, B, nI) batch with
    its lengths: packed before the LSTM, padded again (with zeros) after it."""

    def forward(self, X: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        packed = torch.nn.utils.rnn.pack_padded_sequence(X, lengths, enforce_sorted=False)
        Y, _ = super().forward(packed)
        Y, _ = torch.nn.utils.rnn.pad_packed_sequence(Y, total_length=X.shape[0])
        return Y


def packed_lstm(nO: int, nI: int, *, depth: int = 1, dropout: float = 0.0) -> Model:
    """Model[List[Floats2d], List[Floats2d]]: a bidirectional LSTM of output width ``nO`` (``nO // 2`` per
    direction, so ``nO`` is even) over each sequence on its own (packed batch)."""
    if nO % 2:
        raise ValueError(f"spacy-nldm: a BiLSTM's width must be even (half of it a direction), not {nO}")
    module = PackedLSTM(nI, nO // 2, depth, bidirectional=True, dropout=dropout)
    lstm = torch_layer(module, _padded_to_torch, torch_output_to_array)  # weight averages reach it (see .shim)
    lstm.set_dim("nO", nO)
    lstm.set_dim("nI", nI)
    return Model("packed_lstm", _forward, layers=[lstm], dims={"nO": nO, "nI": nI})


def _forward(model: Model, Xs: List[Floats2d], is_train: bool):
    ops = model.ops
    nO = model.get_dim("nO")
    shapes = [x.shape for x in Xs]
    keep = [i for i, x in enumerate(Xs) if x.shape[0] > 0]
    if not keep:  # nothing to encode: (0, nO) per doc, and no gradient to pass on
        return [ops.alloc2f(0, nO) for _ in Xs], lambda dYs: [ops.alloc2f(*shape) for shape in shapes]
    nI, width = model.get_dim("nI"), Xs[keep[0]].shape[1]
    if width != nI:
        raise ValueError(
            f"the BiLSTM encoder reads vectors of width {nI} but its input has width {width}: "
            "in spacy.Tok2Vec.v2, give the embed layer the encoder's width (embed.width = encode.width)")
    lengths = [Xs[i].shape[0] for i in keep]
    X = ops.alloc3f(max(lengths), len(keep), width)
    for b, i in enumerate(keep):
        X[: lengths[b], b] = Xs[i]
    Y, backprop_lstm = model.layers[0]((X, lengths), is_train)
    Ys = [ops.alloc2f(0, nO) for _ in Xs]
    for b, i in enumerate(keep):
        Ys[i] = Y[: lengths[b], b]

    def backprop(dYs: List[Floats2d]) -> List[Floats2d]:
        dY = ops.alloc3f(*Y.shape)
        for b, i in enumerate(keep):
            dY[: lengths[b], b] = dYs[i]
        dX = backprop_lstm(dY)
        dXs = [ops.alloc2f(*shape) for shape in shapes]
        for b, i in enumerate(keep):
            dXs[i] = dX[: lengths[b], b]
        return dXs

    return Ys, backprop


def _padded_to_torch(model: Model, inputs, is_train: bool):
    X, lengths = inputs
    device = model.shims[0].device

    def backprop(d_inputs: ArgsKwargs):
        return torch2xp(d_inputs.args[0])

    args = (xp2torch(X, requires_grad=is_train, device=device), torch.tensor(lengths, dtype=torch.int64))
    return ArgsKwargs(args=args, kwargs={}), backprop
