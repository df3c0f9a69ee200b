"""From factored edge scores to the structured core: loss, decoding and label marginals.

``F`` (S, L, X, C, M) are a batch of segments' factored scores (see :mod:`.scorers`), ``lengths``
(S,) their real token counts. A structure made with the scorer's ``interaction`` table (X, C, M) (a
token-independent scorer's) reads F as emissions (S, L, M) instead, the scores being emissions + interaction:
the loss, marginals and canonical tree read the two factors, and only the rarer paths (partial labels, the max
loss, Viterbi decoding) build the full F (:meth:`Structure.full`). :class:`LatentTree` (the NLDM) and
:class:`Chain` (CRF of order 1 or 2) call :mod:`spacy_nldm.structs` on them: the NLDM's log Z, Viterbi decoding and marginals take F
itself, as :class:`~spacy_nldm.structs.DirectionalScores` (with ``max_dist`` their memory is
O(n k M^2): a 5,000-token sentence decodes in seconds); log S of partial labels and the chains expand
F to the dense tensors. Segments are grouped by length into buckets whose expanded tensors stay under
``budget`` floats, so padding to the longest sentence of a batch costs neither memory nor time.
Decoders return :class:`~spacy_nldm.structs.Decoded` (labels, heads, score), as structs does; the
NLDM's tree is the canonical one of the decoded labels (:func:`~spacy_nldm.structs.canonical_heads`), so it
does not depend on the batch.
"""
import math
from functools import lru_cache
from typing import Dict, List, Optional, Sequence, Tuple

import torch

from .. import structs
from .layout import expand_chain, expand_tree
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
#: the most sets of events :meth:`Structure.excluded_nll` sums over in one segment (one log S each)
MAX_EXCLUSION_SETS = 256


def real_tokens(mask: Tensor, lengths: Tensor) -> Tensor:
    """(B, N) True for the tokens within ``lengths`` of a (B, N, ...) tensor."""
    return torch.arange(mask.shape[1], device=mask.device)[None, :] < lengths.to(mask.device)[:, None]


def with_offsets(F: Tensor, offsets: Optional[Tensor]) -> Tensor:
    """F plus ``offsets`` (B, N, M) on its last axis, every structure's label of the token (its dependent's label
    in the tree's dense layout, the current label in the chain's), for each context: each token of a labelling
    gains its label's offset once. F itself when ``offsets`` is None."""
    if offsets is None:
        return F
    return F + offsets.reshape(*offsets.shape[:2], *([1] * (F.dim() - 3)), offsets.shape[-1])


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


def on_device(allowed, device):
    """``allowed`` (:class:`~spacy_nldm.structs.Transitions` or None) on ``device``."""
    return None if allowed is None else type(allowed)(*(mask.to(device) for mask in allowed))


@lru_cache(maxsize=4096)
def factored_moments(moments, n: int, m: int, *args):
    """``moments(n, m, *args)`` (mu (n, X, C, M), mu_bias, constant: :mod:`.smoothing`) for scores given as
    emissions + one table: ((mu summed over the contexts (n, 1, 1, M), mu_bias, constant), mu summed over the
    tokens (X, C, M), the table's counts)."""
    mu, mu_bias, constant = moments(n, m, *args)
    return (mu.sum((1, 2), keepdim=True), mu_bias, constant), mu.sum(0)


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


class ExclusionError(ValueError):
    """Excluded events that :meth:`Structure.excluded_nll` cannot take, in segment ``segment``."""

    def __init__(self, segment: int, problem: str):
        super().__init__(f"segment {segment}: {problem}")
        self.segment = segment
        self.problem = problem


class Structure:
    """Shared bucketing; subclasses implement the per-bucket ``_log_z_and_s`` (and ``_log_s``, log S alone),
    ``_decode``, ``_marginals``."""

    def __init__(self, budget: int = DEFAULT_BUDGET, interaction: Optional[Tensor] = None):
        self.budget = budget
        self.interaction = interaction

    def full(self, F: Tensor) -> Tensor:
        """The scores (S, L, X, C, M): F itself, or with an ``interaction`` table, emissions F (S, L, M) plus it."""
        if self.interaction is None:
            return F
        return F[:, :, None, None, :] + self.interaction.to(device=F.device, dtype=F.dtype)

    def _expectation(self, F: Tensor, lengths: Tensor, weights: Tensor, bias: Optional[Tensor], moments, *args
                     ) -> Tensor:
        """:func:`~.smoothing.uniform_expectation` of the scores, F or emissions + ``interaction``, with the
        moments ``moments(n, M, *args)`` (a cached function of :mod:`.smoothing`): the emissions' counts are
        F's summed over the contexts, the table's summed over the tokens (:func:`factored_moments`)."""
        if self.interaction is None:
            return uniform_expectation(F, lengths, lambda n, m: moments(n, m, *args), weights, bias=bias)
        m = F.shape[-1]
        total = uniform_expectation(F[:, :, None, None, :], lengths,
                                    lambda n, m: factored_moments(moments, n, m, *args)[0], weights, bias=bias)
        lens = lengths.to(F.device)
        per_length = torch.zeros(int(lens.max()) + 1 if len(lens) else 1, dtype=F.dtype, device=F.device)
        per_length.index_add_(0, lens, weights.to(device=F.device, dtype=F.dtype))  # the weights of each length
        counts = sum(per_length[n] * factored_moments(moments, n, m, *args)[1].to(F)
                     for n in sorted(set(lens.tolist()) - {0}))
        return total + (counts * self.interaction.to(F)).sum()

    def cost(self, n: int, m: int) -> int:  # floats of the expanded tensor of one segment
        raise NotImplementedError

    def _buckets(self, F: Tensor, lengths: Tensor, cost=None, budget: Optional[int] = None,
                 whole: Optional[bool] = None):
        """Yield (indices, F of the bucket cut to its longest segment, lengths) per bucket
        (``cost(n)`` and ``budget`` default to the structure's own). ``whole``: the whole batch as one
        bucket; False: buckets of similar lengths; default: :meth:`one_bucket` for the structure's own cost
        and budget.

        F is reordered by one gather and then split, so that the backward pass builds F's
        gradient with one scatter and one concatenation (indexing F once per bucket would
        allocate and add a gradient of F's full size per bucket); a batch that fits one bucket is
        not reordered (that copy of F cost a tenth of the NLDM's update on tweets).
        """
        m = F.shape[-1]
        lengths = lengths.to(F.device)
        if whole is None:
            whole = cost is None and budget is None and self.one_bucket(F)
        groups = None
        if not whole:
            cost = cost or (lambda n: self.cost(n, m))
            groups = length_buckets(lengths.tolist(), cost, budget or self.budget)
            whole = len(groups) == 1 and len(groups[0]) == len(lengths)
        if whole:  # no reordering copy of F
            if len(lengths):
                yield torch.arange(len(lengths), device=F.device), F[:, : max(1, int(lengths.max()))], lengths
            return
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

    def viterbi_by_sentence(self, F: Tensor) -> bool:
        """Whether Viterbi decoding of F runs sentence by sentence (padding costs it nothing, so the whole
        batch decodes at once): False."""
        return False

    def nll(self, F: Tensor, lengths: Tensor, gold_mask: Tensor, approx: str = "exact", smoothing: float = 0.0,
            gold_offsets: Optional[Tensor] = None) -> Tensor:
        """Summed -log P(y | x): log Z(x) - log S(x, y), S restricted by ``gold_mask`` (S, L, M).

        ``approx="max"`` replaces log S by the best tree's score (the paper's max approximation).
        ``smoothing`` b: the loss is (1 - b) -log P(y | x) + b U(x), U the cross-entropy of the uniform
        distribution over the outputs (:mod:`.smoothing`), on the segments whose every token has its label
        (as spaCy's ``tagger`` leaves tokens without a label out of its loss, smoothing included, a segment
        with unknown labels keeps the plain likelihood of what is known); 0 computes the plain loss, unchanged.
        ``gold_offsets`` (S, L, M): scores added to each token's labels in log S only (:func:`with_offsets`), so
        that log S sums the allowed sequences weighted by exp(their summed offsets): on tokens of unknown label,
        a prior over what they are; its gradient is then the allowed sequences' marginals under that weighting.
        """
        weights = self.smoothing_weights(gold_mask, lengths, smoothing)
        total = F.new_zeros(())
        for idx, Fb, lens in self._buckets(F, lengths):
            offsets = None if gold_offsets is None else gold_offsets[idx, : Fb.shape[1]].to(Fb)
            log_z, log_s = self._log_z_and_s(Fb, lens, gold_mask[idx, : Fb.shape[1]], approx, offsets)
            if weights is None:
                total = total + (log_z - log_s).sum()
            else:
                total = total + (log_z - (1.0 - weights[idx].to(log_s)) * log_s).sum()
        return total if weights is None else total - self.uniform_expectation(F, lengths, weights)

    def excluded_nll(self, F: Tensor, lengths: Tensor, gold_mask: Tensor, events: Sequence[Tuple[int, Tensor]]
                     ) -> Tensor:
        """What excluding events adds to :meth:`nll` (exact loss), per segment (S,) float64:
        -log P(none of segment s's events | its labels are among those ``gold_mask[s]`` allows); 0 for a segment
        without events. ``events``: (segment, label mask (L, M)), the mask allowing the sequences where the event
        holds (an entity's tags: :func:`~spacy_nldm.structs.span_mask`). Differentiable.

        By inclusion-exclusion over the sets T of a segment's events, with S(m) the summed exp-scores of the
        label sequences (and trees) that mask m allows and G the gold mask:
            P(none | G) = sum_T (-1)^|T| S(G & all of T) / S(G)
        A set whose masks leave a token no label has S = 0 and is skipped (two overlapping entities never hold
        together), so a segment costs one log S per set of compatible events, in float64. An event that holds
        for every sequence G allows (P = 0), or more than ``MAX_EXCLUSION_SETS`` sets in one segment, is an
        :class:`ExclusionError` naming the segment."""
        by_segment: Dict[int, List[Tensor]] = {}
        for s, mask in events:
            by_segment.setdefault(int(s), []).append(mask.to(gold_mask.device).bool())
        out = torch.zeros(F.shape[0], dtype=torch.float64, device=F.device)
        if not by_segment:
            return out
        rows, masks, signs, firsts = [], [], [], []
        for s, found in sorted(by_segment.items()):
            n = int(lengths[s])
            gold = gold_mask[s].bool()
            sets = [(gold, 1.0)]
            for event in found:
                if bool((gold[:n] & ~event[:n]).sum(-1).eq(0).all()):
                    raise ExclusionError(s, "an excluded event holds for every labelling the gold annotation "
                                            "allows (an incorrect span that is also a gold entity?)")
                sets += [(m & event, -sign) for m, sign in sets if bool((m & event)[:n].any(-1).all())]
                if len(sets) > MAX_EXCLUSION_SETS:
                    raise ExclusionError(s, f"its excluded events make more than {MAX_EXCLUSION_SETS} sets that "
                                            "can hold together: split the doc into sentences")
            firsts += [len(rows)] * len(sets)
            rows += [s] * len(sets)
            masks += [m for m, _ in sets]
            signs += [sign for _, sign in sets]
        idx = torch.tensor(rows, dtype=torch.long, device=F.device)
        log_s = self.log_sums(F[idx].double(), lengths.to(F.device)[idx], torch.stack(masks))
        first = torch.tensor(firsts, dtype=torch.long, device=F.device)
        terms = torch.tensor(signs, dtype=torch.float64, device=F.device) * torch.exp(log_s - log_s[first])
        kept = torch.zeros_like(out).index_add(0, idx, terms)  # P(none | G) of the segments with events
        has_events = torch.zeros(F.shape[0], dtype=torch.bool, device=F.device)
        has_events[idx] = True
        kept = torch.where(has_events, kept, torch.ones_like(kept))
        return torch.where(kept > 0, -torch.log(kept.clamp_min(1e-300)), torch.full_like(kept, float("inf")))

    def log_sums(self, F: Tensor, lengths: Tensor, label_mask: Tensor) -> Tensor:
        """log S (S,): per segment, the log of the summed exp-scores of the label sequences (and trees) that
        ``label_mask`` (S, L, M) allows (exact; -inf where it allows none); differentiable, its gradient the
        marginals under the mask. Every segment must have a token."""
        values, order = [], []
        for idx, Fb, lens in self._buckets(F, lengths):
            values.append(self._log_s(Fb, lens, label_mask[idx, : Fb.shape[1]], "exact"))
            order.append(idx)
        return torch.cat(values)[torch.argsort(torch.cat(order))]

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
            whole = self.one_bucket(F) if posterior else self.viterbi_by_sentence(F)
            for idx, Fb, lens in self._buckets(F, lengths, whole=whole):
                probs = None if marginals is None else marginals[idx, : Fb.shape[1]]
                found = self._decode(Fb, lens, posterior, has_tree, probs)
                best[idx] = found.score
                labels[idx, : Fb.shape[1]] = found.labels
                if found.heads is not None:
                    heads[idx, : Fb.shape[1]] = found.heads
        return structs.Decoded(labels, heads if has_tree else None, best)

    def span_log_probs(self, F: Tensor, lengths: Tensor, spans: Tensor, tags: "structs.EntityTags") -> Tensor:
        """log P (R,) that each of ``spans`` (R, 4) rows (segment, start, end, type) is exactly one entity of
        its type (:func:`~spacy_nldm.structs.crf_span_log_probs`, :func:`~spacy_nldm.structs.span_log_probs`)."""
        raise NotImplementedError

    def nbest(self, F: Tensor, lengths: Tensor, k: int) -> "structs.NBest":
        """The k best label sequences (S, k, L) of each segment and their log probabilities (S, k)."""
        raise NotImplementedError

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

    ``allowed`` (:class:`~spacy_nldm.structs.Transitions`): the label transitions a decoded sequence may
    make (BIO or BILUO rules). The tree does not order neighbours, so the rules cannot enter its
    distribution: the loss and the marginals are the NLDM's own, and :meth:`decode` returns the valid
    sequence with the largest sum of the exact label marginals (:func:`~spacy_nldm.structs.valid_decode`: the
    most correct tokens expected among the valid sequences), whatever ``posterior`` says.
    """

    has_tree = True

    def __init__(self, max_dist: Optional[int] = None, budget: int = DEFAULT_BUDGET, canonical: bool = True,
                 distance_bias: Optional[Tensor] = None, allowed=None, interaction: Optional[Tensor] = None):
        """``distance_bias`` (2, K): a score per arc direction and length (see
        :class:`~spacy_nldm.structs.DirectionalScores`), the table the model gives beside F
        (:meth:`~.scorers.Scorer.tables`). ``interaction`` (2, M+1, M): the one table of a scorer whose
        interaction reads no token vector, F then being the emissions (S, L, M), which the compiled lane
        reads in that form; without it F is the dense (S, L, 2, M+1, M)."""
        super().__init__(budget, interaction)
        self.max_dist = max_dist
        self.canonical = canonical
        self.distance_bias = distance_bias
        self.allowed = allowed

    def directional(self, F: Tensor) -> structs.DirectionalScores:
        """The scores with the distance bias, as the tree algorithms read them: F (B, N, 2, M+1, M), or the
        emissions (B, N, M) and the interaction as their factors."""
        if self.interaction is not None:
            table = self.interaction.to(device=F.device, dtype=F.dtype)
            return structs.DirectionalScores.from_factors(F, table, self._bias(F))
        return structs.DirectionalScores(F, self._bias(F))

    def _bias(self, F: Tensor) -> Optional[Tensor]:
        return None if self.distance_bias is None else self.distance_bias.to(device=F.device, dtype=F.dtype)

    def _with_bias(self, scores: Tensor, F: Tensor) -> Tensor:
        """Dense arc scores (B, N+1, N+1, K, K) plus the distance bias of each arc."""
        bias = self._bias(F)
        if bias is None:
            return scores
        return scores + structs.distance_bias_matrix(bias, scores.shape[1], self.max_dist)[None, :, :, None, None]

    def cost(self, n: int, m: int) -> int:
        return (n + 1) ** 2 * m * m

    def one_bucket(self, F: Tensor) -> bool:
        """On the CPU log Z and the marginals run sentence by sentence (:func:`spacy_nldm.structs.sentence_by_sentence`),
        whatever the padding: one bucket, no reordering copy of F."""
        return structs.sentence_by_sentence(F.device)

    def expand(self, F: Tensor) -> Tensor:
        """(B, N, 2, M+1, M) factored scores -> (B, N+1, N+1, M, M) arc scores of structs
        (the last axis may be any size: :meth:`restrict` expands scores of selected labels).

        Only the arcs structs reads are written (those up to ``max_dist`` long), and the backward
        pass reads only them, so the cost is O(B N k M^2) plus one zero fill.
        """
        return expand_tree(F, self.max_dist)

    def _mask(self, label_mask: Optional[Tensor]) -> Optional[Tensor]:
        if label_mask is None:
            return None
        return torch.cat([label_mask.new_ones(label_mask.shape[0], 1, label_mask.shape[2]), label_mask], dim=1)

    def restrict(self, F: Tensor, label_mask: Tensor, lengths: Tensor) -> Tuple[Tensor, Tensor]:
        """Arc scores over the allowed labels only: (B, N+1, N+1, K, K) and their (B, N+1, K) mask,
        K = the most labels any token allows (1 with full gold labels, so that log S costs next
        to nothing). Sub-label 0 of the root is its label 0."""
        F = self.full(F)
        B, N = label_mask.shape[:2]
        mask = torch.cat([label_mask.new_zeros(B, 1, label_mask.shape[2]), label_mask], dim=1)
        mask[:, 0, 0] = True
        idx, ok = allowed_first(mask, lengths + 1)
        K = idx.shape[-1]
        dep = F.gather(-1, idx[:, 1:, None, None, :].expand(*F.shape[:4], K))  # (B, N, 2, M+1, K)
        scores = self.expand(dep)  # (B, N+1, N+1, M, K)
        return self._with_bias(scores.gather(3, idx[:, :, None, :, None].expand(B, N + 1, N + 1, K, K)), F), ok

    def nll(self, F: Tensor, lengths: Tensor, gold_mask: Tensor, approx: str = "exact", smoothing: float = 0.0,
            gold_offsets: Optional[Tensor] = None) -> Tensor:
        """As :meth:`Structure.nll`; when every token's label is known (and ``approx="exact"``, without
        ``gold_offsets``), log S is taken on the gold arcs (:meth:`gold_arcs`) in buckets of ``GOLD_BUDGET``."""
        one_label = (gold_mask.sum(-1) == 1) | ~real_tokens(gold_mask, lengths)
        if approx != "exact" or not bool(one_label.all()) or gold_offsets is not None:
            return super().nll(F, lengths, gold_mask, approx, smoothing, gold_offsets)
        weights = self.smoothing_weights(gold_mask, lengths, smoothing)  # every segment labelled: all equal
        total = F.new_zeros(())
        for idx, Fb, lens in self._buckets(F, lengths):
            total = total + structs.log_partition(self.directional(Fb), lens, max_dist=self.max_dist).sum()
        for idx, Fb, lens in self._buckets(F, lengths, cost=lambda n: (n + 1) ** 2, budget=GOLD_BUDGET):
            labels = gold_mask[idx, : Fb.shape[1]].to(torch.uint8).argmax(-1)  # (B, N): the one allowed label
            gold = self._with_bias(self.gold_arcs(Fb, labels, self.interaction), Fb)
            log_s = structs.log_partition(gold, lens, max_dist=self.max_dist).sum()
            total = total - ((1.0 - smoothing) * log_s if smoothing else log_s)
        return total if weights is None else total - self.uniform_expectation(F, lengths, weights)

    def uniform_expectation(self, F: Tensor, lengths: Tensor, weights: Tensor) -> Tensor:
        bias = self._bias(F)
        lengths_of_bias = 0 if bias is None else bias.shape[1]
        return self._expectation(F, lengths, weights, bias, tree_moments, self.max_dist, lengths_of_bias)

    @staticmethod
    def gold_arcs(F: Tensor, labels: Tensor, interaction: Optional[Tensor] = None) -> Tensor:
        """Arc scores (B, N+1, N+1, 1, 1) of given labels (B, N) (every token's one allowed label), gathered
        from F: scores[b, h, d] = F[b, d-1, direction, label of h, label of d] (with ``interaction``, F the
        emissions: F[b, d-1, label of d] + interaction[direction, label of h, label of d])."""
        B, N = labels.shape
        head_label = torch.cat([labels.new_zeros(B, 1), labels + 1], dim=1)  # (B, N+1), 0 = the root
        h = torch.arange(N + 1, device=F.device)[:, None]
        d = torch.arange(1, N + 1, device=F.device)[None, :]
        b = torch.arange(B, device=F.device)[:, None, None]
        if interaction is None:
            arcs = F[b, d - 1, (h > d).long(), head_label[:, :, None], labels[:, None, :]]  # (B, N+1, N)
        else:
            table = interaction.to(device=F.device, dtype=F.dtype)
            emitted = F.gather(-1, labels[..., None])[..., 0]  # (B, N)
            arcs = emitted[:, None, :] + table[(h > d).long(), head_label[:, :, None], labels[:, None, :]]
        return torch.cat([arcs.new_zeros(B, N + 1, 1), arcs], dim=2)[..., None, None]  # arcs into the root: unread

    def _log_z_and_s(self, F, lengths, gold_mask, approx, offsets=None):
        # log Z reads F directly (no O(n^2 M^2) arc tensor or gradient)
        log_z = structs.log_partition(self.directional(F), lengths, max_dist=self.max_dist)
        return log_z, self._log_s(with_offsets(F, offsets), lengths, gold_mask, approx)

    def _log_s(self, F, lengths, gold_mask, approx):
        # log S runs on few labels, or, on the factored scores where the compiled loops run, on F with the gold
        # mask (the labels it leaves out at -inf)
        if approx != "max" and self.interaction is not None and structs.sentence_by_sentence(F.device):
            root = gold_mask.new_ones(gold_mask.shape[0], 1, gold_mask.shape[2])
            allowed = torch.cat([root, gold_mask], dim=1)  # (B, N+1, M): row 0, the root, is not read
            return structs.log_partition(self.directional(F), lengths, label_mask=allowed, max_dist=self.max_dist)
        sub, ok = self.restrict(F, gold_mask, lengths)
        if approx == "max":
            labels, heads, _ = structs.viterbi(sub, lengths, label_mask=ok, max_dist=self.max_dist)
            return self.tree_score(sub, labels, heads, lengths)
        return structs.log_partition(sub, lengths, label_mask=ok, max_dist=self.max_dist)

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
        if self.allowed is not None:  # the valid sequence of the most expected correct tokens
            if probs is None:
                probs = self._marginals(F, lengths)
            labels = structs.valid_decode(probs, lengths, on_device(self.allowed, probs.device)).labels
            if not tree:
                return structs.Decoded(labels, None, F.new_zeros(F.shape[0]))
            return self._canonical(F, labels, lengths)
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
        heads, score = structs.canonical_heads(self.directional(F), labels, lengths, self.max_dist,
                                               distance_bias=self._bias(F))
        heads, score = heads.to(labels.device), score.to(device=F.device, dtype=F.dtype)
        possible = torch.isfinite(score)
        labels = torch.where(possible[:, None], labels, torch.zeros_like(labels))
        heads = torch.where(possible[:, None], heads, torch.zeros_like(heads))
        return structs.Decoded(labels, heads, torch.where(possible, score, torch.full_like(score, -math.inf)))

    def _marginals(self, F, lengths):
        return structs.label_marginals(self.directional(F), lengths, max_dist=self.max_dist)

    def span_log_probs(self, F, lengths, spans, tags):
        """Summed over label sequences and trees (the NLDM's own distribution, invalid sequences included)."""
        with torch.no_grad():
            return structs.span_log_probs(self.directional(F), lengths, spans, tags, max_dist=self.max_dist)

    def nbest(self, F, lengths, k):
        """:func:`~spacy_nldm.structs.label_nbest`: the k valid sequences (with ``allowed``) of the largest
        products of label marginals, with their exact log probabilities, best first (not in general the k most
        probable sequences: see there)."""
        allowed = None if self.allowed is None else on_device(self.allowed, F.device)
        return structs.label_nbest(self.directional(F), lengths, k, allowed=allowed, max_dist=self.max_dist)


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

    ``allowed`` (:class:`~spacy_nldm.structs.Transitions`): the label transitions a sequence may make (BIO or
    BILUO rules), in every computation (:func:`~spacy_nldm.structs.constrain`): an invalid sequence has
    probability 0 and is never decoded; posterior decoding returns the valid sequence with the largest sum of
    label marginals (:func:`~spacy_nldm.structs.valid_decode`).
    """

    has_tree = False

    def __init__(self, order: int = 1, budget: int = CHAIN_BUDGET, token_independent: bool = False,
                 trigram: Optional[Tensor] = None, allowed=None, interaction: Optional[Tensor] = None):
        super().__init__(budget, interaction)
        if trigram is not None and order != 2:
            raise ValueError("a trigram table needs order 2")
        if interaction is not None and order == 2 and trigram is None:
            raise ValueError("an interaction table of order 2 needs the trigram table")
        self.order = order
        self.token_independent = token_independent or interaction is not None
        self.trigram = trigram
        self.allowed = allowed

    def constrained(self, scores, lengths: Tensor):
        """``scores`` (potentials or their factored form) with the forbidden transitions at -inf."""
        if self.allowed is None:
            return scores
        device = scores.device if isinstance(scores, Tensor) else scores.emissions.device
        return structs.constrain(scores, on_device(self.allowed, device), lengths)

    def factored(self, F: Tensor):
        """F as :class:`~spacy_nldm.structs.ChainScores` (order 1) or
        :class:`~spacy_nldm.structs.SecondOrderScores` (order 2 with ``trigram``): emissions (context label
        0) plus the tables of its first token, relative to that context; None unless ``token_independent``."""
        if not self.token_independent or F.shape[0] == 0 or F.shape[1] == 0:
            return None
        if self.interaction is None:
            first = F[0, 0, 0]  # (M+1, M): row 0 the start context, row 1 + a the previous label a
            emissions = F[:, :, 0, 1, :]
        else:  # F: the emissions
            first = self.interaction[0].to(device=F.device, dtype=F.dtype)
            emissions = F + first[1]
        if self.order == 1:
            return structs.ChainScores(emissions, first[1:] - first[1], first[0] - first[1])
        if self.trigram is None:
            return None
        trigram = self.trigram.to(device=F.device, dtype=F.dtype) + (first - first[1])[None]
        return structs.SecondOrderScores(emissions, trigram)

    def dense(self, F: Tensor) -> Tensor:
        """F in the layout :meth:`expand` reads (:meth:`full`): order 2 with ``trigram``, (B, N, M+1, M+1, M) =
        F + trigram."""
        F = self.full(F)
        if self.trigram is None:
            return F
        return F[:, :, 0, None] + self.trigram.to(device=F.device, dtype=F.dtype)

    def cost(self, n: int, m: int) -> int:
        return n * m ** (self.order + 1)

    def viterbi_by_sentence(self, F: Tensor) -> bool:
        """Order 1 on ChainScores on the CPU: the compiled Viterbi, one loop per sentence."""
        return self.order == 1 and self.token_independent and structs.sentence_by_sentence(F.device)

    def expand(self, F: Tensor) -> Tensor:
        """Factored scores -> potentials (B, N, M, M) or (B, N, M, M, M); the start state is 0.
        The last axis may be any size (:meth:`restrict` expands scores of selected labels)."""
        return expand_chain(self.dense(F), self.order)

    def restrict(self, F: Tensor, label_mask: Tensor, lengths: Tensor) -> Tuple[Tensor, Tensor]:
        """Potentials over the allowed labels only, (B, N, K, K) or (B, N, K, K, K), and their
        (B, N, K) mask; previous labels before the first token map to the start state 0."""
        F = self.dense(F)
        B, N = label_mask.shape[:2]
        idx, ok = allowed_first(label_mask, lengths)
        K = idx.shape[-1]
        pot = expand_chain(F.gather(-1, idx[:, :, None, None, :].expand(*F.shape[:4], K)), self.order)
        for axis in range(pot.dim() - 2, 1, -1):  # y_{t-1}, then y_{t-2}
            back = pot.dim() - 1 - axis
            shifted = torch.cat([idx.new_zeros(B, back, K), idx[:, : N - back]], dim=1)[:, :N]
            view = [B, N] + [1] * (pot.dim() - 2)
            view[axis] = K
            shape = list(pot.shape)
            shape[axis] = K
            pot = pot.gather(axis, shifted.reshape(view).expand(shape))
        return pot, ok

    def _log_z_and_s(self, F, lengths, gold_mask, approx, offsets=None):
        scores = self._scores(F, lengths)
        log_z = structs.crf_log_partition(scores, lengths)
        if offsets is not None:
            return log_z, self._log_s(with_offsets(F, offsets), lengths, gold_mask, approx)
        return log_z, self._log_s(F, lengths, gold_mask, approx, scores)

    def _log_s(self, F, lengths, gold_mask, approx, scores=None):
        """``scores``: :meth:`_scores` of F, where the caller has them."""
        if self.factored(F) is not None or self.allowed is not None:
            # (a gold mask with one label per token reads that sequence's score off)
            scores = self._scores(F, lengths) if scores is None else scores
            return structs.crf_log_partition(scores, lengths, label_mask=gold_mask.to(F.device))
        sub, ok = self.restrict(F, gold_mask, lengths)
        return structs.crf_log_partition(sub, lengths, label_mask=ok)

    def uniform_expectation(self, F: Tensor, lengths: Tensor, weights: Tensor) -> Tensor:
        if self.trigram is not None:  # F first-order, the trigram's counts as the "bias"
            return self._expectation(F, lengths, weights, self.trigram.to(device=F.device, dtype=F.dtype),
                                     chain_moments, 2, True)
        return self._expectation(F, lengths, weights, None, chain_moments, self.order)

    def _scores(self, F: Tensor, lengths: Tensor):
        """What structs' chain functions read: :meth:`factored` where it applies, else the potentials
        (constrained by ``allowed``)."""
        scores = self.factored(F)
        return self.constrained(self.expand(F) if scores is None else scores, lengths)

    def _decode(self, F, lengths, posterior, tree=False, probs=None) -> structs.Decoded:
        pot = self._scores(F, lengths)
        mask = None
        if posterior:
            if probs is None:
                probs = structs.crf_marginals(pot, lengths)
            if self.allowed is not None:
                return structs.valid_decode(probs, lengths, on_device(self.allowed, probs.device))
            mask = torch.nn.functional.one_hot(probs.argmax(-1), F.shape[-1]).bool()
        return structs.crf_viterbi(pot, lengths, label_mask=mask)

    def _marginals(self, F, lengths):
        return structs.crf_marginals(self._scores(F, lengths), lengths)

    def span_log_probs(self, F, lengths, spans, tags):
        with torch.no_grad():
            return structs.crf_span_log_probs(self._scores(F, lengths), lengths, spans, tags)

    def nbest(self, F, lengths, k):
        """Exact: the k most probable sequences (valid ones, with ``allowed``), best first."""
        with torch.no_grad():
            scores = self._scores(F, lengths)
            found = structs.crf_nbest(scores, lengths, k)
            log_z = structs.crf_log_partition(scores, lengths)
            return structs.NBest(found.labels, found.scores - log_z.to(found.scores)[:, None])
