"""Screening patch (not shipped): NLDM arcs between adjacent tokens get a label-pair table of their own.

adj (2, M, M) [direction, head label, dependent label], zero at the start, is added to every arc of length 1
between two tokens, on top of the arc's usual score (the same at every length). The structure runs on dense
arc scores (:mod:`densetree`).
"""
import torch
from torch import nn
import torch.nn.functional as Fn

from densetree import use_dense_arcs


def patch(scale: float = 1.0, bilinear: bool = False):
    from spacy_nldm.models import scorers
    from spacy_nldm.models import tagger as mt
    from spacy_nldm.pipeline import tagger as pt

    Scorer = scorers.Scorer
    resize0 = Scorer.resize

    def resize(self, nI, nO, keep=True):
        resize0(self, nI, nO, keep)
        if self.sizes["X"] == 2 and self.sizes["M"] > 0:
            if bilinear:  # adj = t_a^T A_adj^dir t_c over the scorer's label embeddings (as Bilinear)
                T = self.sizes["T"]
                if getattr(self, "A_adj", None) is None or tuple(self.A_adj.shape) != (2, T, T):
                    self.A_adj = nn.Parameter(torch.zeros(2, T, T))
                return
            old = getattr(self, "adj", None)
            if old is None or tuple(old.shape) != (2, nO, nO):
                self.adj = nn.Parameter(torch.zeros(2, nO, nO))

    Scorer.resize = resize
    get0 = mt.get_structure

    def get_structure(model):
        s = get0(model)
        if model.attrs["structure"] == "tree":
            sc = mt.torch_scorer(model)
            s.adj = getattr(sc, "adj", None)
            if bilinear:
                s.adj = None
                s.scorer = sc
        return s

    mt.get_structure = get_structure
    pt.get_structure = get_structure

    def table(self, F):  # (2, M, M) [direction, head label, dep label]
        if self.adj is not None:
            return self.adj.to(F.dtype) * scale
        sc = self.scorer
        lab = sc.label_emb[1:]
        return torch.einsum("at,xtu,cu->xac", lab, sc.A_adj, lab).to(F.dtype) * sc._norm("T") ** 2 * scale

    def adj_dense(self, F):  # (N+1, N+1, M, M) [h, d, head label, dep label]
        n1 = F.shape[1] + 1
        adj = table(self, F)
        pos = torch.arange(n1, device=F.device)
        right = ((pos[None, :] - pos[:, None]) == 1) & (pos[:, None] >= 1)
        left = ((pos[:, None] - pos[None, :]) == 1) & (pos[None, :] >= 1)
        return right[..., None, None].to(F.dtype) * adj[0] + left[..., None, None].to(F.dtype) * adj[1]

    def adj_gold(self, Fb, gm):  # (B, N+1, N+1)
        lab = gm.to(torch.uint8).argmax(-1)
        adj = table(self, Fb)
        r = adj[0][lab[:, :-1], lab[:, 1:]]
        l = adj[1][lab[:, 1:], lab[:, :-1]]
        return torch.diag_embed(Fn.pad(r, (1, 0)), offset=1) + torch.diag_embed(Fn.pad(l, (1, 0)), offset=-1)

    def arc_terms(self, Fb):
        return Fb, adj_dense(self, Fb)[None], lambda gm: adj_gold(self, Fb, gm)[..., None, None]

    use_dense_arcs(arc_terms)


def scale3():
    patch(3.0)


def bilinear():
    patch(bilinear=True)
