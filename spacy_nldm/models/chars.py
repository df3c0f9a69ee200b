"""A character CNN over each token's text (Ma & Hovy 2016's word representation), as a Thinc layer.

A token's characters (its exact text, case kept) become ids: 1 and 2 mark the word's start and end, and a
character is ``3 + ord(c) % (rows - 3)`` (hashed, so no character vocabulary to build or save). Tokens
longer than ``max_chars`` keep their first and last ``max_chars // 2`` characters. The ids are embedded
(``char_dim``), convolved (``nO`` filters of width ``window``, zero padding) and max-pooled over the
word: one (nO,) vector per token, whatever the token's length, and the same vector whatever batch it is in.
"""
from typing import List

import numpy
import torch
from spacy.tokens import Doc
from thinc.api import ArgsKwargs, Model
from thinc.types import Floats2d, Ints2d

from .shim import torch_layer, torch_output_to_array

PAD, START, END = 0, 1, 2


class CharCNN(torch.nn.Module):
    """(N, L) int64 character ids, 0 = padding -> (N, nO): embedding, dropout, Conv1d, max over the
    non-padding positions."""

    def __init__(self, rows: int, char_dim: int, nO: int, window: int, dropout: float):
        super().__init__()
        self.embed = torch.nn.Embedding(rows, char_dim, padding_idx=PAD)
        self.dropout = torch.nn.Dropout(dropout)
        self.conv = torch.nn.Conv1d(char_dim, nO, window, padding=window // 2)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        X = self.dropout(self.embed(ids)).transpose(1, 2)  # (N, char_dim, L)
        H = self.conv(X)  # (N, nO, L)
        H = H.masked_fill((ids == PAD).unsqueeze(1), float("-inf"))
        return H.max(dim=2).values


def char_ids(words: List[str], rows: int, max_chars: int) -> Ints2d:
    """(len(words), L) ids, L = 2 + the longest (clipped) word; 0 pads the shorter words."""
    half = max_chars // 2
    clipped = [w if len(w) <= max_chars else w[:half] + w[-half:] for w in words]
    ids = numpy.zeros((len(words), 2 + max((len(w) for w in clipped), default=0)), dtype="int64")
    for i, word in enumerate(clipped):
        ids[i, 0] = START
        ids[i, 1 : 1 + len(word)] = [3 + ord(c) % (rows - 3) for c in word]
        ids[i, 1 + len(word)] = END
    return ids


def char_cnn(nO: int, *, char_dim: int = 30, window: int = 3, rows: int = 1000, max_chars: int = 20,
             dropout: float = 0.0) -> Model[List[Doc], List[Floats2d]]:
    """Model[List[Doc], List[Floats2d]]: a (len(doc), nO) array of character-CNN vectors per doc."""
    if rows < 4 or window < 1 or window % 2 == 0 or max_chars < 2:
        raise ValueError(f"char CNN: rows >= 4, an odd window and max_chars >= 2 are needed "
                         f"(got rows={rows}, window={window}, max_chars={max_chars})")
    module = CharCNN(rows, char_dim, nO, window, dropout)
    cnn = torch_layer(module, _ids_to_torch, torch_output_to_array)  # weight averages reach it (see .shim)
    return Model("char_cnn", _forward, layers=[cnn], dims={"nO": nO},
                 attrs={"rows": rows, "max_chars": max_chars})


def _forward(model: Model, docs: List[Doc], is_train: bool):
    ops = model.ops
    nO = model.get_dim("nO")
    lengths = [len(doc) for doc in docs]
    if sum(lengths) == 0:
        return [ops.alloc2f(0, nO) for _ in docs], lambda dYs: []
    words = [token.text for doc in docs for token in doc]
    ids = char_ids(words, model.attrs["rows"], model.attrs["max_chars"])
    Y, backprop_cnn = model.layers[0](ids, is_train)
    Ys = ops.unflatten(Y, ops.asarray1i(lengths))

    def backprop(dYs: List[Floats2d]) -> List[Doc]:
        backprop_cnn(ops.flatten(dYs))
        return []

    return Ys, backprop


def _ids_to_torch(model: Model, ids: Ints2d, is_train: bool):
    device = model.shims[0].device
    return ArgsKwargs(args=(torch.from_numpy(ids).to(device),), kwargs={}), lambda d_inputs: None
