"""Is one group of trained taggers more accurate than another beyond the test set's sampling noise?

    python -m projects.paper.scripts.paired_bootstrap \
        --a training/glove-tuned/twitter/nldm/seed{0,1,2}/model-best \
        --b training/glove-transfer/softmax/seed{0,1,2}/model-best --test corpus/twitter/test.spacy

Each group is one system's models (one per seed). Every model tags the test sentences (their gold tokens, as
``spacy evaluate --gold-preproc``); per sentence, a group's correct tokens are averaged over its models. The
difference of the two groups' token accuracies is then resampled over test sentences (paired bootstrap,
Koehn 2004): the script prints each group's accuracy, the difference A - B, its 95% interval and the share of
resamples in which the sign of the difference flips (a one-sided p-value).

The seeds' spread (the ± of the result tables) says how much a difference depends on training's randomness;
this says how much it depends on which sentences the test set happened to hold. A difference that is consistent
over seeds can still be a handful of sentences. ``--decode-a`` / ``--decode-b`` load a group's structured
components (``crf_tagger``, ``nldm_tagger``) with another decoder than they were trained with (``viterbi`` or
``posterior``; a load-time setting, no retraining), e.g. the CRF decoded like the NLDM. Used by
projects/paper/results/diagnosis.md sections 27 and 28.
"""
import argparse
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

import numpy
import spacy
from spacy.tokens import Doc, DocBin

from projects.paper.registry import components_made_by
from spacy_nldm.pipeline.tagger import DECODERS


STRUCTURED_FACTORIES = ("crf_tagger", "nldm_tagger")


def structured_components(path: Path) -> List[str]:
    """Names of the trained pipeline's structured components, read from its config.cfg; raises ValueError if none."""
    names = components_made_by(spacy.util.load_config(path / "config.cfg"), STRUCTURED_FACTORIES)
    if not names:
        raise ValueError(f"{path}: no {' or '.join(STRUCTURED_FACTORIES)} component whose decoder could be set")
    return names


def load_pipeline(path: Path, decode: Optional[str] = None) -> spacy.Language:
    """The trained pipeline at ``path``; with ``decode``, every structured component decodes that way instead."""
    if decode is None:
        return spacy.load(path)
    return spacy.load(path, config={"components": {name: {"decode": decode} for name in structured_components(path)}})


def correct_per_sentence(models: Sequence[Path], test: Path, attr: str,
                         decode: Optional[str] = None) -> Tuple[numpy.ndarray, numpy.ndarray]:
    """(mean correct tokens over the models, tokens) per test sentence: two float arrays of shape (n_sentences,)."""
    test_docs = DocBin().from_disk(test)  # read once; each model reads the docs into its own vocab
    correct: List[numpy.ndarray] = []
    for path in models:
        nlp = load_pipeline(path, decode)
        gold = list(test_docs.get_docs(nlp.vocab))
        words = (Doc(nlp.vocab, words=[t.text for t in doc], spaces=[bool(t.whitespace_) for t in doc]) for doc in gold)
        right = [sum(getattr(g, attr) == getattr(p, attr) for g, p in zip(g_doc, p_doc))
                 for g_doc, p_doc in zip(gold, nlp.pipe(words))]
        correct.append(numpy.asarray(right, dtype=float))
    lengths = numpy.asarray([len(doc) for doc in gold], dtype=float)  # the same test sentences for every model
    return numpy.mean(correct, axis=0), lengths


def paired_bootstrap(correct_a: numpy.ndarray, correct_b: numpy.ndarray, lengths: numpy.ndarray,
                     samples: int = 10_000, seed: int = 0) -> Tuple[float, float, float, float]:
    """Token accuracy difference A - B in points, its 95% percentile interval and the share of resamples whose
    difference has the other sign (or is zero) than the observed one. Inputs: per sentence, shape (n,)."""
    rng = numpy.random.default_rng(seed)
    delta = correct_a - correct_b
    observed = 100 * delta.sum() / lengths.sum()
    picks = rng.integers(0, len(lengths), size=(samples, len(lengths)))
    resampled = 100 * delta[picks].sum(axis=1) / lengths[picks].sum(axis=1)
    low, high = numpy.percentile(resampled, [2.5, 97.5])
    flipped = float(numpy.mean(resampled <= 0 if observed > 0 else resampled >= 0))
    return float(observed), float(low), float(high), flipped


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--a", nargs="+", type=Path, required=True, help="group A: trained pipelines (model-best)")
    parser.add_argument("--b", nargs="+", type=Path, required=True, help="group B: trained pipelines")
    parser.add_argument("--test", type=Path, default=Path("corpus/twitter/test.spacy"))
    parser.add_argument("--attr", default="tag_", choices=["tag_", "pos_"], help="the token attribute scored")
    for group in ("a", "b"):
        parser.add_argument(f"--decode-{group}", choices=DECODERS, default=None,
                            help=f"decode group {group.upper()}'s structured components this way (default: as trained)")
    parser.add_argument("--samples", type=int, default=10_000, help="bootstrap resamples")
    parser.add_argument("--seed", type=int, default=0, help="seed of the resampling")
    args = parser.parse_args()
    for path in [args.test, *args.a, *args.b]:
        if not path.exists():
            parser.error(f"{path} does not exist")
    for models, decode in ((args.a, args.decode_a), (args.b, args.decode_b)):
        for path in models if decode else []:  # before any tagging: a bad group B fails at once, not after A
            try:
                structured_components(path)
            except ValueError as error:
                parser.error(str(error))
    correct_a, lengths = correct_per_sentence(args.a, args.test, args.attr, args.decode_a)
    correct_b, _ = correct_per_sentence(args.b, args.test, args.attr, args.decode_b)
    diff, low, high, flipped = paired_bootstrap(correct_a, correct_b, lengths, args.samples, args.seed)
    total = lengths.sum()
    print(f"A ({len(args.a)} models): {100 * correct_a.sum() / total:.2f}; "
          f"B ({len(args.b)} models): {100 * correct_b.sum() / total:.2f} "
          f"({len(lengths)} sentences, {int(total)} tokens)")
    print(f"A - B: {diff:+.2f} points, 95% interval [{low:+.2f}, {high:+.2f}], "
          f"sign flips in {100 * flipped:.1f}% of {args.samples} resamples over sentences")


if __name__ == "__main__":
    main()
