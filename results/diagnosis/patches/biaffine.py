"""Screening patch (not shipped): input-dependent tree scores, a biaffine arc score per token pair.

Every arc h -> d of the NLDM gets, on top of its label-pair score and distance bias, a label-independent
score from the two tokens' vectors, as a biaffine parser scores arcs:

    arc(h, d) = k_h . q_d / sqrt(D),   q_d = h_d Q / sqrt(I),   k_h = h_h K / sqrt(I)   (h, d tokens)
    arc(0, d) = r . q_d / sqrt(D)                                                        (the root)

Q (I, D) starts N(0, 1), K (I, D) and r (D,) at zero, so every arc score starts at zero and the NLDM still
starts as the softmax tagger. The scorer hands q and k to the structure as 2D extra columns of its factored
scores (F[..., 0, 0, M:]; the other contexts' copies get no gradient); the structure splits them off and runs
on dense arc scores (:mod:`densetree`).
"""
import torch
from torch import nn

from densetree import use_dense_arcs


def patch(dim: int = 32):
    from spacy_nldm.models import scorers, structure
    from spacy_nldm.models import tagger as mt
    from spacy_nldm.pipeline import tagger as pt

    Scorer = scorers.Scorer
    resize0, forward0 = Scorer.resize, Scorer.forward

    def resize(self, nI, nO, keep=True):
        resize0(self, nI, nO, keep)
        if self.sizes["X"] != 2:
            return
        shapes = {"arc_q": (self.sizes["I"], dim), "arc_k": (self.sizes["I"], dim), "arc_root": (dim,)}
        for name, shape in shapes.items():
            old = getattr(self, name, None)
            if old is None or tuple(old.shape) != shape or not keep:
                init = torch.randn(shape) if name == "arc_q" else torch.zeros(shape)
                setattr(self, name, nn.Parameter(init))

    def forward(self, h):
        F = forward0(self, h)
        if getattr(self, "arc_q", None) is None:
            return F
        norm = self._norm("I")
        qk = torch.cat([h @ self.arc_q * norm, h @ self.arc_k * norm], dim=-1)  # (..., 2D)
        return torch.cat([F, qk[..., None, None, :].expand(*F.shape[:-1], 2 * dim)], dim=-1)

    Scorer.resize, Scorer.forward = resize, forward
    get0 = mt.get_structure

    def get_structure(model):
        s = get0(model)
        if model.attrs["structure"] == "tree":
            s.arc_root = mt.torch_scorer(model).arc_root
        return s

    mt.get_structure = get_structure
    pt.get_structure = get_structure

    def arc_terms(self, Fb):  # the token-pair arcs, the same for every label pair
        M = Fb.shape[-1] - 2 * dim
        q, k = Fb[:, :, 0, 0, M : M + dim], Fb[:, :, 0, 0, M + dim :]  # (B, N, D)
        root = self.arc_root.to(Fb.dtype)[None, None, :].expand(Fb.shape[0], 1, dim)
        heads = torch.cat([root, k], dim=1)  # (B, N+1, D)
        arcs = torch.einsum("bhe,bde->bhd", heads, q) / dim ** 0.5  # (B, N+1, N)
        arcs = torch.cat([arcs.new_zeros(arcs.shape[0], arcs.shape[1], 1), arcs], dim=2)  # arcs into the root: unread
        arcs = arcs[..., None, None]  # (B, N+1, N+1, 1, 1) [h, d]
        return Fb[..., :M], arcs, lambda gold_mask: arcs

    use_dense_arcs(arc_terms)

    def label_marginals(self, F, lengths):
        out = F.new_zeros(F.shape[0], F.shape[1], F.shape[-1] - 2 * dim)
        with torch.no_grad():
            for idx, Fb, lens in self._buckets(F, lengths):
                out[idx, : Fb.shape[1]] = self._marginals(Fb, lens)
        return out

    structure.LatentTree.label_marginals = label_marginals  # the scores carry 2D columns more than labels


def d32():
    patch(32)
