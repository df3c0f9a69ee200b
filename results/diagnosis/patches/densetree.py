"""Shared by the screening patches that add a term to the NLDM's arc scores (not shipped).

:func:`use_dense_arcs` makes :class:`~spacy_nldm.models.structure.LatentTree` run its loss, decoding and
marginals on dense arc scores (B, N+1, N+1, M, M) with a patch's extra term added, instead of on
DirectionalScores (slower; for a screen only). Decoding skips the canonical tree.
"""
import torch


def use_dense_arcs(arc_terms) -> None:
    """``arc_terms(structure, Fb)`` -> (F (B, N, 2, C, M), extra, gold_extra): ``extra`` is added to the dense
    arc scores, ``gold_extra(gold_mask)`` to the gold arcs (B, N+1, N+1, 1, 1); both broadcast."""
    from spacy_nldm import structs
    from spacy_nldm.models import structure

    def dense(self, Fb):
        F, extra, gold_extra = arc_terms(self, Fb)
        return F, self._with_bias(self.expand(F), F) + extra, gold_extra

    def nll(self, F, lengths, gold_mask, approx="exact"):
        assert approx == "exact"
        total = F.new_zeros(())
        for idx, Fb, lens in self._buckets(F, lengths):
            gm = gold_mask[idx, : Fb.shape[1]]
            assert bool(((gm.sum(-1) == 1) | ~structure.real_tokens(gm, lens)).all())
            Fr, S, gold_extra = dense(self, Fb)
            log_z = structs.log_partition(S, lens, max_dist=self.max_dist)
            gold = self._with_bias(self.gold_arcs(Fr, gm), Fr) + gold_extra(gm)
            log_s = structs.log_partition(gold, lens, max_dist=self.max_dist)
            total = total + (log_z - log_s).sum()
        return total

    def _decode(self, Fb, lens, posterior):
        Fr, S, _ = dense(self, Fb)
        mask = None
        if posterior:
            probs = structs.marginals(S, lens, max_dist=self.max_dist).labels
            mask = self._mask(torch.nn.functional.one_hot(probs.argmax(-1), Fr.shape[-1]).bool())
        return structs.viterbi(S, lens, label_mask=mask, max_dist=self.max_dist)

    def _marginals(self, Fb, lens):
        return structs.marginals(dense(self, Fb)[1], lens, max_dist=self.max_dist).labels

    LT = structure.LatentTree
    LT.nll, LT._decode, LT._marginals = nll, _decode, _marginals
