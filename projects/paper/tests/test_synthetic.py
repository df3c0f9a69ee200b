"""Synthetic infinite-order HMM data (projects.paper.synthetic, ``python -m projects.paper synth``)."""
import json
import math

import numpy as np
import pytest

from projects.paper.synthetic import (
    SPLITS,
    SynthSettings,
    conditional_entropy,
    generate,
    statistics,
    write_corpus,
)

N = 2000


@pytest.fixture(scope="module")
def data():
    return generate(SynthSettings(n_samples=N, seed=0))


def test_same_seed_same_data(data):
    again = generate(SynthSettings(n_samples=N, seed=0))
    assert np.array_equal(data.words, again.words)
    assert np.array_equal(data.labels, again.labels)
    assert np.array_equal(data.lengths, again.lengths)
    assert np.array_equal(data.split, again.split)


def test_other_seed_other_data(data):
    other = generate(SynthSettings(n_samples=N, seed=1))
    assert not np.array_equal(data.labels, other.labels)
    assert not np.array_equal(data.words, other.words)


def test_smaller_sets_are_prefixes(data):
    small = generate(SynthSettings(n_samples=500, seed=0))
    assert np.array_equal(small.words, data.words[:500])
    assert np.array_equal(small.labels, data.labels[:500])
    assert np.array_equal(small.lengths, data.lengths[:500])


def test_ranges(data):
    s = data.settings
    assert data.words.shape == data.labels.shape == (N, s.max_length)
    assert data.lengths.min() >= s.min_length and data.lengths.max() <= s.max_length
    # all lengths 1..10 occur in 2000 samples
    assert set(data.lengths.tolist()) == set(range(s.min_length, s.max_length + 1))
    pos = np.arange(s.max_length)[None, :]
    real = pos < data.lengths[:, None]
    assert (data.labels[real] >= 0).all() and (data.labels[real] < s.n_labels).all()
    assert (data.words[real] >= 0).all() and (data.words[real] < s.n_words).all()
    assert (data.labels[~real] == -1).all() and (data.words[~real] == -1).all()
    # every label is used, and a good part of the vocabulary
    assert len(np.unique(data.labels[real])) == s.n_labels
    assert len(np.unique(data.words[real])) > s.n_words // 2


def test_split_80_10_10(data):
    counts = np.bincount(data.split, minlength=3)
    assert counts.tolist() == [1600, 200, 200]


def test_other_settings_hold():
    s = SynthSettings(n_samples=300, seed=3, n_labels=3, n_words=50, max_length=4, min_length=2)
    d = generate(s)
    real = np.arange(4)[None, :] < d.lengths[:, None]
    assert d.lengths.min() >= 2 and d.lengths.max() <= 4
    assert d.labels[real].max() < 3 and d.words[real].max() < 50


def test_conditional_entropy_known_cases():
    rng = np.random.default_rng(0)
    iid = rng.integers(0, 4, size=(20000, 6))
    lengths = np.full(20000, 6)
    assert conditional_entropy(iid, lengths, 0, 4) == pytest.approx(math.log(4), abs=0.01)
    assert conditional_entropy(iid, lengths, 2, 4) == pytest.approx(math.log(4), abs=0.02)
    # a deterministic function of the label two steps back: order 2 needed
    seq = rng.integers(0, 2, size=(20000, 2))
    cols = [seq[:, 0], seq[:, 1]]
    for t in range(2, 6):
        cols.append(1 - cols[t - 2])
    det = np.stack(cols, 1)
    assert conditional_entropy(det, lengths, 1, 2, min_position=2) == pytest.approx(math.log(2), abs=0.01)
    assert conditional_entropy(det, lengths, 2, 2, min_position=2) == pytest.approx(0.0, abs=1e-12)


def test_long_range_label_dependencies(data):
    st = statistics(data, orders=(0, 1, 2, 3))
    h = {int(k): v for k, v in st["conditional_entropy_nats"].items()}
    assert h[0] > h[1] > h[2] > h[3]
    assert h[1] - h[3] > 0.05  # well beyond plug-in noise at 11k tokens
    assert st["model_entropy_nats"] < h[3]


def test_docbin_round_trip(data, tmp_path):
    from spacy.tokens import DocBin
    from spacy.vocab import Vocab

    st = statistics(data)
    paths = write_corpus(data, tmp_path, st)
    vocab = Vocab()
    for which in SPLITS:
        docs = list(DocBin().from_disk(paths[which]).get_docs(vocab))
        expected = data.sequences(which)
        assert len(docs) == len(expected)
        for doc, (xs, ys) in zip(docs, expected):
            assert [t.text for t in doc] == [f"w{x}" for x in xs]
            assert [t.tag_ for t in doc] == [f"L{y}" for y in ys]
    meta = json.loads(paths["settings"].read_text())
    assert SynthSettings.from_dict(meta["settings"]) == data.settings
    assert meta["split_sizes"] == {"train": 1600, "dev": 200, "test": 200}
    assert "conditional_entropy_nats" in meta["statistics"]


def test_cli(tmp_path):
    from typer.testing import CliRunner

    from projects.paper.cli import app

    result = CliRunner().invoke(app, ["synth", "--samples", "100", "--seed", "0", "--output", str(tmp_path)])
    assert result.exit_code == 0, result.output
    from spacy.tokens import DocBin

    sizes = [len(DocBin().from_disk(tmp_path / f"{which}.spacy")) for which in SPLITS]
    assert sizes == [80, 10, 10]  # --samples 100, split 80/10/10
    meta = json.loads((tmp_path / "settings.json").read_text())
    assert meta["settings"]["n_samples"] == 100 and meta["settings"]["seed"] == 0


def test_sample_seed_same_model_new_samples(data):
    other = generate(SynthSettings(n_samples=N, seed=0, sample_seed=1000))
    assert not np.array_equal(data.labels, other.labels)
    # the model is the same: the label statistics agree closely
    real = np.arange(10)[None, :] < data.lengths[:, None]
    real_o = np.arange(10)[None, :] < other.lengths[:, None]
    f = np.bincount(data.labels[real], minlength=5) / real.sum()
    g = np.bincount(other.labels[real_o], minlength=5) / real_o.sum()
    assert np.abs(f - g).max() < 0.03
    # and the default sample seed is seed + 1
    same = generate(SynthSettings(n_samples=N, seed=0, sample_seed=1))
    assert np.array_equal(data.labels, same.labels) and np.array_equal(data.split, same.split)
