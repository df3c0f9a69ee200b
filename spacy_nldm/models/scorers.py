"""Edge scorers of the paper (section 3.1) as PyTorch modules, kept factored.

A scorer maps token vectors ``h`` (..., nI) to factored scores ``F`` of shape (..., X, C, M):
``F[t, x, a, c]`` scores label ``c`` on token ``t`` given a context ``(x, a)``:

* ``x`` is a direction: for the NLDM 0 = head on the left (the root included), 1 = head on the
  right; a linear-chain CRF has the single direction "previous token";
* ``a`` is the head (or previous) label: ``a = 0`` is the root / start state, ``a = 1..M`` are the
  labels ``0..M-1``.

All scores depend on the dependent's vector only (``h_d``), so F is linear in the tokens and the
(S, N+1, N+1, M, M) arc tensor is built from it only where the structured algorithms need it
(:mod:`spacy_nldm.models.structure`).

Parameters whose shape depends on the input width or the number of labels are (re)created by
:meth:`Scorer.resize`; the old values are kept on the overlapping slice, so labels can be added
after training. :meth:`Scorer.load_state_dict` adapts the shapes to the saved state first, so a
model built before the labels were known deserialises.
"""
from typing import Dict, Tuple

import torch
from torch import nn

# A parameter's shape is a tuple of symbols: I input width, M labels, C = M + 1 contexts
# (root/start first), T label embedding size, R rank, X directions, or an int.
Shape = Tuple


class Scorer(nn.Module):
    """Base class: label embeddings ``t`` (C, T), row 0 is the root / start symbol."""

    shapes: Dict[str, Shape] = {"label_emb": ("C", "T")}
    #: parameters initialised at zero (the others get N(0, 1/fan_in)-style noise)
    zero_init: Tuple[str, ...] = ()

    def __init__(self, n_dirs: int, label_dim: int, rank: int, nI: int = 1, nO: int = 1):
        super().__init__()
        self.sizes = {"X": n_dirs, "T": label_dim, "R": rank, "I": 0, "M": 0}
        self.resize(nI, nO)

    @property
    def nI(self) -> int:
        return self.sizes["I"]

    @property
    def nO(self) -> int:
        return self.sizes["M"]

    def _shape(self, name: str) -> Tuple[int, ...]:
        sizes = dict(self.sizes, C=self.sizes["M"] + 1)
        return tuple(sizes[s] if isinstance(s, str) else s for s in self.shapes[name])

    def _init(self, name: str, shape: Tuple[int, ...]) -> torch.Tensor:
        if name in self.zero_init:
            return torch.zeros(shape)
        fan_in = 1 if name == "label_emb" else shape[-2]
        std = self.init_scale.get(name, 1.0) / max(1, fan_in) ** 0.5
        return torch.randn(shape) * std

    init_scale: Dict[str, float] = {}

    def resize(self, nI: int, nO: int, keep: bool = True) -> None:
        """(Re)create the parameters for input width nI and nO labels, keeping the old values on
        the overlapping slice (``keep=False``: all fresh)."""
        self.sizes.update(I=int(nI), M=int(nO))
        for name in self.shapes:
            shape = self._shape(name)
            old = getattr(self, name, None)
            if keep and old is not None and tuple(old.shape) == shape:
                continue
            new = self._init(name, shape)
            if old is not None:
                new = new.to(old.device)
            if old is not None and keep:
                overlap = tuple(slice(0, min(a, b)) for a, b in zip(old.shape, shape))
                new[overlap] = old.detach()[overlap].to(new.dtype)
            setattr(self, name, nn.Parameter(new))

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        """Adopt the saved shapes (labels and input width) before loading the values."""
        label_emb = state_dict.get("label_emb")
        if label_emb is not None:
            self.sizes["M"] = label_emb.shape[0] - 1
        self.sizes["I"] = self._input_width(state_dict)
        for name in self.shapes:
            if name in state_dict and getattr(self, name).shape != state_dict[name].shape:
                setattr(self, name, nn.Parameter(torch.empty_like(state_dict[name])))
        return super().load_state_dict(state_dict, strict=strict, assign=assign)

    def _input_width(self, state_dict) -> int:
        for name, shape in self.shapes.items():
            if "I" in shape and name in state_dict:
                return state_dict[name].shape[shape.index("I")]
        return self.sizes["I"]

    def labels(self) -> Tuple[torch.Tensor, torch.Tensor]:
        """(contexts (C, T), dependent labels (M, T)) label embeddings."""
        return self.label_emb, self.label_emb[1:]

    def forward(self, h: torch.Tensor) -> torch.Tensor:  # (..., nI) -> (..., X, C, M)
        raise NotImplementedError


class EmissionTransition(Scorer):
    """h_d W_e t_c + psi^dir[a, c]: emission plus a transition matrix per direction."""

    shapes = {"label_emb": ("C", "T"), "W_e": ("I", "T"), "psi": ("X", "C", "M")}
    zero_init = ("psi",)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        _, lab = self.labels()
        emission = (h @ self.W_e) @ lab.T  # (..., M)
        return emission[..., None, None, :] + self.psi


class Bilinear(Scorer):
    """h_d W_e t_c + t_a^T A^dir t_c: emission plus a bilinear transition over label embeddings."""

    shapes = {"label_emb": ("C", "T"), "W_e": ("I", "T"), "A": ("X", "T", "T")}
    init_scale = {"A": 0.1}

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        ctx, lab = self.labels()
        emission = (h @ self.W_e) @ lab.T  # (..., M)
        transition = torch.einsum("at,xtu,cu->xac", ctx, self.A, lab)  # (X, C, M)
        return emission[..., None, None, :] + transition


class Trilinear(Scorer):
    """sum_r (U1 h_d)_r (U2^dir t_a)_r (U3 t_c)_r, a rank-R trilinear form."""

    shapes = {"label_emb": ("C", "T"), "U1": ("I", "R"), "U2": ("X", "T", "R"), "U3": ("T", "R")}

    @property
    def init_scale(self):  # keep the initial scores O(1) whatever the rank
        return {"U3": 1.0 / max(1, self.sizes["R"]) ** 0.5}

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        ctx, lab = self.labels()
        v1 = h @ self.U1  # (..., R)
        v2 = torch.einsum("at,xtr->xar", ctx, self.U2)  # (X, C, R)
        v3 = lab @ self.U3  # (M, R)
        pair = v2[:, :, None, :] * v3[None, None]  # (X, C, M, R)
        R = v1.shape[-1]
        return (v1.reshape(-1, R) @ pair.reshape(-1, R).T).reshape(*v1.shape[:-1], *pair.shape[:3])


class SecondOrder(nn.Module):
    """Order-2 chain scores: a first-order scorer's F[.., 0, p, c] plus a table psi2[a, p, c].

    Output (..., C, C, M): the label two back (a), the previous label (p), both with 0 = start,
    then the label.
    """

    def __init__(self, first: Scorer):
        super().__init__()
        self.first = first
        self.psi2 = nn.Parameter(torch.zeros(first.nO + 1, first.nO + 1, first.nO))

    @property
    def nI(self) -> int:
        return self.first.nI

    @property
    def nO(self) -> int:
        return self.first.nO

    def resize(self, nI: int, nO: int, keep: bool = True) -> None:
        self.first.resize(nI, nO, keep=keep)
        old = self.psi2.detach()
        new = torch.zeros(nO + 1, nO + 1, nO, device=old.device)
        overlap = tuple(slice(0, min(a, b)) for a, b in zip(old.shape, new.shape))
        if keep:
            new[overlap] = old[overlap]
        self.psi2 = nn.Parameter(new)

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        """Adopt the saved shapes (see :meth:`Scorer.load_state_dict`), then load."""
        first = {k[len("first."):]: v for k, v in state_dict.items() if k.startswith("first.")}
        self.first.load_state_dict(first, strict=strict, assign=assign)
        if "psi2" in state_dict:
            self.psi2 = nn.Parameter(torch.empty_like(state_dict["psi2"]))
        return super().load_state_dict(state_dict, strict=strict, assign=assign)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.first(h)[..., 0, None, :, :] + self.psi2


SCORERS = {"emission_transition": EmissionTransition, "bilinear": Bilinear, "trilinear": Trilinear}


def make_scorer(edge_scorer: str, *, n_dirs: int, label_dim: int, rank: int, order: int = 1) -> nn.Module:
    """The torch scorer named in the config; order 2 adds the second-order table."""
    if edge_scorer not in SCORERS:
        raise ValueError(f"edge_scorer must be one of {sorted(SCORERS)}, not {edge_scorer!r}")
    if order not in (1, 2):
        raise ValueError(f"order must be 1 or 2, not {order!r}")
    scorer = SCORERS[edge_scorer](n_dirs, label_dim, rank)
    return SecondOrder(scorer) if order == 2 else scorer
