"""``StructuredTagger``: the trainable component behind ``nldm_tagger`` and ``crf_tagger``.

The model (see :mod:`spacy_nldm.models.tagger`) gives factored edge scores per token; the component
cuts them into segments (sentences, or windows of ``max_length`` tokens: :mod:`spacy_nldm.models.segments`)
and the structure the model names (latent tree or chain) turns those into the loss, the decoded labels
(and latent trees) and the label marginals. Labels are plain strings: no prefix (such as spaCy's ``"!"``)
has a meaning.
"""
import inspect
import os
import warnings
from itertools import islice
from typing import Callable, Dict, Iterable, List, Optional, Tuple

import numpy
import srsly
import torch
from spacy import util
from spacy.attrs import IDS, ORTH
from spacy.language import Language
from spacy.parts_of_speech import IDS as POS_IDS
from spacy.pipeline import TrainablePipe
from spacy.tokens import Doc
from spacy.training import Example, validate_examples, validate_get_examples
from spacy.vocab import Vocab
from thinc.api import Model, set_dropout_rate, torch2xp, xp2torch

from ..models.segments import ScoreGradient, SegmentScores, TokenScores, pad_segments, segment_docs
from ..models.smoothing import mixture_weight
from ..models.tagger import get_structure, resize_labels
from .averages import ParamAverages, average_the_pipeline, listens
from ..defaults import NLDM
from .extensions import register_extensions


def _one_torch_thread_after_fork() -> None:
    """``nlp.pipe(n_process=...)`` forks worker processes, and torch's OpenMP thread pool does not
    survive a fork: a child's first parallel operation hangs. Forked children therefore use one
    torch thread (each worker is one process already)."""
    torch.set_num_threads(1)


_fork_hook_registered = False


def _register_fork_hook() -> None:
    """Register :func:`_one_torch_thread_after_fork` for this process, once: called when a component is
    made (before any ``nlp.pipe(n_process=...)`` can fork), so that importing the package registers nothing.
    A forked child inherits both the hook and the flag."""
    global _fork_hook_registered
    if _fork_hook_registered or not hasattr(os, "register_at_fork"):  # registered, or not POSIX
        return
    os.register_at_fork(after_in_child=_one_torch_thread_after_fork)
    _fork_hook_registered = True


ATTRS = ("tag", "pos")
DECODERS = ("viterbi", "posterior")
LOSSES = ("exact", "max")
TOK2VEC_LOSSES = ("sum", "mean", None)


class Predictions:
    """Decoded segments: labels (S, L), heads (S, L) or None, scores (S,), probs (S, L, M) or None;
    ``has_tree``: the model decodes a latent tree (heads and a tree score per doc); ``scored``: the structure,
    scores F and lengths they were decoded from (None for a batch without tokens), for what a subclass
    reads beside the labels."""

    def __init__(self, segments, labels, heads, best, probs, has_tree: bool, scored=None):
        self.segments = segments
        self.labels, self.heads, self.best, self.probs = labels, heads, best, probs
        self.has_tree = has_tree
        self.scored = scored


def same_tokens(example: Example) -> bool:
    """Whether the example's predicted and reference docs have the same tokens (their alignment is then the
    identity: gold annotation is read off the reference's arrays, cheaper than building the alignment)."""
    x, y = example.predicted, example.reference
    return len(x) == len(y) and numpy.array_equal(x.to_array(ORTH), y.to_array(ORTH))


class StructuredTagger(TrainablePipe):
    """Predicts ``Token.tag_`` or ``Token.pos_`` (``attr``) with a structured output layer.

    decode: "viterbi" (joint max over labels and tree) or "posterior" (arg-max label marginals).
    loss: "exact" (log Z - log S) or "max" (log S replaced by the best tree's score; NLDM only).
    max_length: longer sentences are scored in windows of this many tokens (with a warning).
    store_probs: keep the label marginals in ``Doc._.nldm_probs``.
    store_tree: (NLDM) keep the decoded latent tree in ``Token._.nldm_head`` (read from ``Doc._.nldm_heads``)
        and ``Doc._.nldm_tree_score``; false skips the search for the decoded labels' tree (same labels;
        both stay None).
    normalize_loss: the batch's loss and gradient are its mean per token (else its sum). spaCy's
        optimizers clip each parameter's gradient norm (``grad_clip = 1.0`` in spaCy's default
        optimizer): a sum over a batch of hundreds of tokens is clipped at almost every step, which
        slows learning (projects/paper/results/diagnosis.md); a mean per token is not. The loss shown in spaCy's
        training table is then also the mean per token.
    tok2vec_loss: the loss whose gradient reaches the tok2vec (or, through a listener, the shared one):
        "sum" over the batch's tokens, as spaCy's ``tagger`` sends it, "mean" per token, or None: the
        head's (``normalize_loss``), as before this setting existed (the paper's ``spacy train``
        configs keep that). The head's gradient (its own embeddings' too) follows ``normalize_loss``
        either way. With the default per-token head and summed tok2vec
        gradient, spaCy's clipping acts on the encoder at almost every step (as for its ``tagger``) and not
        on the head (projects/paper/results/diagnosis.md section 20).
    label_smoothing: as spaCy's ``tagger`` setting (each token's target keeps 1 - a on the gold label):
        the loss mixes the gold likelihood with the uniform distribution over the outputs
        (:mod:`spacy_nldm.models.smoothing`); 0 is the plain likelihood.
    average_params: when the optimizer keeps no weight averages, average anyway (:mod:`.averages`): with
        its own encoder, the component keeps the running average of its weights that spaCy's optimizer
        keeps with ``use_averages = true`` and tags and saves with it; listening to a shared ``tok2vec``,
        it turns on the optimizer's averaging (the whole pipeline's, which ``spacy train`` evaluates and
        saves). False, or an optimizer that averages already: the optimizer as configured. Tagging reads
        the averages from a copy of the model (:meth:`.ParamAverages.tagging_model`): it mutates nothing,
        so threads may tag with one pipeline at once.

    The keyword defaults are ``nldm_tagger``'s (:mod:`.defaults`); ``crf_tagger``'s factory passes its own.
    These settings come from the config only (attributes of the component); what is saved with the
    component (``cfg``) is what it learned: its labels (and an entity component's fitted ``entity_bias``). So
    ``spacy.load(path, config=...)`` can change any of them, and ``config.cfg`` is always the component's true
    configuration.
    """

    def __init__(
        self,
        vocab: Vocab,
        model: Model,
        name: str = "nldm_tagger",
        *,
        attr: str = NLDM["attr"],
        decode: str = NLDM["decode"],
        loss: str = NLDM["loss"],
        max_length: int = NLDM["max_length"],
        store_probs: bool = NLDM["store_probs"],
        store_tree: bool = NLDM["store_tree"],
        normalize_loss: bool = NLDM["normalize_loss"],
        tok2vec_loss: Optional[str] = NLDM["tok2vec_loss"],
        label_smoothing: float = NLDM["label_smoothing"],
        average_params: bool = NLDM["average_params"],
        scorer: Optional[Callable] = None,
    ):
        for key, value, allowed in (("attr", attr, self.attrs), ("decode", decode, DECODERS), ("loss", loss, LOSSES),
                                    ("tok2vec_loss", tok2vec_loss, TOK2VEC_LOSSES)):
            if value not in allowed:
                raise ValueError(f"[spacy-nldm] {name}: {key} must be one of {allowed}, not {value!r}")
        if max_length < 1:
            raise ValueError(f"[spacy-nldm] {name}: max_length must be positive, not {max_length}")
        if not 0.0 <= label_smoothing < 1.0:
            raise ValueError(f"[spacy-nldm] {name}: label_smoothing must be in [0, 1), not {label_smoothing}")
        if loss == "max" and model.attrs["structure"] != "tree":
            raise ValueError(f"[spacy-nldm] {name}: loss = 'max' needs a latent tree model (nldm_tagger)")
        register_extensions()
        _register_fork_hook()
        self.vocab = vocab
        self.model = model
        self.name = name
        self.scorer = scorer
        self.attr = attr
        self.decode = decode
        self.loss = loss
        self.max_length = max_length
        self.store_probs = store_probs
        self.store_tree = store_tree
        self.normalize_loss = normalize_loss
        self.tok2vec_loss = tok2vec_loss
        self.label_smoothing = label_smoothing
        self.average_params = average_params
        self.averages = ParamAverages()
        self._listens = listens(model)  # a listener has the optimizer average (see .averages)
        self.cfg = {"labels": []}  # what the component learned (saved with it)

    # ----------------------------------------------------------------- labels
    #: the attributes the component may predict (``attr``)
    attrs = ATTRS
    #: every score is divided by it at predict time (the entity components' ``temperature`` setting)
    temperature = 1.0

    @property
    def labels(self) -> Tuple[str, ...]:
        return tuple(self.cfg["labels"])

    def score_offsets(self) -> Optional[numpy.ndarray]:
        """A score (M,) added at predict time to every token's score of each output label, before the
        temperature; None: none (the taggers)."""
        return None

    @property
    def outputs(self) -> Tuple[str, ...]:
        """The labels the model scores, in the order of its output layer (the taggers': :attr:`labels`)."""
        return self.labels

    @property
    def label_data(self) -> List[str]:
        return list(self.labels)

    def add_label(self, label: str) -> int:
        """Add a label (also after initialization: the trained labels keep their weights)."""
        if not isinstance(label, str) or not label:
            raise ValueError(f"[spacy-nldm] {self.name}: labels must be non-empty strings, not {label!r}")
        if label in self.cfg["labels"]:
            return 0
        if self.attr == "pos" and label not in POS_IDS:
            raise ValueError(f"[spacy-nldm] {self.name}: {label!r} is not a Universal POS tag (attr = 'pos')")
        self.cfg["labels"].append(label)
        self.vocab.strings.add(label)
        if self.model.has_dim("nO"):
            resize_labels(self.model, len(self.outputs))
            self.averages.forget_copy()
        return 1

    # --------------------------------------------------------------- segments
    def segment_scores(self, docs: List[Doc], scores: TokenScores) -> SegmentScores:
        """The model's per-token scores of ``docs`` laid out per segment: each sentence, cut into
        windows of ``max_length`` tokens."""
        return pad_segments(scores, segment_docs(docs, self.max_length))

    # --------------------------------------------------------------- training
    def initialize(
        self, get_examples: Callable[[], Iterable[Example]], *, nlp: Optional[Language] = None, labels=None
    ) -> None:
        """Collect the labels (or take ``labels``), size the output layer, initialize the model."""
        validate_get_examples(get_examples, f"{type(self).__name__}.initialize")
        if labels is None:
            labels = self.labels_in(get_examples())
        for label in labels:
            self.add_label(label)
        if not self.labels:
            raise ValueError(f"[spacy-nldm] {self.name}: no {self.attr} labels found in the training examples")
        resize_labels(self.model, len(self.outputs))
        self.averages = ParamAverages()
        docs = [eg.predicted for eg in islice(get_examples(), 10)]
        self.model.initialize(X=[d for d in docs if len(d)] or None)
        if nlp is not None:
            self._weight_own_score(nlp)

    def labels_in(self, examples: Iterable[Example]) -> List[str]:
        """The labels of the examples' gold docs, sorted (what :meth:`initialize` collects)."""
        found = {getattr(tok, self.attr + "_") for eg in examples for tok in eg.reference}
        return sorted(found - {""})

    def structure(self, model: Model, tables: Dict[str, torch.Tensor]):
        """The structure that turns the model's scores into the loss, decoded labels and marginals
        (:func:`~spacy_nldm.models.tagger.get_structure`)."""
        return get_structure(model, tables)

    def _weight_own_score(self, nlp: Language) -> None:
        """Make ``[training.score_weights]`` weight what this component reports (``<attr>_acc``):
        the factory's defaults are for attr "tag", so with attr "pos" the weight of tag_acc moves to
        pos_acc, unless another component of the pipeline reports tag_acc (then a warning says
        what to set)."""
        weights = nlp.config["training"]["score_weights"]
        mine = f"{self.attr}_acc"
        other = "pos_acc" if self.attr == "tag" else "tag_acc"
        if weights.get(mine) or not weights.get(other):
            return
        for name, pipe in nlp.pipeline:
            if name == self.name:
                continue
            reports = (
                f"{pipe.attr}_acc" == other if isinstance(pipe, StructuredTagger)
                else other in (nlp.get_pipe_meta(name).default_score_weights or {})
            )
            if reports:
                warnings.warn(
                    f"[spacy-nldm] {self.name} reports {mine} (attr = {self.attr!r}), which [training.score_weights] "
                    f"does not weight; {name} reports {other}, so the weights are left alone: set {mine} in "
                    "[training.score_weights] to count this component in the training score"
                )
                return
        weights[mine], weights[other] = weights[other], None

    def get_loss(self, examples: Iterable[Example], scores: TokenScores) -> Tuple[float, ScoreGradient]:
        """Negative log-likelihood of the batch (its mean per token with ``normalize_loss``, else its
        sum) and its gradient with respect to the model's output (``scores``, computed on the examples'
        predicted docs): the per-token factored scores and the scorer's tables, with the factor of the
        gradient that reaches the tok2vec (``tok2vec_loss``)."""
        validate_examples(examples, f"{type(self).__name__}.get_loss")
        examples = list(examples)
        docs = [eg.predicted for eg in examples]
        self._check_finite(scores, docs)
        segmented = self.segment_scores(docs, scores)
        F = xp2torch(segmented.scores, requires_grad=True)
        tables = {name: xp2torch(table, requires_grad=True) for name, table in scores.tables.items()}
        gold = torch.from_numpy(self.gold_mask(examples, segmented)).to(F.device)
        lengths = torch.from_numpy(segmented.lengths)
        smoothing = mixture_weight(self.label_smoothing, len(self.outputs))
        structure = self.structure(self.model, tables)
        loss = structure.nll(F, lengths, gold, approx=self.loss, smoothing=smoothing,
                             gold_offsets=self.gold_offsets(gold, lengths))
        loss = loss + self.exclusion_loss(examples, segmented, structure, F, lengths, gold)
        n_tokens = int(segmented.lengths.sum())
        if not loss.requires_grad:  # no tokens
            zeros = {name: self.model.ops.alloc(table.shape, dtype="float32") for name, table in scores.tables.items()}
            return 0.0, ScoreGradient(self.model.ops.alloc(scores.scores.shape, dtype="float32"), zeros)
        if not bool(torch.isfinite(loss)):
            raise ValueError(
                f"[spacy-nldm] {self.name}: the loss is {float(loss)} on a batch of {len(examples)} docs "
                f"(first: {examples[0].reference.text[:60]!r}) with finite scores (spaCy's E910): the gold labels "
                "have no probability under the model, or the scores are too large for float32; check the data, "
                "or lower the learning rate"
            )
        if self.normalize_loss:
            loss = loss / float(n_tokens)
        names = list(tables)
        grads = torch.autograd.grad(loss, [F] + [tables[name] for name in names], allow_unused=True)
        d_tables = {name: torch2xp(grad if grad is not None else torch.zeros_like(tables[name]))
                    for name, grad in zip(names, grads[1:])}
        d_scores = ScoreGradient(segmented.unpad(torch2xp(grads[0])), d_tables, self._tok2vec_factor(n_tokens))
        return float(loss.detach()), d_scores

    def gold_offsets(self, gold: torch.Tensor, lengths: torch.Tensor) -> Optional[torch.Tensor]:
        """Scores (S, L, M) the loss's log S adds to the labels, given the gold mask (S, L, M) and the segments'
        lengths (S,) (:meth:`~spacy_nldm.models.structure.Structure.nll`); the taggers add none: None."""
        return None

    def exclusion_loss(self, examples: List[Example], scores: SegmentScores, structure, F: torch.Tensor,
                       lengths: torch.Tensor, gold: torch.Tensor) -> torch.Tensor:
        """What the loss adds for annotation that rules label sequences out beyond ``gold`` (the entity
        components' incorrect spans); the taggers have none: 0."""
        return F.new_zeros(())

    def update(self, examples: Iterable[Example], *, drop: float = 0.0, sgd=None, losses=None):
        """Learn from a batch of examples (as spaCy's ``tagger``: nothing happens, and the model is
        not called, on a batch without tokens; NaN or infinite scores are an error)."""
        if losses is None:
            losses = {}
        losses.setdefault(self.name, 0.0)
        validate_examples(examples, f"{type(self).__name__}.update")
        examples = list(examples)
        if not any(len(eg.predicted) for eg in examples):
            return losses
        set_dropout_rate(self.model, drop)
        scores, backprop = self.model.begin_update([eg.predicted for eg in examples])
        loss, d_scores = self.get_loss(examples, scores)
        backprop(d_scores)
        if sgd not in (None, False):
            self.finish_update(sgd)
        losses[self.name] += loss
        return losses

    def finish_update(self, sgd) -> None:
        """Apply the optimizer to the model's gradients. With ``average_params`` and an optimizer that
        keeps no averages, also update the component's own averages, or, listening to a shared
        ``tok2vec``, turn on the optimizer's (:mod:`.averages`)."""
        if self.average_params and getattr(sgd, "averages", None) is None:
            if self._listens:
                average_the_pipeline(sgd, self.name)
            else:
                sgd = self.averages.track(sgd)
        self.model.finish_update(sgd)

    def _tok2vec_factor(self, n_tokens: int) -> float:
        """Factor turning the loss of ``get_loss`` (per token or summed: ``normalize_loss``) into the
        ``tok2vec_loss`` for the gradient sent to the tok2vec (1 when that is None: the same loss)."""
        if self.normalize_loss and self.tok2vec_loss == "sum":
            return float(n_tokens)
        if not self.normalize_loss and self.tok2vec_loss == "mean":
            return 1.0 / max(1, n_tokens)
        return 1.0

    def _check_finite(self, scores: TokenScores, docs: List[Doc]) -> None:
        """spaCy's E940 for our scores: say which batch, and what to look at."""
        xp = self.model.ops.xp
        if not all(bool(xp.isfinite(s).all()) for s in (scores.scores, *scores.tables.values())):
            raise ValueError(
                f"[spacy-nldm] {self.name}: found NaN or infinite values in the edge scores of a batch of "
                f"{len(docs)} docs (first: {docs[0].text[:60]!r}) (spaCy's E940): the weights have diverged "
                "(lower the learning rate, or clip gradients with grad_clip) or the input vectors are not finite"
            )

    def gold_mask(self, examples: List[Example], scores: SegmentScores) -> numpy.ndarray:
        """Allowed labels (S, L, M) of the examples' segments (``scores``: :meth:`segment_scores` of their
        predicted docs), what the loss's log S sums over: the gold label, or every label where the gold one is
        unknown (spaCy's missing annotation, or a predicted token aligned to gold tokens of different labels)."""
        S, L = scores.scores.shape[:2]
        index = {label: i for i, label in enumerate(self.outputs)}
        # the tokens' gold label ids (-1: unknown), doc after doc as the segments hold them
        ids = [self._gold_ids(examples[d], index) for d in sorted({segment.doc for segment in scores.segments})]
        ids = numpy.concatenate(ids) if ids else numpy.zeros(0, dtype="int64")
        known = ids >= 0
        rows, cols = scores.rows[known], scores.cols[known]
        mask = numpy.ones((S, L, len(index)), dtype=bool)
        mask[rows, cols] = False
        mask[rows, cols, ids[known]] = True
        return mask

    def _gold_ids(self, example: Example, index: Dict[str, int]) -> numpy.ndarray:
        """The gold label id of each predicted token (-1: unknown: missing or unaligned), by the example's
        alignment; read off the reference's array when both docs have the same tokens (the alignment is
        then the identity, and building it would cost more than the rest of the loss)."""
        x, y = example.predicted, example.reference
        if same_tokens(example):
            values = y.to_array(IDS[self.attr.upper()])
            kinds, inverse = numpy.unique(values, return_inverse=True)
            labels = [y.vocab.strings[int(v)] if v else "" for v in kinds]
        else:
            golds = [label or "" for label in example.get_aligned(self.attr.upper(), as_string=True)]
            labels = sorted(set(golds))
            position = {label: i for i, label in enumerate(labels)}
            inverse = numpy.asarray([position[label] for label in golds], dtype="int64")
        ids = numpy.asarray([index.get(label, -2) if label else -1 for label in labels], dtype="int64")
        ids = ids[inverse.reshape(-1)] if len(labels) else numpy.zeros(len(x), dtype="int64")
        bad = numpy.flatnonzero(ids == -2)
        if len(bad):
            raise ValueError(
                f"[spacy-nldm] {self.name}: the gold {self.attr} {labels[inverse[bad[0]]]!r} of token {bad[0]} in the "
                f"doc {y.text[:60]!r} is not one of the {len(index)} labels of the component; initialize on data "
                "that has it or call add_label() first"
            )
        return ids

    # ------------------------------------------------------------- prediction
    def predict(self, docs: Iterable[Doc]) -> Predictions:
        """Decoded labels (and latent trees) of the docs' segments (with the averaged weights, when the
        component keeps them: :meth:`.ParamAverages.tagging_model`); a batch without tokens is answered
        without calling the model."""
        docs = list(docs)
        return self.predict_scored(docs, self.token_scores(docs))

    def token_scores(self, docs: List[Doc]) -> Optional[TokenScores]:
        """The model's output on the docs (with the averaged weights, when the component keeps them), checked
        finite; None for docs without tokens. What :meth:`predict_scored` decodes: a caller that decodes the
        same docs under several settings (``entity_bias``, ``temperature``) calls the model once."""
        if not any(len(doc) for doc in docs):
            return None
        token_scores = self.averages.tagging_model(self.model).predict(docs)
        self._check_finite(token_scores, docs)
        return token_scores

    def predict_scored(self, docs: List[Doc], token_scores: Optional[TokenScores]) -> Predictions:
        """:meth:`predict` from the model's output on the docs (:meth:`token_scores`)."""
        has_tree = self.model.attrs["structure"] == "tree" and self.store_tree
        if token_scores is None:
            none = numpy.zeros((0, 1), dtype="int64")
            probs = numpy.zeros((0, 1, len(self.outputs)), dtype="float32") if self.store_probs else None
            return Predictions([], none, none if has_tree else None, numpy.zeros(0), probs, has_tree)
        model = self.averages.tagging_model(self.model)
        tables = {name: xp2torch(table) for name, table in token_scores.tables.items()}
        scores = self.segment_scores(docs, token_scores)
        F = xp2torch(scores.scores)
        offsets = self.score_offsets()
        if offsets is not None:  # a score per output label, added to each token's (the entity bias)
            F = F + torch.as_tensor(offsets, dtype=F.dtype, device=F.device)
        if self.temperature != 1.0:  # every score over T: the distribution flatter (T > 1) or sharper
            tables = {name: table / self.temperature for name, table in tables.items()}
            F = F / self.temperature
        structure = self.structure(model, tables)
        lengths = torch.from_numpy(scores.lengths)
        probs = structure.label_marginals(F, lengths) if self.store_probs else None
        # the NLDM's decode returns the canonical tree of the decoded labels (independent of the batch);
        # posterior decoding reads the marginals already computed for store_probs
        labels, heads, best = structure.decode(F, lengths, posterior=self.decode == "posterior", tree=has_tree,
                                               marginals=probs)
        if heads is not None:
            heads = heads.cpu().numpy()
        probs = None if probs is None else probs.cpu().numpy()
        return Predictions(scores.segments, labels.cpu().numpy(), heads, best.cpu().numpy(), probs, has_tree,
                           scored=(structure, F, lengths))

    def set_annotations(self, docs: Iterable[Doc], preds: Predictions) -> None:
        docs = list(docs)
        if self.attr == "pos":
            ids = [POS_IDS[label] for label in self.labels]
        else:
            ids = [self.vocab.strings.add(label) for label in self.labels]
        has_tree = preds.has_tree
        # each doc's extension values are built first and set once (every ``doc._`` makes an accessor)
        heads_of = [numpy.full(len(doc), -1, dtype="int32") for doc in docs] if has_tree else None  # -1: the root
        tree_score_of = [0.0] * len(docs)
        probs_of = ([numpy.zeros((len(doc), len(ids)), dtype="float32") for doc in docs] if self.store_probs
                    else None)
        values = numpy.asarray(ids, dtype="uint64")[preds.labels]  # (S, L): each token's label as spaCy holds it
        if has_tree:  # the segments' heads 1..n (0: the root) as doc indices
            starts = numpy.asarray([start for _, start, _ in preds.segments], dtype="int64")[:, None]
            doc_heads = numpy.where(preds.heads == 0, -1, starts + preds.heads - 1)
        pieces: Dict[int, List[numpy.ndarray]] = {}  # each doc's segments' values, in order: they cover the doc
        for s, (d, start, end) in enumerate(preds.segments):
            pieces.setdefault(d, []).append(values[s, : end - start])
            if has_tree:
                heads_of[d][start:end] = doc_heads[s, : end - start]
                tree_score_of[d] += float(preds.best[s])
            if preds.probs is not None:
                probs_of[d][start:end] = preds.probs[s, : end - start]
        for d, doc in enumerate(docs if has_tree or self.store_probs else ()):
            underscore = doc._
            if has_tree:
                underscore.nldm_tree_score = tree_score_of[d]
                underscore.nldm_heads = heads_of[d]
            if self.store_probs:
                underscore.nldm_probs = probs_of[d]
                underscore.nldm_prob_labels = list(self.labels)
        attr = IDS[self.attr.upper()]
        for d, values_of_doc in pieces.items():
            docs[d].from_array([attr], numpy.concatenate(values_of_doc))

    # ---------------------------------------------------------- serialization
    def to_bytes(self, *, exclude=tuple()) -> bytes:
        """As spaCy's, with the weights it tags with (the averaged ones, when the component keeps them)."""
        serialize = {"cfg": lambda: srsly.json_dumps(self.cfg), "vocab": lambda: self.vocab.to_bytes(exclude=exclude),
                     "model": self.averages.tagging_model(self.model).to_bytes}
        return util.to_bytes(serialize, exclude)

    def to_disk(self, path, *, exclude=tuple()) -> None:
        """As spaCy's, with the weights it tags with (the averaged ones, when the component keeps them)."""
        model = self.averages.tagging_model(self.model)
        serialize = {"cfg": lambda p: srsly.write_json(p, self.cfg), "vocab": lambda p: self.vocab.to_disk(p, exclude=exclude),
                     "model": model.to_disk}
        util.to_disk(util.ensure_path(path), serialize, exclude)

    def from_bytes(self, bytes_data, *, exclude=tuple()):
        """As spaCy's; the loaded weights are what the component tags with (averaging starts again)."""
        super().from_bytes(bytes_data, exclude=exclude)
        self.averages = ParamAverages()
        return self

    def from_disk(self, path, *, exclude=tuple()):
        """As spaCy's; the loaded weights are what the component tags with (averaging starts again)."""
        super().from_disk(path, exclude=exclude)
        self.averages = ParamAverages()
        return self

    def score(self, examples: Iterable[Example], **kwargs):
        """The scorer's figures; a scorer with an ``attr`` parameter (the default, ``spacy-nldm.tag_scorer.v1``)
        scores the component's ``attr``, any other (say ``spacy.tagger_scorer.v1``) gets what spaCy passes."""
        if self.scorer is not None and "attr" in inspect.signature(self.scorer).parameters:
            kwargs = {"attr": self.attr, **kwargs}
        return super().score(examples, **kwargs)
