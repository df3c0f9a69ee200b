"""Edge scorers of the paper (section 3.1) as PyTorch modules, kept factored.

A scorer maps token vectors ``h`` (..., nI) to factored scores ``F`` of shape (..., X, C, M):
``F[t, x, a, c]`` scores label ``c`` on token ``t`` given a context ``(x, a)``:

* ``x`` is a direction: for the NLDM 0 = head on the left (the root included), 1 = head on the
  right; a linear-chain CRF has the single direction "previous token";
* ``a`` is the head (or previous) label: ``a = 0`` is the root / start state, ``a = 1..M`` are the
  labels ``0..M-1``.

A tree scorer may also hold ``distance_bias`` (2, K), a score per arc direction and length that does not
depend on the tokens or labels, starting at 0: a table the scorer gives beside F (:meth:`Scorer.tables`), which
the structure reads as such (see :class:`~spacy_nldm.models.structure.LatentTree`). A token-independent
scorer (bilinear, emission_transition) gives its F in the same way, as emissions (..., M) and one interaction
table (X, C, M) (``forward(h, factored=True)``): the model never builds F's M + 1 contexts per token.

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
# (root/start first), T label embedding size, R rank, X directions, K arc lengths of the distance bias, or an int.
Shape = Tuple


class Scorer(nn.Module):
    """Base class: F = emission(h_d)[c] + interaction(h_d)[x, a, c].

    The emission is a per-label linear layer with bias on the dependent's vector, ``h W + b``,
    zero-initialised like the output layer of spaCy's ``tagger``; the interactions of the
    subclasses start at zero too. With zero interactions every label sequence gets the sum of its
    emissions, so the CRF and the NLDM *are* the softmax tagger at the start of training (the
    NLDM's tree count is the same for every label sequence and cancels).

    ``shapes`` names the subclass's interaction parameters; ``emission=False`` drops W and b
    (the paper's pure trilinear form, :class:`Trilinear` only). ``distance_lengths`` K > 0 (the tree only)
    adds the distance bias (2, K), column k for arc length k + 1, starting at 0.
    """

    shapes: Dict[str, Shape] = {}
    emission_shapes: Dict[str, Shape] = {"W": ("I", "M"), "b": ("M",)}
    #: parameters initialised at zero (the distance bias too); the others are N(0, 1). The
    #: interactions divide by the square root of each contraction's size in the forward pass instead of
    #: scaling their initial values: Adam moves every coordinate by about the learning rate per step, so a
    #: factor initialised at a small scale (say 1/sqrt(R T) = 0.007) outgrows it within a few steps and the
    #: scores it feeds swing by tens of nats per step (the trilinear scorer then cannot fit its training
    #: data). With O(1) factors and constant normalisers every factor changes by a similar fraction per
    #: step.
    zero_init: Tuple[str, ...] = ("W", "b", "distance_bias")

    def __init__(self, n_dirs: int, label_dim: int, rank: int, nI: int = 1, nO: int = 1, emission: bool = True,
                 distance_lengths: int = 0, dropout: float = 0.0):
        super().__init__()
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), not {dropout!r}")
        for name, size in (("label_dim", label_dim), ("rank", rank)):
            if isinstance(size, bool) or not isinstance(size, int) or size < 1:
                raise ValueError(f"{name} must be a positive integer, not {size!r}")
        if not emission and not self.can_drop_emission:
            raise ValueError(f"{type(self).__name__} needs its emission term (emission = true)")
        if distance_lengths and n_dirs != 2:
            raise ValueError("a distance bias needs the tree's two arc directions")
        self.emission = emission
        self.dropout = float(dropout)
        self.sizes = {"X": n_dirs, "T": label_dim, "R": rank, "I": 0, "M": 0, "K": int(distance_lengths)}
        self.resize(nI, nO)

    can_drop_emission = False
    #: whether the interaction is the same for every token (it reads no token vector): F is then
    #: emission + one (X, C, M) table, and a first-order chain can run on structs.ChainScores
    token_independent = False

    @property
    def nI(self) -> int:
        return self.sizes["I"]

    @property
    def nO(self) -> int:
        return self.sizes["M"]

    def param_shapes(self) -> Dict[str, Shape]:
        distance = {"distance_bias": ("X", "K")} if self.sizes["K"] else {}
        return {**(self.emission_shapes if self.emission else {}), **self.shapes, **distance}

    def _shape(self, name: str) -> Tuple[int, ...]:
        sizes = dict(self.sizes, C=self.sizes["M"] + 1)
        return tuple(sizes[s] if isinstance(s, str) else s for s in self.param_shapes()[name])

    def _init(self, name: str, shape: Tuple[int, ...]) -> torch.Tensor:
        return torch.zeros(shape) if name in self.zero_init else torch.randn(shape)

    def _norm(self, symbol: str) -> float:
        """1 / sqrt(size) of a contracted dimension (I, T or R)."""
        return 1.0 / max(1, self.sizes[symbol]) ** 0.5

    def resize(self, nI: int, nO: int, keep: bool = True) -> None:
        """(Re)create the parameters for input width nI and nO labels, keeping the old values on
        the overlapping slice (``keep=False``: all fresh)."""
        self.sizes.update(I=int(nI), M=int(nO))
        for name in self.param_shapes():
            shape = self._shape(name)
            old = getattr(self, name, None)
            if keep and old is not None and tuple(old.shape) == shape:
                continue
            new = self._init(name, shape)
            if old is not None:
                new = new.to(device=old.device, dtype=old.dtype)
            if old is not None and keep:
                overlap = tuple(slice(0, min(a, b)) for a, b in zip(old.shape, shape))
                new[overlap] = old.detach()[overlap].to(new.dtype)
            setattr(self, name, nn.Parameter(new))

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        """Adopt the saved shapes (labels and input width) before loading the values."""
        for name, symbols in self.param_shapes().items():
            if name in state_dict:
                for symbol, size in zip(symbols, state_dict[name].shape):
                    if symbol in ("I", "M"):
                        self.sizes[symbol] = int(size)
                    elif symbol == "C":
                        self.sizes["M"] = int(size) - 1
        for name in self.param_shapes():
            if name in state_dict and getattr(self, name).shape != state_dict[name].shape:
                setattr(self, name, nn.Parameter(torch.empty_like(state_dict[name])))
        return super().load_state_dict(state_dict, strict=strict, assign=assign)

    def labels(self) -> Tuple[torch.Tensor, torch.Tensor]:
        """(contexts (C, T), dependent labels (M, T)) label embeddings; row 0 is the root/start."""
        return self.label_emb, self.label_emb[1:]

    def tables(self) -> Dict[str, torch.Tensor]:
        """The scores the structure reads beside F, by name: the distance bias (X, K) where there is one."""
        return {"distance_bias": self.distance_bias} if self.sizes["K"] else {}

    def forward(self, h: torch.Tensor, factored: bool = False):
        """(..., nI) -> F (..., X, C, M). ``factored``: (scores, tables), the scores as the structure reads them:
        a token-independent scorer's emissions (..., M), its interaction (X, C, M) the table "interaction"
        (F = emissions[..., None, None, :] + interaction), so that nothing of F's size is built; another's F;
        the tables of :meth:`tables` beside them."""
        if self.dropout and self.training:  # thinc sets training mode in begin_update, eval in predict
            h = nn.functional.dropout(h, self.dropout)
        interaction = self.interaction(h)
        if factored and self.token_independent:
            return h @ self.W + self.b, {"interaction": interaction, **self.tables()}
        F = interaction
        if F.dim() == 3:  # (X, C, M): the same for every token
            F = F.expand(*h.shape[:-1], *F.shape)
        if self.emission:
            F = F + (h @ self.W + self.b)[..., None, None, :]
        return (F, self.tables()) if factored else F

    def interaction(self, h: torch.Tensor) -> torch.Tensor:
        """(..., X, C, M), or (X, C, M) when it does not depend on the token."""
        raise NotImplementedError


class EmissionTransition(Scorer):
    """emission(h_d)[c] + psi^dir[a, c]: a transition matrix per direction."""

    shapes = {"psi": ("X", "C", "M")}
    zero_init = Scorer.zero_init + ("psi",)
    token_independent = True

    def interaction(self, h: torch.Tensor) -> torch.Tensor:
        return self.psi


class Bilinear(Scorer):
    """emission(h_d)[c] + t_a^T A^dir t_c: a bilinear transition over label embeddings."""

    shapes = {"label_emb": ("C", "T"), "A": ("X", "T", "T")}
    zero_init = Scorer.zero_init + ("A",)
    token_independent = True

    def interaction(self, h: torch.Tensor) -> torch.Tensor:
        ctx, lab = self.labels()
        return torch.einsum("at,xtu,cu->xac", ctx, self.A, lab) * self._norm("T") ** 2  # (X, C, M)


class Trilinear(Scorer):
    """emission(h_d)[c] + sum_r (U1 h_d)_r (U2^dir t_a)_r (U3 t_c)_r, a rank-R trilinear form.

    U3 starts at zero, so the interaction does too. ``emission=False`` is the paper's pure form
    (no direct emission; all factors random at the start, giving O(1) scores).
    """

    shapes = {"label_emb": ("C", "T"), "U1": ("I", "R"), "U2": ("X", "T", "R"), "U3": ("T", "R")}
    can_drop_emission = True

    @property
    def zero_init(self):
        return Scorer.zero_init + (("U3",) if self.emission else ())

    def interaction(self, h: torch.Tensor) -> torch.Tensor:
        ctx, lab = self.labels()
        v1 = h @ self.U1 * (self._norm("I") * self._norm("R"))  # (..., R)
        v2 = torch.einsum("at,xtr->xar", ctx, self.U2) * self._norm("T")  # (X, C, R)
        v3 = lab @ self.U3 * self._norm("T")  # (M, R)
        pair = v2[:, :, None, :] * v3[None, None]  # (X, C, M, R)
        R = v1.shape[-1]
        return (v1.reshape(-1, R) @ pair.reshape(-1, R).T).reshape(*v1.shape[:-1], *pair.shape[:3])


class SecondOrder(nn.Module):
    """Order-2 chain scores: a first-order scorer's F[.., 0, p, c] plus a table psi2[a, p, c] (the label two
    back a, the previous label p, both with 0 = start, then the label).

    Output: the first-order scorer's (..., 1, C, M), and ``psi2`` as a table beside it (as the tree's distance
    bias; :class:`~spacy_nldm.models.structure.Chain`), so the per-token scores stay first-order sized.
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

    @property
    def token_independent(self) -> bool:
        return self.first.token_independent

    def tables(self) -> Dict[str, torch.Tensor]:
        """The trigram table (M+1, M+1, M), which the chain reads beside F."""
        return {"trigram": self.psi2}

    def forward(self, h: torch.Tensor, factored: bool = False):
        """(..., nI) -> the first-order F (..., 1, C, M); ``factored``: the first-order scorer's (scores, tables)
        (see :meth:`Scorer.forward`) with the trigram table among the tables."""
        if not factored:
            return self.first(h)
        scores, tables = self.first(h, factored=True)
        return scores, {**tables, **self.tables()}


SCORERS = {"emission_transition": EmissionTransition, "bilinear": Bilinear, "trilinear": Trilinear}


def make_scorer(edge_scorer: str, *, n_dirs: int, label_dim: int, rank: int, order: int = 1,
                emission: bool = True, distance_lengths: int = 0, dropout: float = 0.0) -> nn.Module:
    """The torch scorer named in the config; order 2 adds the second-order table; ``distance_lengths`` K > 0
    gives a tree scorer a distance bias (2, K), starting at 0; ``dropout`` acts on the input vectors in
    training mode."""
    if edge_scorer not in SCORERS:
        raise ValueError(f"edge_scorer must be one of {sorted(SCORERS)}, not {edge_scorer!r}")
    if order not in (1, 2):
        raise ValueError(f"order must be 1 or 2, not {order!r}")
    scorer = SCORERS[edge_scorer](n_dirs, label_dim, rank, emission=emission, distance_lengths=distance_lengths,
                                  dropout=dropout)
    return SecondOrder(scorer) if order == 2 else scorer
