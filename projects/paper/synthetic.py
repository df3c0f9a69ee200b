"""Synthetic data from an infinite-order hidden Markov model (paper, section 6.2).

At step t the label is drawn from a distribution computed by an LSTM that has read *all* previous labels,
and the word from a distribution computed by a second LSTM that has read all previous words:

    h^y_t = LSTM_y(e(y_0=BOS), e(y_1), ..., e(y_{t-1}))
    P(y_t | y_<t)      = softmax(beta_y * tanh(W^y h^y_t + b^y) . E^y_{labels})

    h^x_t = LSTM_x(f(x_0=BOS), f(x_1), ..., f(x_{t-1}))
    P(x_t | x_<t, y_t) = softmax(beta_x * tanh(W^x h^x_t + U^x e(y_t) + b^x) . F_{words})

Word-LSTM conditioning (the paper leaves it open). The paper's word LSTM reads "the existing word sequence";
taken literally, the words would then be independent of the labels and carry no signal about them. We keep the
word LSTM's input to the previous words only, as in the paper, and let the *current label* enter at its output
layer (``U^x e(y_t)``), the place where an HMM's emission depends on the state. So the label chain is a pure
infinite-order Markov chain, the emission of x_t depends on y_t and on the whole word history x_<t, and the
word history carries information about the earlier labels only through the earlier words. (Feeding the label
into the LSTM's input instead would let the word LSTM's state accumulate the whole label history, a second
channel of label information that the paper does not describe.)

Everything (embeddings, LSTM weights, output layers) is drawn from a ``torch.Generator`` seeded with
``seed``; the sampling noise comes from a second generator seeded with ``sample_seed`` (default ``seed + 1``;
another sample seed draws new samples from the same model, e.g. a held-out test set), drawn as one
(n_samples, 2 * max_length + 1) block of uniforms, so that the first n samples of a larger set are the n
samples of a smaller one (the sets are nested; row i does not depend on n). Sampling is by inverse CDF on
float64 probabilities, the LSTMs run batched over all samples, one step per position.
"""
from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

SETTINGS_FILE = "settings.json"
SPLITS = ("train", "dev", "test")


@dataclass
class SynthSettings:
    """Settings of the generator; written next to the data as ``settings.json``."""

    n_samples: int = 10000
    seed: int = 0
    # seed of the sampling noise and the split (None: seed + 1 and seed + 2); the model is the same for any value
    sample_seed: Optional[int] = None
    n_labels: int = 5
    n_words: int = 1000
    max_length: int = 10
    min_length: int = 1
    hidden_size: int = 50  # LSTM hidden state
    output_size: int = 50  # LSTM output state (the tanh layer), also the embedding size
    # Scale of the random weights: LSTM and output weights ~ N(0, (init_scale / sqrt(fan_in))^2),
    # LSTM biases ~ N(0, (init_scale / 2)^2), embeddings ~ N(0, 1).
    init_scale: float = 4.0
    # Weight of the current label in the word LSTM's output layer (U^x ~ N(0, (word_label_scale / sqrt(d))^2)).
    word_label_scale: float = 1.0
    # Inverse temperatures of the label and word softmaxes (logits = beta * <output state, embedding> / sqrt(d)).
    label_beta: float = 4.0
    word_beta: float = 4.0
    split: Tuple[float, float, float] = (0.8, 0.1, 0.1)
    label_prefix: str = "L"
    word_prefix: str = "w"

    def to_dict(self) -> Dict:
        d = dataclasses.asdict(self)
        d["split"] = list(self.split)
        return d

    @classmethod
    def from_dict(cls, d: Dict) -> "SynthSettings":
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in d.items() if k in names}
        if "split" in kwargs:
            kwargs["split"] = tuple(kwargs["split"])
        return cls(**kwargs)


@dataclass
class SynthData:
    """Generated samples: ``words`` and ``labels`` are (n_samples, max_length) int64 arrays, valid up to
    ``lengths[i]`` (padding is -1). ``split[i]`` is 0 (train), 1 (dev) or 2 (test)."""

    settings: SynthSettings
    words: np.ndarray
    labels: np.ndarray
    lengths: np.ndarray
    split: np.ndarray
    # mean over tokens of the model's own entropy H(y_t | y_<t) (nats): the infinite-order limit.
    model_label_entropy: float = float("nan")
    extra: Dict = field(default_factory=dict)

    def sequences(self, which: Optional[str] = None) -> List[Tuple[List[int], List[int]]]:
        idx = np.arange(len(self.lengths))
        if which is not None:
            idx = idx[self.split == SPLITS.index(which)]
        return [
            (self.words[i, : self.lengths[i]].tolist(), self.labels[i, : self.lengths[i]].tolist())
            for i in idx
        ]

    def label_name(self, y: int) -> str:
        return f"{self.settings.label_prefix}{y}"

    def word_name(self, x: int) -> str:
        return f"{self.settings.word_prefix}{x}"


class _LSTM:
    """A single-layer LSTM cell with fixed random weights, stepped by hand (batched over samples)."""

    def __init__(self, in_size: int, hidden: int, scale: float, gen: torch.Generator):
        self.w_ih = torch.randn(4 * hidden, in_size, generator=gen, dtype=torch.float64) * (scale / math.sqrt(in_size))
        self.w_hh = torch.randn(4 * hidden, hidden, generator=gen, dtype=torch.float64) * (scale / math.sqrt(hidden))
        self.b = torch.randn(4 * hidden, generator=gen, dtype=torch.float64) * scale * 0.5
        self.hidden = hidden

    def init(self, batch: int) -> Tuple[torch.Tensor, torch.Tensor]:
        z = torch.zeros(batch, self.hidden, dtype=torch.float64)
        return z, z.clone()

    def step(self, x: torch.Tensor, state: Tuple[torch.Tensor, torch.Tensor]):
        h, c = state
        gates = x @ self.w_ih.T + h @ self.w_hh.T + self.b
        i, f, g, o = gates.chunk(4, dim=1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        return h, (h, c)


class InfiniteOrderHMM:
    """The generative model, with parameters drawn from ``settings.seed``."""

    def __init__(self, settings: SynthSettings):
        s = self.settings = settings
        gen = torch.Generator().manual_seed(int(s.seed))
        d, H, D = s.output_size, s.hidden_size, s.output_size
        sc = s.init_scale

        def randn(*shape, std=1.0):
            return torch.randn(*shape, generator=gen, dtype=torch.float64) * std

        # embeddings (the last row is BOS); the label and word embeddings are also the output embeddings
        self.label_emb = randn(s.n_labels + 1, d)
        self.word_emb = randn(s.n_words + 1, d)
        self.label_lstm = _LSTM(d, H, sc, gen)
        self.word_lstm = _LSTM(d, H, sc, gen)
        # output layers (no bias: a random bias would favour a few labels / words at every step)
        self.label_out_w = randn(D, H, std=sc / math.sqrt(H))
        self.word_out_w = randn(D, H, std=sc / math.sqrt(H))
        self.word_out_u = randn(D, d, std=s.word_label_scale / math.sqrt(d))
        self._word_emb32 = self.word_emb[:-1].to(torch.float32).contiguous()

    def label_logits(self, h: torch.Tensor) -> torch.Tensor:
        o = torch.tanh(h @ self.label_out_w.T)
        return self.settings.label_beta * (o @ self.label_emb[:-1].T) / math.sqrt(o.shape[1])

    def word_logits(self, h: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        o = torch.tanh(h @ self.word_out_w.T + self.label_emb[y] @ self.word_out_u.T)
        # the (batch x n_words) part runs in float32: it is nearly all of the generator's time
        o = (o * (self.settings.word_beta / math.sqrt(o.shape[1]))).to(torch.float32)
        return o @ self._word_emb32.T

    def sample(self, n: int, chunk: int = 8192) -> SynthData:
        s = self.settings
        T = s.max_length
        noise_seed = int(s.seed) + 1 if s.sample_seed is None else int(s.sample_seed)
        noise_gen = torch.Generator().manual_seed(noise_seed)
        # one row of uniforms per sample: T for the labels, T for the words, 1 for the length
        u = torch.rand(n, 2 * T + 1, generator=noise_gen, dtype=torch.float64)
        words = np.full((n, T), -1, dtype=np.int64)
        labels = np.full((n, T), -1, dtype=np.int64)
        ent_sum = torch.zeros(T, dtype=torch.float64)
        for start in range(0, n, chunk):
            stop = min(n, start + chunk)
            y_all, x_all, ent = self._sample_block(u[start:stop, : 2 * T])
            labels[start:stop] = y_all.numpy()
            words[start:stop] = x_all.numpy()
            ent_sum += ent
        span = s.max_length - s.min_length + 1
        lengths = (s.min_length + torch.floor(u[:, 2 * T] * span).clamp(max=span - 1)).to(torch.int64).numpy()
        pos = np.arange(T)[None, :]
        words[pos >= lengths[:, None]] = -1
        labels[pos >= lengths[:, None]] = -1
        # model entropy averaged over the tokens actually kept: position t is kept in the samples with length > t
        counts = np.array([(lengths > t).sum() for t in range(T)], dtype=np.float64)
        # ent_sum[t] is a sum over all n samples at position t; use its mean, weighted by how many keep t
        model_ent = float((ent_sum.numpy() / n * counts).sum() / counts.sum())
        return SynthData(s, words, labels, lengths, self._split(n), model_label_entropy=model_ent)

    def _sample_block(self, u: torch.Tensor):
        s = self.settings
        T = s.max_length
        B = u.shape[0]
        y_prev = torch.full((B,), s.n_labels, dtype=torch.int64)
        x_prev = torch.full((B,), s.n_words, dtype=torch.int64)
        st_y = self.label_lstm.init(B)
        st_x = self.word_lstm.init(B)
        ys, xs = [], []
        ent = torch.zeros(T, dtype=torch.float64)
        for t in range(T):
            h_y, st_y = self.label_lstm.step(self.label_emb[y_prev], st_y)
            p_y = torch.softmax(self.label_logits(h_y), dim=-1)
            ent[t] = -(p_y * torch.log(p_y.clamp_min(1e-300))).sum(-1).sum()
            y = _inverse_cdf(p_y, u[:, t])
            h_x, st_x = self.word_lstm.step(self.word_emb[x_prev], st_x)
            logits = self.word_logits(h_x, y)
            weights = logits.sub_(logits.max(dim=1, keepdim=True).values).exp_()
            x = _inverse_cdf(weights, u[:, T + t].to(weights.dtype))
            ys.append(y)
            xs.append(x)
            y_prev, x_prev = y, x
        return torch.stack(ys, 1), torch.stack(xs, 1), ent

    def _split(self, n: int) -> np.ndarray:
        """80/10/10 (settings.split) by a seeded random permutation of the samples."""
        s = self.settings
        split_seed = int(s.seed) + 2 if s.sample_seed is None else int(s.sample_seed) + 1
        gen = torch.Generator().manual_seed(split_seed)
        perm = torch.randperm(n, generator=gen).numpy()
        n_train = int(round(s.split[0] * n))
        n_dev = int(round(s.split[1] * n))
        split = np.empty(n, dtype=np.int64)
        split[perm[:n_train]] = 0
        split[perm[n_train : n_train + n_dev]] = 1
        split[perm[n_train + n_dev :]] = 2
        return split


def _inverse_cdf(p: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Index i with cdf[i-1] <= u * total < cdf[i], for unnormalised weights ``p`` (rows)."""
    cdf = torch.cumsum(p, dim=-1)
    idx = torch.searchsorted(cdf, (u * cdf[:, -1]).unsqueeze(1).contiguous(), right=True).squeeze(1)
    return idx.clamp(max=p.shape[1] - 1)


def generate(settings: SynthSettings, n_threads: Optional[int] = 1) -> SynthData:
    """Draw ``settings.n_samples`` samples from the model with parameters from ``settings.seed``.

    ``n_threads``: torch threads while generating (restored afterwards). One thread is the default: the
    operations are small and, on a shared 2-core machine, more threads made generation 4x slower.
    """
    old = torch.get_num_threads()
    if n_threads:
        torch.set_num_threads(n_threads)
    try:
        return InfiniteOrderHMM(settings).sample(settings.n_samples)
    finally:
        torch.set_num_threads(old)


# --------------------------------------------------------------------------------------------------- statistics


def conditional_entropy(
    labels: np.ndarray, lengths: np.ndarray, k: int, n_labels: Optional[int] = None, min_position: int = 0
) -> float:
    """Empirical (plug-in) conditional entropy H(y_t | y_{t-k}, ..., y_{t-1}) in nats over the tokens at
    positions t >= ``min_position`` (0-based). Positions before the start of the sequence read as a BOS
    symbol, so for t < k the context also tells how far from the start the token is; with
    ``min_position >= k`` every context is made of real labels."""
    n, T = labels.shape
    m = int(n_labels if n_labels is not None else labels.max() + 1)
    base = m + 1  # labels 0..m-1, BOS = m
    lab = np.concatenate([np.full((n, k), m, dtype=np.int64), np.where(labels < 0, m, labels)], axis=1)
    codes = []
    for t in range(min_position, T):
        keep = lengths > t
        if not keep.any():
            continue
        code = np.zeros(int(keep.sum()), dtype=np.int64)
        for j in range(k + 1):  # context (oldest first), then the label itself
            code = code * base + lab[keep, t + j]
        codes.append(code)
    if not codes:
        return float("nan")
    code = np.concatenate(codes)
    joint = np.bincount(code, minlength=base ** (k + 1)).reshape(-1, base).astype(np.float64)
    ctx = joint.sum(1, keepdims=True)
    nz = joint > 0
    total = joint.sum()
    return float(-(joint[nz] / total * np.log((joint / np.maximum(ctx, 1))[nz])).sum())


def label_given_word_accuracy(data: SynthData) -> float:
    """Accuracy of the best context-free tagger (majority label of each word type, on the same data):
    how much a word alone tells about its label."""
    mask = data.lengths[:, None] > np.arange(data.labels.shape[1])[None, :]
    x = data.words[mask]
    y = data.labels[mask]
    table = np.zeros((data.settings.n_words, data.settings.n_labels), dtype=np.int64)
    np.add.at(table, (x, y), 1)
    return float(table.max(1).sum() / table.sum())


def statistics(data: SynthData, orders: Sequence[int] = (0, 1, 2, 3, 4)) -> Dict:
    mask = data.lengths[:, None] > np.arange(data.labels.shape[1])[None, :]
    stats = {
        "n_samples": int(len(data.lengths)),
        "n_tokens": int(mask.sum()),
        "mean_length": float(data.lengths.mean()),
        "label_counts": np.bincount(data.labels[mask], minlength=data.settings.n_labels).tolist(),
        "word_types_seen": int(len(np.unique(data.words[mask]))),
        "conditional_entropy_nats": {
            str(k): conditional_entropy(data.labels, data.lengths, k, data.settings.n_labels) for k in orders
        },
        # the same on the positions that have a full context of max(orders) real labels (t >= max(orders)):
        # the fall with k is then not an effect of knowing the distance to the sequence start
        "conditional_entropy_nats_full_context": {
            str(k): conditional_entropy(
                data.labels, data.lengths, k, data.settings.n_labels, min_position=max(orders)
            )
            for k in orders
        },
        "model_entropy_nats": data.model_label_entropy,
        "word_majority_accuracy": label_given_word_accuracy(data),
    }
    return stats


def format_statistics(stats: Dict) -> str:
    lines = [
        f"samples {stats['n_samples']}, tokens {stats['n_tokens']}, mean length {stats['mean_length']:.2f}, "
        f"word types seen {stats['word_types_seen']}",
        f"label counts {stats['label_counts']}",
        "empirical conditional entropy of y_t given the previous k labels (nats):",
    ]
    prev = None
    for k, h in stats["conditional_entropy_nats"].items():
        drop = "" if prev is None else f"   (-{prev - h:.4f})"
        lines.append(f"  k={k}: {h:.4f}{drop}")
        prev = h
    lines.append(f"  model H(y_t | all previous labels): {stats['model_entropy_nats']:.4f}")
    full = stats.get("conditional_entropy_nats_full_context")
    if full:
        kmax = max(int(k) for k in full)
        lines.append(f"the same on tokens with at least {kmax} previous labels (t > {kmax}):")
        prev = None
        for k, h in full.items():
            drop = "" if prev is None else f"   (-{prev - h:.4f})"
            lines.append(f"  k={k}: {h:.4f}{drop}")
            prev = h
    lines.append(f"accuracy of the majority label of each word type: {stats['word_majority_accuracy']:.4f}")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------- spaCy I/O


def to_docs(data: SynthData, which: Optional[str], vocab=None):
    """spaCy Docs of one split (None: all samples), words as ``w123``, labels as ``L3`` on ``token.tag_``."""
    from spacy.tokens import Doc
    from spacy.vocab import Vocab

    vocab = vocab if vocab is not None else Vocab()
    docs = []
    for xs, ys in data.sequences(which):
        words = [data.word_name(x) for x in xs]
        tags = [data.label_name(y) for y in ys]
        docs.append(Doc(vocab, words=words, spaces=[True] * (len(words) - 1) + [False], tags=tags))
    return docs


def write_corpus(data: SynthData, output: Path, stats: Optional[Dict] = None) -> Dict[str, Path]:
    """Write ``train.spacy``, ``dev.spacy``, ``test.spacy`` and ``settings.json`` under ``output``."""
    from spacy.tokens import DocBin
    from spacy.vocab import Vocab

    output = Path(output)
    output.mkdir(parents=True, exist_ok=True)
    vocab = Vocab()
    paths = {}
    for which in SPLITS:
        db = DocBin(attrs=["ORTH", "TAG", "SPACY"], store_user_data=False)
        for doc in to_docs(data, which, vocab):
            db.add(doc)
        path = output / f"{which}.spacy"
        db.to_disk(path)
        paths[which] = path
    meta = {
        "generator": "projects.paper.synthetic (infinite-order HMM, paper section 6.2)",
        "settings": data.settings.to_dict(),
        "split_sizes": {w: int((data.split == i).sum()) for i, w in enumerate(SPLITS)},
    }
    if stats is not None:
        meta["statistics"] = stats
    (output / SETTINGS_FILE).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf8")
    paths["settings"] = output / SETTINGS_FILE
    return paths


def write_heldout(data: SynthData, path: Path) -> Path:
    """All the samples of ``data`` in one DocBin (a held-out test set drawn with another ``sample_seed``),
    with the settings in ``<path stem>.json`` beside it."""
    from spacy.tokens import DocBin

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    db = DocBin(attrs=["ORTH", "TAG", "SPACY"], store_user_data=False)
    for doc in to_docs(data, None):
        db.add(doc)
    db.to_disk(path)
    meta = {"generator": "projects.paper.synthetic (held-out set)", "settings": data.settings.to_dict()}
    path.with_suffix(".json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf8")
    return path
