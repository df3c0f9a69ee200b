"""From factored edge scores to the structured core: loss, decoding and label marginals.

``F`` (S, L, X, C, M) are a batch of segments' factored scores (see :mod:`.scorers`), ``lengths``
(S,) their real token counts. :class:`LatentTree` (the NLDM) and :class:`Chain` (CRF of order 1
or 2) call :mod:`spacy_nldm.structs` on them: the NLDM's log Z, Viterbi decoding and marginals take F
itself, as :class:`~spacy_nldm.structs.DirectionalScores` (with ``max_dist`` their memory is
O(n k M^2): a 5,000-token sentence decodes in seconds); log S of partial labels and the chains expand
F to the dense tensors. Segments are grouped by length into buckets whose expanded tensors stay under
``budget`` floats, so padding to the longest sentence of a batch costs neither memory nor time.
Decoders return :class:`~spacy_nldm.structs.Decoded` (labels, heads, score), as structs does; the
NLDM's tree is the canonical one of the decoded labels (:func:`~spacy_nldm.structs.canonical_heads`), so it
does not depend on the batch.
"""
import math
from typing import Callable, List, Optional, Tuple

import torch

from .. import structs
from ..structs import tree_chain
from .smoothing import chain_moments, tree_moments, uniform_expectation

Tensor = torch.Tensor
#: most floats one bucket's expanded score tensor may hold (16 MB in float32). With log Z read from
#: the factored scores, 2^22 is the fastest loss on ARK tweets at k=5 (8% ahead of 2^21, 2^24 is
#: 1.3x slower, over six 1000-word batches); Viterbi decoding was fastest at 2^21-2^22
DEFAULT_BUDGET = 1 << 22
#: log S on fully labelled segments has one label per token: O(n^2) floats per segment, so whole
#: batches of tweets fit in one call (half the loss's per-stage overhead on ARK batches)
GOLD_BUDGET = 1 << 24
#: the chains step through tokens one at a time, so larger buckets pay (order 2: 2^23 is 2.2x
#: faster than 2^21 for the loss and as fast for Viterbi)
CHAIN_BUDGET = 1 << 23
#: the trees of the NLDM's label smoothing target (:class:`LatentTree`)
TREE_SMOOTHING = ("uniform", "model")


def real_tokens(mask: Tensor, lengths: Tensor) -> Tensor:
    """(B, N) True for the tokens within ``lengths`` of a (B, N, ...) tensor."""
    return torch.arange(mask.shape[1], device=mask.device)[None, :] < lengths.to(mask.device)[:, None]


def allowed_first(mask: Tensor, lengths: Tensor) -> Tuple[Tensor, Tensor]:
    """For a (B, N, M) label mask: indices (B, N, K) of each token's allowed labels, allowed ones
    first, K = the most any real token allows, and whether each index is allowed (B, N, K).
    Padding tokens (beyond ``lengths``) allow label 0 only."""
    real = real_tokens(mask, lengths)
    pad = torch.zeros_like(mask)
    pad[..., 0] = True
    mask = torch.where(real[..., None], mask, pad)
    K = max(1, int(mask.sum(-1).max())) if mask.numel() else 1
    idx = torch.argsort((~mask).to(torch.int8), dim=-1, stable=True)[..., :K]
    return idx, mask.gather(-1, idx)


def length_buckets(lengths: List[int], cost, budget: int) -> List[List[int]]:
    """Group indices by increasing length so that len(group) * cost(max length) <= budget."""
    groups: List[List[int]] = []
    current: List[int] = []
    for i in sorted(range(len(lengths)), key=lengths.__getitem__):
        if lengths[i] == 0:
            continue
        if current and (len(current) + 1) * cost(lengths[i]) > budget:
            groups.append(current)
            current = []
        current.append(i)
    if current:
        groups.append(current)
    return groups


class Structure:
    """Shared bucketing; subclasses implement the per-bucket ``_log_z_and_s``, ``_decode``, ``_marginals``."""

    def __init__(self, budget: int = DEFAULT_BUDGET):
        self.budget = budget

    def cost(self, n: int, m: int) -> int:  # floats of the expanded tensor of one segment
        raise NotImplementedError

    def _buckets(self, F: Tensor, lengths: Tensor, cost=None, budget: Optional[int] = None, whole: bool = True):
        """Yield (indices, F of the bucket cut to its longest segment, lengths) per bucket
        (``cost(n)`` and ``budget`` default to the structure's own).

        F is reordered by one gather and then split, so that the backward pass builds F's
        gradient with one scatter and one concatenation (indexing F once per bucket would
        allocate and add a gradient of F's full size per bucket).
        """
        m = F.shape[-1]
        lengths = lengths.to(F.device)
        if whole and cost is None and budget is None and self.one_bucket(F):  # no reordering copy of F
            if len(lengths):
                yield torch.arange(len(lengths), device=F.device), F[:, : max(1, int(lengths.max()))], lengths
            return
        cost = cost or (lambda n: self.cost(n, m))
        groups = length_buckets(lengths.tolist(), cost, budget or self.budget)
        if not groups:
            return
        order = torch.tensor([i for group in groups for i in group], dtype=torch.long, device=F.device)
        sizes = [len(group) for group in groups]
        pieces = zip(order.split(sizes), F[order].split(sizes), lengths[order].split(sizes))
        for idx, piece, lens in pieces:
            yield idx, piece[:, : int(lens.max())], lens

    def one_bucket(self, F: Tensor) -> bool:
        """Whether the structure's own passes over F take the whole batch at once (its computation does not
        grow with the batch's padding): False, buckets of similar lengths."""
        return False

    def nll(self, F: Tensor, lengths: Tensor, gold_mask: Tensor, approx: str = "exact", smoothing: float = 0.0
            ) -> Tensor:
        """Summed -log P(y | x): log Z(x) - log S(x, y), S restricted by ``gold_mask`` (S, L, M).

        ``approx="max"`` replaces log S by the best tree's score (the paper's max approximation).
        ``smoothing`` b: the loss is (1 - b) -log P(y | x) + b U(x), U the cross-entropy of the uniform
        distribution over the outputs (:mod:`.smoothing`), on the segments whose every token has its label
        (as spaCy's ``tagger`` leaves tokens without a label out of its loss, smoothing included, a segment
        with unknown labels keeps the plain likelihood of what is known); 0 computes the plain loss, unchanged.
        """
        weights = self.smoothing_weights(gold_mask, lengths, smoothing)
        total = F.new_zeros(())
        for idx, Fb, lens in self._buckets(F, lengths):
            log_z, log_s = self._log_z_and_s(Fb, lens, gold_mask[idx, : Fb.shape[1]], approx)
            if weights is None:
                total = total + (log_z - log_s).sum()
            else:
                total = total + (log_z - (1.0 - weights[idx].to(log_s)) * log_s).sum()
                total = total - self.smoothing_in_bucket(Fb, lens, log_z, weights[idx])
        return total if weights is None else total - self.smoothing_target(F, lengths, weights)

    @staticmethod
    def smoothing_weights(gold_mask: Tensor, lengths: Tensor, smoothing: float) -> Optional[Tensor]:
        """(S,) the smoothing of each segment: ``smoothing`` where every real token has one allowed label,
        0 elsewhere; None when no segment is smoothed."""
        if not smoothing:
            return None
        labelled = ((gold_mask.sum(-1) == 1) | ~real_tokens(gold_mask, lengths)).all(-1)
        if not bool(labelled.any()):
            return None
        return labelled.to(torch.float64) * smoothing

    def uniform_expectation(self, F: Tensor, lengths: Tensor, weights: Tensor) -> Tensor:
        """Sum over segments of ``weights`` times E_u[score] + constant of the uniform distribution
        (see :mod:`.smoothing`)."""
        raise NotImplementedError

    def smoothing_target(self, F: Tensor, lengths: Tensor, weights: Tensor) -> Tensor:
        """What :meth:`nll` subtracts for label smoothing once per batch: :meth:`uniform_expectation`."""
        return self.uniform_expectation(F, lengths, weights)

    def smoothing_in_bucket(self, F: Tensor, lengths: Tensor, log_z: Tensor, weights: Tensor) -> Tensor:
        """What :meth:`nll` subtracts for label smoothing per bucket, given its log Z (B,): nothing here."""
        return F.new_zeros(())

    def decode(self, F: Tensor, lengths: Tensor, posterior: bool = False, tree: bool = True,
               marginals: Optional[Tensor] = None) -> structs.Decoded:
        """Best labels (S, L), heads (S, L) (None for the chains) and score (S,), as
        :class:`~spacy_nldm.structs.Decoded`; ``posterior``: per-token arg-max of the label marginals
        (the tree and score are then the best ones for those labels). ``tree = False``: the labels only
        (heads None; the score is the Viterbi score, or 0 under ``posterior``), skipping the tree search.
        ``marginals`` (S, L, M): :meth:`label_marginals` of the same F, when the caller has them already
        (posterior decoding then reads them instead of computing them again)."""
        has_tree = self.has_tree and tree
        S, L = F.shape[:2]
        labels = torch.zeros(S, L, dtype=torch.long, device=F.device)
        heads = torch.zeros(S, L, dtype=torch.long, device=F.device)
        best = torch.zeros(S, dtype=F.dtype, device=F.device)
        marginals = None if marginals is None else marginals.to(F.device)
        with torch.no_grad():
            for idx, Fb, lens in self._buckets(F, lengths, whole=posterior):  # (Viterbi: the torch stages)
                probs = None if marginals is None else marginals[idx, : Fb.shape[1]]
                found = self._decode(Fb, lens, posterior, has_tree, probs)
                best[idx] = found.score
                labels[idx, : Fb.shape[1]] = found.labels
                if found.heads is not None:
                    heads[idx, : Fb.shape[1]] = found.heads
        return structs.Decoded(labels, heads if has_tree else None, best)

    def label_marginals(self, F: Tensor, lengths: Tensor) -> Tensor:
        """P(y_t = c | x), shape (S, L, M)."""
        out = F.new_zeros(F.shape[0], F.shape[1], F.shape[-1])
        with torch.no_grad():
            for idx, Fb, lens in self._buckets(F, lengths):
                out[idx, : Fb.shape[1]] = self._marginals(Fb, lens)
        return out


class LatentTree(Structure):
    """The NLDM: labels linked by a latent projective tree, arcs up to ``max_dist`` long.

    ``canonical``: :meth:`decode` returns, for the decoded labels, the canonical tree among the
    (near-)best ones (:func:`~spacy_nldm.structs.canonical_heads`: the shortest arcs among the
    trees within a relative 1e-5 of the best) and its score, so that a doc's tree does not depend on
    the rounding of its batch; ``False``: Viterbi's own choice among them.
    """

    has_tree = True

    def __init__(self, max_dist: Optional[int] = None, budget: int = DEFAULT_BUDGET, canonical: bool = True,
                 distance_bias: Optional[Tensor] = None, token_independent: bool = False,
                 chain: Optional[Tensor] = None, tree_smoothing: str = "uniform"):
        """``distance_bias`` (2, K): a score per arc direction and length, or (2, K, M, M) per direction,
        length and label pair (see :class:`~spacy_nldm.structs.DirectionalScores`): the scorer's parameter or
        a function of its parameters (:meth:`~.scorers.Scorer.distance_scores`), so that the loss's backward
        pass writes its gradient straight into them. ``token_independent``: F is emission + one table (the
        scorer says so), which the compiled lane reads in that form. ``chain`` (M+1, M): the chain's score of
        each label after the previous one (row 0: the first token's), added to every tree's score
        (:mod:`spacy_nldm.structs.tree_chain`; decoded by the label marginals only). ``tree_smoothing``: the
        trees of label smoothing's uniform target, "uniform" (independent of the model) or "model" (the model's
        own tree distribution, held fixed: :meth:`model_tree_expectation`)."""
        if tree_smoothing not in TREE_SMOOTHING:
            raise ValueError(f"tree_smoothing must be one of {TREE_SMOOTHING}, not {tree_smoothing!r}")
        super().__init__(budget)
        self.tree_smoothing = tree_smoothing
        self.chain = chain
        self.max_dist = max_dist
        self.canonical = canonical
        self.distance_bias = distance_bias
        self.token_independent = token_independent

    def directional(self, F: Tensor) -> structs.DirectionalScores:
        """F (B, N, 2, M+1, M) with the distance bias, as the tree algorithms read it."""
        return structs.DirectionalScores(F, self._bias(F), self.token_independent)

    def _bias(self, F: Tensor) -> Optional[Tensor]:
        return None if self.distance_bias is None else self.distance_bias.to(device=F.device, dtype=F.dtype)

    def _with_bias(self, scores: Tensor, F: Tensor, labels: Tensor) -> Tensor:
        """Dense arc scores (B, N+1, N+1, K, K) over selected labels (``labels`` (B, N+1, K): the label id
        each sub-label of each position stands for, row 0 the root's) plus the distance bias of each arc."""
        bias = self._bias(F)
        if bias is None:
            return scores
        if bias.dim() == 4:  # a score per label pair: the selected labels' own
            return scores + structs.gather_distance_bias(bias, labels, self.max_dist)
        return scores + structs.distance_bias_matrix(bias, scores.shape[1], self.max_dist)[None, :, :, None, None]

    def cost(self, n: int, m: int) -> int:
        if self.chain is not None:  # (n + 1) k items of (M+1)^2 per kind (the contractions keep that size),
            # times 4: buckets of about a quarter of the budget pad less, which the torch recurrences pay for
            return 4 * (n + 1) * (self.max_dist or n) * (m + 1) ** 2
        return (n + 1) ** 2 * m * m

    def one_bucket(self, F: Tensor) -> bool:
        """On the CPU log Z and the marginals run sentence by sentence (:func:`spacy_nldm.structs.sentence_by_sentence`),
        whatever the padding: one bucket, no reordering copy of F. With the chain factor they run
        in the torch recurrences of :mod:`~spacy_nldm.structs.tree_chain`: buckets of similar lengths."""
        if self.chain is not None:
            return False
        return structs.sentence_by_sentence(F.device)

    def expand(self, F: Tensor) -> Tensor:
        """(B, N, 2, M+1, M) factored scores -> (B, N+1, N+1, M, M) arc scores of structs
        (the last axis may be any size: :meth:`restrict` expands scores of selected labels).

        Only the arcs structs reads are written (those up to ``max_dist`` long), and the backward
        pass reads only them, so the cost is O(B N k M^2) plus one zero fill.
        """
        return _ExpandTree.apply(F, self.max_dist)

    def _mask(self, label_mask: Optional[Tensor]) -> Optional[Tensor]:
        if label_mask is None:
            return None
        return torch.cat([label_mask.new_ones(label_mask.shape[0], 1, label_mask.shape[2]), label_mask], dim=1)

    def restrict(self, F: Tensor, label_mask: Tensor, lengths: Tensor) -> Tuple[Tensor, Tensor]:
        """Arc scores over the allowed labels only: (B, N+1, N+1, K, K) and their (B, N+1, K) mask,
        K = the most labels any token allows (1 with full gold labels, so that log S costs next
        to nothing). Sub-label 0 of the root is its label 0."""
        B, N = label_mask.shape[:2]
        mask = torch.cat([label_mask.new_zeros(B, 1, label_mask.shape[2]), label_mask], dim=1)
        mask[:, 0, 0] = True
        idx, ok = allowed_first(mask, lengths + 1)
        K = idx.shape[-1]
        dep = F.gather(-1, idx[:, 1:, None, None, :].expand(*F.shape[:4], K))  # (B, N, 2, M+1, K)
        scores = self.expand(dep)  # (B, N+1, N+1, M, K)
        return self._with_bias(scores.gather(3, idx[:, :, None, :, None].expand(B, N + 1, N + 1, K, K)), F, idx), ok

    def nll(self, F: Tensor, lengths: Tensor, gold_mask: Tensor, approx: str = "exact", smoothing: float = 0.0
            ) -> Tensor:
        """As :meth:`Structure.nll`; when every token's label is known (and ``approx="exact"``),
        log S is taken on the gold arcs (:meth:`gold_arcs`) in buckets of ``GOLD_BUDGET``."""
        one_label = (gold_mask.sum(-1) == 1) | ~real_tokens(gold_mask, lengths)
        if self.chain is not None and (approx != "exact" or not bool(one_label.all())):
            raise ValueError("chain_factor trains on fully labelled segments with the exact loss only")
        if approx != "exact" or not bool(one_label.all()):
            return super().nll(F, lengths, gold_mask, approx, smoothing)
        weights = self.smoothing_weights(gold_mask, lengths, smoothing)  # every segment labelled: all equal
        total = F.new_zeros(())
        for idx, Fb, lens in self._buckets(F, lengths):
            log_z = self._log_z(Fb, lens, self._bias(Fb))
            if weights is not None and self.tree_smoothing == "model":
                total = total + self._log_z_less_model_expectation(Fb, lens, log_z, weights[idx])
            else:  # (the uniform target has nothing per bucket)
                total = total + log_z.sum()
        for idx, Fb, lens in self._buckets(F, lengths, cost=lambda n: (n + 1) ** 2, budget=GOLD_BUDGET):
            labels = gold_mask[idx, : Fb.shape[1]].to(torch.uint8).argmax(-1)  # (B, N): the one allowed label
            positions = torch.cat([labels.new_zeros(labels.shape[0], 1), labels], dim=1)  # the root's label 0
            gold = self._with_bias(self.gold_arcs(Fb, labels), Fb, positions[..., None])
            log_s = structs.log_partition(gold, lens, max_dist=self.max_dist).sum()
            if self.chain is not None:  # given the labels the chain's score is the same in every tree
                log_s = log_s + tree_chain.chain_gold_score(self.chain.to(Fb), labels, lens).sum()
            total = total - ((1.0 - smoothing) * log_s if smoothing else log_s)
        return total if weights is None else total - self.smoothing_target(F, lengths, weights)

    def smoothing_target(self, F: Tensor, lengths: Tensor, weights: Tensor) -> Tensor:
        if self.tree_smoothing == "model":
            return self.uniform_labels_rest(F, lengths, weights)
        return self.uniform_expectation(F, lengths, weights)

    def smoothing_in_bucket(self, F: Tensor, lengths: Tensor, log_z: Tensor, weights: Tensor) -> Tensor:
        if self.tree_smoothing == "model":
            return self.model_tree_expectation(F, lengths, log_z, weights)
        return F.new_zeros(())

    def uniform_expectation(self, F: Tensor, lengths: Tensor, weights: Tensor) -> Tensor:
        total = uniform_expectation(F, lengths, self._moments(F), weights, bias=self._bias(F))
        return total + self.chain_expectation(F, lengths, weights)

    def _moments(self, F: Tensor) -> Callable[[int, int], tuple]:
        """(n, M) -> :func:`.smoothing.tree_moments` of this structure's arc limit and distance bias."""
        bias = self._bias(F)
        lengths_of_bias = 0 if bias is None else bias.shape[1]
        return lambda n, m: tree_moments(n, m, self.max_dist, lengths_of_bias)

    def model_tree_expectation(self, F: Tensor, lengths: Tensor, log_z: Tensor, weights: Tensor) -> Tensor:
        """sum_s weights_s E[score of F_s (B, N, 2, M+1, M) and the distance bias], labels uniform and the tree
        drawn from the model's own tree distribution q_s (labels summed out), q held fixed (no gradient): the
        arc-factored bound -log P(y) <= log Z - E_q[score(y, tree)] - H(q) with q = the model's. Uniform labels
        give each arc the mean of its label pairs, so it needs q's arc marginals only: of token i's head being
        the root or a token on side x (F[i, x, 0, :] and F[i, x, 1:, :]), and of the arcs per direction and
        length (the bias); they are the gradient of log Z (``log_z`` (B,), from F and the bias). Its gradient
        with respect to the bias cancels log Z's: the target smooths the labels, not the tree's shape."""
        bias = self._bias(F)
        inputs = [F] + ([] if bias is None else [bias])
        w = weights.to(device=F.device, dtype=log_z.dtype)
        if log_z.requires_grad and all(x.requires_grad for x in inputs):
            grads = torch.autograd.grad((w * log_z).sum(), inputs, retain_graph=True)
        else:  # no graph to F or the bias (the loss's value alone): log Z again, on detached inputs
            grads = self._log_z_gradient(inputs, lengths, w)
        return self._expectation_from(F, bias, grads[0], grads[1] if bias is not None else None)

    def _log_z_less_model_expectation(self, F: Tensor, lengths: Tensor, log_z: Tensor, weights: Tensor) -> Tensor:
        """``log_z.sum() - model_tree_expectation(...)`` for segments of equal ``weights`` (B,), with one
        backward pass through log Z instead of two: its gradient (the marginals, which the expectation needs)
        is taken once here and handed to the loss's backward pass as log Z's (:class:`_KnownGradient`)."""
        bias = self._bias(F)
        inputs = [F] + [x for x in (bias, self.chain) if x is not None]
        if not (log_z.requires_grad and all(x.requires_grad for x in inputs)):
            return log_z.sum() - self.model_tree_expectation(F, lengths, log_z, weights)
        grads = torch.autograd.grad(log_z.sum(), inputs)  # log Z's graph is not needed again
        log_z_sum = _KnownGradient.apply(log_z.detach().sum(), grads, *inputs)
        w = weights.to(device=F.device, dtype=log_z.dtype)
        counts = None if bias is None else grads[1] * w[0]  # (all weights equal)
        return log_z_sum - self._expectation_from(F, bias, grads[0] * w.view(-1, 1, 1, 1, 1), counts)

    def _log_z_gradient(self, inputs, lengths: Tensor, w: Tensor):
        """The gradient of sum_s w_s log Z_s with respect to ``inputs`` (F and the bias), from detached copies."""
        with torch.enable_grad():
            detached = [x.detach().requires_grad_() for x in inputs]
            bias = detached[1] if len(detached) > 1 else None
            return torch.autograd.grad((w * self._log_z(detached[0], lengths, bias)).sum(), detached)

    @staticmethod
    def _expectation_from(F: Tensor, bias: Optional[Tensor], mu: Tensor, counts: Optional[Tensor]) -> Tensor:
        """sum <F, expected counts> + <bias, expected counts> with the labels uniform and the arcs as in the
        (weighted) marginals ``mu`` (like F) and ``counts`` (like the bias), held fixed."""
        m = F.shape[-1]
        mu = mu.detach()
        root = mu[..., 0, :].sum(-1) / m  # (B, N, 2): the root's arc, the dependent's label uniform
        token = mu[..., 1:, :].sum((-1, -2)) / (m * m)  # a token's head, both labels uniform
        total = (root * F[..., 0, :].sum(-1)).sum() + (token * F[..., 1:, :].sum((-1, -2))).sum()
        if bias is not None:
            counts = counts.detach()
            total = total + ((counts * bias).sum() if bias.dim() == 2
                             else (counts.sum((-1, -2)) * bias.mean((-1, -2))).sum())
        return total

    def uniform_labels_rest(self, F: Tensor, lengths: Tensor, weights: Tensor) -> Tensor:
        """What :meth:`model_tree_expectation` leaves of the target's sum: the chain factor's expectation and
        the constants (log #trees per segment, as in :meth:`uniform_expectation`)."""
        w, lens, moments = weights.to(F), lengths.to(F.device), self._moments(F)
        constant = F.new_zeros(())
        for n in sorted(set(int(v) for v in lengths.tolist()) - {0}):
            constant = constant + w[lens == n].sum() * moments(n, F.shape[-1])[2]
        return constant + self.chain_expectation(F, lengths, weights)

    def chain_expectation(self, F: Tensor, lengths: Tensor, weights: Tensor) -> Tensor:
        """sum_s weights_s E_u[chain factor's score] with uniform labels (0 without the chain factor)."""
        if self.chain is None:
            return F.new_zeros(())
        # uniform labels: the first token's pair has mean chain[0], each later one the mean of chain[1:]
        chain = self.chain.to(F)
        w = weights.to(F)
        pairs = (lengths.to(F) - 1).clamp_min(0)
        return (w * (chain[0].mean() + pairs * chain[1:].mean()) * (lengths > 0).to(F)).sum()

    def _log_z(self, F: Tensor, lengths: Tensor, bias: Optional[Tensor]) -> Tensor:
        """log Z (B,) of F (B, N, 2, M+1, M) and the distance ``bias`` (None: none; the structure's is
        ``self._bias(F)``): with the chain factor, the tree_chain recurrences."""
        if self.chain is None:
            scores = structs.DirectionalScores(F, bias, self.token_independent)
            return structs.log_partition(scores, lengths, max_dist=self.max_dist)
        return tree_chain.tree_chain_log_partition(F, self.chain.to(F), lengths, max_dist=self.max_dist,
                                                   distance_bias=bias).to(F.dtype)

    @staticmethod
    def gold_arcs(F: Tensor, labels: Tensor) -> Tensor:
        """Arc scores (B, N+1, N+1, 1, 1) of given labels (B, N) (every token's one allowed label), gathered
        from F: scores[b, h, d] = F[b, d-1, direction, label of h, label of d]."""
        B, N = labels.shape
        head_label = torch.cat([labels.new_zeros(B, 1), labels + 1], dim=1)  # (B, N+1), 0 = the root
        h = torch.arange(N + 1, device=F.device)[:, None]
        d = torch.arange(1, N + 1, device=F.device)[None, :]
        b = torch.arange(B, device=F.device)[:, None, None]
        arcs = F[b, d - 1, (h > d).long(), head_label[:, :, None], labels[:, None, :]]  # (B, N+1, N)
        return torch.cat([arcs.new_zeros(B, N + 1, 1), arcs], dim=2)[..., None, None]  # arcs into the root: unread

    def _log_z_and_s(self, F, lengths, gold_mask, approx):
        # (the chain factor trains through nll's one-label path only)
        # log Z reads F directly (no O(n^2 M^2) arc tensor or gradient); log S runs on few labels
        log_z = structs.log_partition(self.directional(F), lengths, max_dist=self.max_dist)
        sub, ok = self.restrict(F, gold_mask, lengths)
        if approx == "max":
            labels, heads, _ = structs.viterbi(sub, lengths, label_mask=ok, max_dist=self.max_dist)
            return log_z, self.tree_score(sub, labels, heads, lengths)
        return log_z, structs.log_partition(sub, lengths, label_mask=ok, max_dist=self.max_dist)

    @staticmethod
    def tree_score(scores: Tensor, labels: Tensor, heads: Tensor, lengths: Tensor) -> Tensor:
        """Differentiable score (B,) of given labels (B, N) and heads (B, N) under ``scores``."""
        B, N = labels.shape
        root_label = labels.new_zeros(B, 1)
        head_labels = torch.cat([root_label, labels], dim=1).gather(1, heads)
        b = torch.arange(B, device=scores.device)[:, None].expand(B, N)
        d = torch.arange(1, N + 1, device=scores.device)[None, :].expand(B, N)
        arc = scores[b, heads, d, head_labels, labels]
        real = d <= lengths[:, None]
        return (arc * real).sum(1)

    def _decode(self, F, lengths, posterior, tree=True, probs=None) -> structs.Decoded:
        scores = self.directional(F)  # no (N+1, N+1, M, M) tensor: memory O(n k M^2)
        mask = None
        if self.chain is not None and not posterior:
            raise ValueError('chain_factor decodes by the label marginals only: set decode = "posterior"')
        if posterior:
            if probs is None:
                probs = self._marginals(F, lengths)
            labels = probs.argmax(-1).masked_fill(~real_tokens(probs, lengths), 0)
            if not tree:  # the labels are the marginals' arg-max: no tree search
                return structs.Decoded(labels, None, F.new_zeros(F.shape[0]))
            if self.canonical:  # the labels are known: the canonical tree's search is the whole tree search
                return self._canonical(F, labels, lengths)
            mask = self._mask(torch.nn.functional.one_hot(labels, F.shape[-1]).bool())
        found = structs.viterbi(scores, lengths, label_mask=mask, max_dist=self.max_dist)
        if not tree:
            return structs.Decoded(found.labels, None, found.score)
        if not self.canonical:
            return found
        return self._canonical(F, found.labels, lengths)

    def _canonical(self, F: Tensor, labels: Tensor, lengths: Tensor) -> structs.Decoded:
        """The canonical tree of ``labels`` (S, L) and its score: one tree among the (near-)equally scored
        ones, whatever the rounding; memory O(n k) with max_dist. A segment no tree can carry (score -inf)
        gets labels and heads 0, as structs' decoders leave it."""
        heads, score = structs.canonical_heads(F, labels, lengths, self.max_dist, distance_bias=self._bias(F))
        heads, score = heads.to(labels.device), score.to(device=F.device, dtype=F.dtype)
        possible = torch.isfinite(score)
        labels = torch.where(possible[:, None], labels, torch.zeros_like(labels))
        heads = torch.where(possible[:, None], heads, torch.zeros_like(heads))
        return structs.Decoded(labels, heads, torch.where(possible, score, torch.full_like(score, -math.inf)))

    def _marginals(self, F, lengths):
        if self.chain is not None:
            return tree_chain.tree_chain_label_marginals(F, self.chain, lengths, max_dist=self.max_dist,
                                                         distance_bias=self._bias(F))
        return structs.label_marginals(self.directional(F), lengths, max_dist=self.max_dist)


class Chain(Structure):
    """Linear-chain CRF of order 1 (F: (B, N, 1, M+1, M)) or 2 (F: (B, N, M+1, M+1, M), or with ``trigram``
    the first-order layout).

    ``token_independent``: F's interaction is the same for every token (F = emission + one table, as the
    bilinear and emission_transition scorers make it). Order 1 then runs on
    :class:`~spacy_nldm.structs.ChainScores` read off F (:meth:`factored`), which never builds the
    (B, N, M, M) potentials; the loss is the same function of the parameters, so are their gradients.

    ``trigram`` (M+1, M+1, M), order 2: F holds the first-order scores (B, N, 1, M+1, M) and the label
    two back adds ``trigram[a, p, c]`` (the second-order scorer's table, read from the module so that the
    loss writes its gradient straight into it). With ``token_independent`` the chain then runs on
    :class:`~spacy_nldm.structs.SecondOrderScores`, which never builds the (B, N, M, M, M) potentials.
    """

    has_tree = False

    def __init__(self, order: int = 1, budget: int = CHAIN_BUDGET, token_independent: bool = False,
                 trigram: Optional[Tensor] = None):
        super().__init__(budget)
        if trigram is not None and order != 2:
            raise ValueError("a trigram table needs order 2")
        self.order = order
        self.token_independent = token_independent
        self.trigram = trigram

    def factored(self, F: Tensor):
        """F as :class:`~spacy_nldm.structs.ChainScores` (order 1) or
        :class:`~spacy_nldm.structs.SecondOrderScores` (order 2 with ``trigram``): emissions (context label
        0) plus the tables of its first token, relative to that context; None unless ``token_independent``."""
        if not self.token_independent or F.shape[0] == 0 or F.shape[1] == 0:
            return None
        first = F[0, 0, 0]  # (M+1, M): row 0 the start context, row 1 + a the previous label a
        if self.order == 1:
            return structs.ChainScores(F[:, :, 0, 1, :], first[1:] - first[1], first[0] - first[1])
        if self.trigram is None:
            return None
        trigram = self.trigram.to(device=F.device, dtype=F.dtype) + (first - first[1])[None]
        return structs.SecondOrderScores(F[:, :, 0, 1, :], trigram)

    def dense(self, F: Tensor) -> Tensor:
        """F in the layout :meth:`expand` reads: order 2 with ``trigram``, (B, N, M+1, M+1, M) = F + trigram."""
        if self.trigram is None:
            return F
        return F[:, :, 0, None] + self.trigram.to(device=F.device, dtype=F.dtype)

    def cost(self, n: int, m: int) -> int:
        return n * m ** (self.order + 1)

    def expand(self, F: Tensor) -> Tensor:
        """Factored scores -> potentials (B, N, M, M) or (B, N, M, M, M); the start state is 0.
        The last axis may be any size (:meth:`restrict` expands scores of selected labels)."""
        return _ExpandChain.apply(self.dense(F), self.order)

    def restrict(self, F: Tensor, label_mask: Tensor, lengths: Tensor) -> Tuple[Tensor, Tensor]:
        """Potentials over the allowed labels only, (B, N, K, K) or (B, N, K, K, K), and their
        (B, N, K) mask; previous labels before the first token map to the start state 0."""
        F = self.dense(F)
        B, N = label_mask.shape[:2]
        idx, ok = allowed_first(label_mask, lengths)
        K = idx.shape[-1]
        pot = _ExpandChain.apply(F.gather(-1, idx[:, :, None, None, :].expand(*F.shape[:4], K)), self.order)
        for axis in range(pot.dim() - 2, 1, -1):  # y_{t-1}, then y_{t-2}
            back = pot.dim() - 1 - axis
            shifted = torch.cat([idx.new_zeros(B, back, K), idx[:, : N - back]], dim=1)[:, :N]
            view = [B, N] + [1] * (pot.dim() - 2)
            view[axis] = K
            shape = list(pot.shape)
            shape[axis] = K
            pot = pot.gather(axis, shifted.reshape(view).expand(shape))
        return pot, ok

    def _log_z_and_s(self, F, lengths, gold_mask, approx):
        scores = self.factored(F)
        if scores is not None:  # (a gold mask with one label per token reads that sequence's score off)
            gold = gold_mask.to(F.device)
            return structs.crf_log_partition(scores, lengths), structs.crf_log_partition(scores, lengths, label_mask=gold)
        sub, ok = self.restrict(F, gold_mask, lengths)
        log_z = structs.crf_log_partition(self.expand(F), lengths)
        return log_z, structs.crf_log_partition(sub, lengths, label_mask=ok)

    def uniform_expectation(self, F: Tensor, lengths: Tensor, weights: Tensor) -> Tensor:
        if self.trigram is not None:  # F first-order, the trigram's counts as the "bias"
            return uniform_expectation(F, lengths, lambda n, m: chain_moments(n, m, 2, trigram=True), weights,
                                       bias=self.trigram.to(device=F.device, dtype=F.dtype))
        return uniform_expectation(F, lengths, lambda n, m: chain_moments(n, m, self.order), weights)

    def _scores(self, F: Tensor):
        """What structs' chain functions read: :meth:`factored` where it applies, else the potentials."""
        scores = self.factored(F)
        return self.expand(F) if scores is None else scores

    def _decode(self, F, lengths, posterior, tree=False, probs=None) -> structs.Decoded:
        pot = self._scores(F)
        mask = None
        if posterior:
            if probs is None:
                probs = structs.crf_marginals(pot, lengths)
            mask = torch.nn.functional.one_hot(probs.argmax(-1), F.shape[-1]).bool()
        return structs.crf_viterbi(pot, lengths, label_mask=mask)

    def _marginals(self, F, lengths):
        return structs.crf_marginals(self._scores(F), lengths)


class _ExpandTree(torch.autograd.Function):
    """scores[:, h, d] = F[:, d-1, 0 if h < d else 1, label of h (0 = root), label of d]."""

    @staticmethod
    def forward(ctx, F: Tensor, max_dist: Optional[int]) -> Tensor:
        B, N, _, C, M = F.shape
        ctx.max_dist, ctx.shape = max_dist, F.shape
        scores = F.new_zeros(B, N + 1, N + 1, C - 1, M)
        scores[:, 0, 1:, 0, :] = F[:, :, 0, 0, :]  # root arcs; structs drops those over max_dist
        for w in range(1, N if max_dist is None else min(max_dist, N - 1) + 1):
            # diagonal element i is the arc i -> i + w (offset w) or i + w -> i (offset -w); i >= 1
            scores.diagonal(w, 1, 2)[..., 1:] = F[:, w:, 0, 1:].permute(0, 2, 3, 1)
            scores.diagonal(-w, 1, 2)[..., 1:] = F[:, : N - w, 1, 1:].permute(0, 2, 3, 1)
        return scores

    @staticmethod
    def backward(ctx, d_scores: Tensor):
        N = ctx.shape[1]
        dF = d_scores.new_zeros(ctx.shape)
        dF[:, :, 0, 0, :] = d_scores[:, 0, 1:, 0, :]
        for w in range(1, N if ctx.max_dist is None else min(ctx.max_dist, N - 1) + 1):
            dF[:, w:, 0, 1:] += d_scores.diagonal(w, 1, 2)[..., 1:].permute(0, 3, 1, 2)
            dF[:, : N - w, 1, 1:] += d_scores.diagonal(-w, 1, 2)[..., 1:].permute(0, 3, 1, 2)
        return dF, None


class _ExpandChain(torch.autograd.Function):
    """pot[:, t, a, (p,) c] = F[:, t, (a+1,) p+1, c], with the start state (context 0) read at the
    positions before the first token; one copy forward, one backward, no concatenation."""

    @staticmethod
    def forward(ctx, F: Tensor, order: int) -> Tensor:
        B, N, _, C, K = F.shape
        M = C - 1
        ctx.order, ctx.shape = order, F.shape
        if order == 1:
            pot = F.new_empty(B, N, M, K)
            pot[:, 1:] = F[:, 1:, 0, 1:]
            pot[:, 0] = F[:, 0, 0, :1]  # start transitions (structs reads row 0)
            return pot
        pot = F.new_empty(B, N, M, M, K)
        pot[:, 2:] = F[:, 2:, 1:, 1:]
        if N > 1:
            pot[:, 1] = F[:, 1, :1, 1:]  # y_{t-2} is the start state
        pot[:, 0] = F[:, 0, :1, :1]
        return pot

    @staticmethod
    def backward(ctx, d_pot: Tensor):
        dF = d_pot.new_zeros(ctx.shape)
        if ctx.order == 1:
            dF[:, 1:, 0, 1:] = d_pot[:, 1:]
            dF[:, 0, 0, 0] = d_pot[:, 0].sum(1)
            return dF, None
        dF[:, 2:, 1:, 1:] = d_pot[:, 2:]
        if ctx.shape[1] > 1:
            dF[:, 1, 0, 1:] = d_pot[:, 1].sum(1)
        dF[:, 0, 0, 0] = d_pot[:, 0].sum((1, 2))
        return dF, None


class _KnownGradient(torch.autograd.Function):
    """A value computed already (``value``, detached) whose gradient with respect to ``inputs`` is known
    (``grads``, one per input): backward returns them times the incoming gradient."""

    @staticmethod
    def forward(ctx, value: Tensor, grads, *inputs: Tensor) -> Tensor:
        ctx.grads = grads
        return value.clone()

    @staticmethod
    def backward(ctx, d_value: Tensor):
        return (None, None, *(d_value * g for g in ctx.grads))
