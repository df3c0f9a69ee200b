"""Calibration of entity confidence on a test set: expected calibration error, a reliability diagram and the
precision-recall curve by threshold, for trained pipelines side by side.

    python -m projects.paper.scripts.entity_calibration corpus/ner/wnut17/test.spacy \\
        --model crf_ner=training/ner/wnut17-a3d23e6651ee-seed0/model/model-best \\
        --model spancat=training/ner/wnut17-XXXX-seed0/model/model-best \\
        --output projects/paper/results/ner/calibration.md --figures projects/paper/results/ner/calibration

Each pipeline tags the test docs' tokens (no gold annotation). A predicted entity's confidence is
``Span._.nldm_prob`` for ``crf_ner`` and ``nldm_ner`` (their exact probability), for ``spancat`` the score it
stores in ``doc.spans[key].attrs["scores"]`` (its predicted spans: those above its own threshold), and for
``beam_ner`` the score of ``scored_ents`` (the summed probability of the beam's parses that hold the entity).
With ``--dev``, each crf_ner / nldm_ner pipeline is measured again at the temperature fitted on the dev docs
(``spacy_nldm.pipeline.fit_temperature``: the lowest log loss of its dev entities), in a row ``NAME@dev``; with ``--fit-bias`` the entity bias is fitted on dev first (``NAME@dev+bias``). An entity is
correct when the gold doc has the same span with the same type.

- ECE (10 equal-width bins over the predicted entities): sum over bins of (share of the entities in the bin) x
  |accuracy in the bin - mean confidence in the bin|.
- ECE if calibrated: the ECE the same confidences would show if they were exactly calibrated, each entity right
  with the probability it is given (its outcome drawn so, ``DRAWS`` times, seeded): the mean over the draws and
  its 95th percentile. On a few hundred entities the binned ECE of a perfectly calibrated model is well above 0;
  an ECE within this range is what sampling alone gives.
- The precision-recall curve by threshold: the entities at or above each confidence against all gold entities;
  its area is the average precision (sum over the correct entities, best first, of precision x 1 / n_gold).
A name given with several pipelines (``--model crf_ner=seed0/model-best --model crf_ner=seed1/model-best``: its seeds)
gets the mean ± sd of its pipelines, and each one's ECE and AP below. Prints a Markdown table (and writes it with
``--output``); ``--figures`` writes reliability.png and pr.png (each name's first pipeline).
"""
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy
import typer

BINS = 10
#: the draws of outcomes for "ECE if calibrated"
DRAWS = 2000
#: the thresholds of the precision / recall table (a worked choice of ``threshold``)
THRESHOLDS = (0.1, 0.3, 0.5, 0.7, 0.9)


def predictions(nlp, docs) -> List[Tuple[int, int, int, str, float]]:
    """(doc, start, end, label, confidence) of each entity the pipeline ``nlp`` predicts on the docs' tokens."""
    from spacy.tokens import Doc

    import spacy_nldm.pipeline  # noqa: F401  (Span._.nldm_prob)

    factories = {name: nlp.get_pipe_meta(name).factory for name, _ in nlp.pipeline}
    spans_keys = [nlp.get_pipe(name).cfg.get("spans_key") or "sc" for name, f in factories.items() if f == "spancat"]
    beam = [name for name, f in factories.items() if f == "beam_ner"]
    out = []
    inputs = [Doc(nlp.vocab, words=[t.text for t in d], spaces=[bool(t.whitespace_) for t in d]) for d in docs]
    if beam:  # the beam's entity scores: the summed probabilities of the beam's parses that hold the entity
        ner = nlp.get_pipe(beam[0])
        for i, doc in enumerate(nlp.pipe(inputs, batch_size=256, disable=beam)):
            beams = ner.predict([doc])
            scores = ner.scored_ents(beams)[0]
            ner.set_annotations([doc], beams)
            out += [(i, e.start, e.end, e.label_, float(scores[(e.start, e.end, e.label_)])) for e in doc.ents]
        return out
    for i, doc in enumerate(nlp.pipe(inputs, batch_size=256)):
        if spans_keys:
            group = doc.spans[spans_keys[0]]
            scores = group.attrs.get("scores", numpy.ones(len(group)))
            out += [(i, s.start, s.end, s.label_, float(p)) for s, p in zip(group, scores)]
        else:
            out += [(i, e.start, e.end, e.label_, float(e._.nldm_prob)) for e in doc.ents if e._.nldm_prob is not None]
    return out


def fitted(nlp, dev: Path, bias: bool = False) -> Optional[float]:
    """For a pipeline with crf_ner or nldm_ner: the temperature :func:`spacy_nldm.pipeline.fit_temperature` fits
    on the ``dev`` docs, after the entity bias (:func:`spacy_nldm.pipeline.fit_entity_bias`) with ``bias`` (the
    component is left at them); None for any other pipeline."""
    from spacy.training import Corpus

    from spacy_nldm.pipeline import fit_entity_bias, fit_temperature
    from spacy_nldm.pipeline.calibration import ENTITY_FACTORIES

    if not any(nlp.get_pipe_meta(name).factory in ENTITY_FACTORIES for name, _ in nlp.pipeline):
        return None
    examples = list(Corpus(str(dev), gold_preproc=True)(nlp))
    if bias:
        fit_entity_bias(nlp, examples)
    return fit_temperature(nlp, examples)


def mean_sd(values: List[float], digits: int) -> str:
    """``mean ± sd`` (sample sd) of the values, or the one value."""
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{numpy.mean(values):.{digits}f} ± {numpy.std(values, ddof=1):.{digits}f}"


def bin_index(conf: numpy.ndarray) -> numpy.ndarray:
    """Each confidence's bin, 0 to ``BINS`` - 1 (equal widths; a confidence of 1 in the last)."""
    return numpy.minimum((conf * BINS).astype(int), BINS - 1)


def expected_calibration_error(conf: numpy.ndarray, right: numpy.ndarray) -> numpy.ndarray:
    """The ECE (``BINS`` equal-width bins) of confidences ``conf`` (n,) against outcomes ``right`` (..., n) of 0
    and 1: one ECE per row of outcomes (shape ``right.shape[:-1]``; 0 for no confidences)."""
    bins = bin_index(conf)
    ece = numpy.zeros(right.shape[:-1])
    for b in range(BINS):
        inside = bins == b
        if inside.any():
            ece += inside.mean() * numpy.abs(right[..., inside].mean(-1) - conf[inside].mean())
    return ece


def ece_if_calibrated(conf: numpy.ndarray, draws: int = DRAWS, seed: int = 0) -> Tuple[float, float]:
    """(mean, 95th percentile) of the ECE of ``conf`` against outcomes drawn right with probability ``conf``,
    over ``draws`` draws: the ECE that sampling alone gives a perfectly calibrated model with these confidences."""
    if not len(conf):
        return 0.0, 0.0
    right = numpy.random.default_rng(seed).random((draws, len(conf))) < conf
    eces = expected_calibration_error(conf, right.astype("float64"))
    return float(eces.mean()), float(numpy.percentile(eces, 95))


def calibration(found, gold: set) -> Dict[str, object]:
    """ECE, average precision, the reliability bins and the precision-recall curve of ``found`` entities."""
    conf = numpy.asarray([f[-1] for f in found], dtype="float64")
    right = numpy.asarray([f[:-1] in gold for f in found], dtype="float64")
    bins = bin_index(conf)
    ece = float(expected_calibration_error(conf, right))
    rows = []  # (bin, entities, mean confidence, accuracy) of each bin that holds an entity
    for b in numpy.unique(bins):
        inside = bins == b
        rows.append((int(b), int(inside.sum()), float(conf[inside].mean()), float(right[inside].mean())))
    floor, floor95 = ece_if_calibrated(conf)
    order = numpy.argsort(-conf, kind="stable")
    hits = numpy.cumsum(right[order])
    precision = hits / numpy.arange(1, len(order) + 1)
    recall = hits / max(1, len(gold))
    ap = float((precision * right[order]).sum() / max(1, len(gold)))
    by_threshold = [(t, float(right[conf >= t].mean()) if (conf >= t).any() else float("nan"),
                     float(right[conf >= t].sum() / max(1, len(gold)))) for t in THRESHOLDS]
    return {"by_threshold": by_threshold, "ece": ece, "floor": floor, "floor95": floor95, "ap": ap, "n": len(found),
            "precision": float(right.mean()) if len(found) else 0.0, "recall": float(right.sum() / max(1, len(gold))),
            "bins": rows, "curve": (recall, precision)}


def main(
    test: Path = typer.Argument(..., help="Test DocBin with gold entities"),
    model: List[str] = typer.Option(..., help="NAME=PATH of a trained pipeline (repeatable)"),
    output: Optional[Path] = typer.Option(None, help="Also write the Markdown table here"),
    figures: Optional[Path] = typer.Option(None, help="Folder for reliability.png and pr.png"),
    dev: Optional[Path] = typer.Option(None, help="Dev DocBin: also each crf_ner / nldm_ner pipeline at the temperature fitted on it (its row NAME@dev, the temperatures in its last column)"),
    fit_bias: bool = typer.Option(False, "--fit-bias/--no-fit-bias", help="With --dev: fit the entity bias on dev before the temperature (the row NAME@dev+bias)"),
) -> None:
    import spacy
    from spacy.tokens import DocBin
    from spacy.vocab import Vocab

    docs = list(DocBin().from_disk(test).get_docs(Vocab()))
    gold = {(i, e.start, e.end, e.label_) for i, d in enumerate(docs) for e in d.ents}
    runs: Dict[str, List[dict]] = {}  # system -> one result per pipeline given under that name (its seeds)
    temperatures: Dict[str, List[float]] = {}
    for spec in model:
        name, _, path = spec.partition("=")
        nlp = spacy.load(path)
        runs.setdefault(name, []).append(calibration(predictions(nlp, docs), gold))
        typer.echo(f"{name} ({path}): ECE {runs[name][-1]['ece']:.3f}, AP {runs[name][-1]['ap']:.3f}", err=True)
        t = fitted(nlp, dev, fit_bias) if dev is not None else None
        if t is not None:
            row = f"{name}@dev+bias" if fit_bias else f"{name}@dev"
            runs.setdefault(row, []).append(calibration(predictions(nlp, docs), gold))
            temperatures.setdefault(row, []).append(t)
            typer.echo(f"{row} at temperature {t:.2f} (fitted on {dev}): ECE {runs[row][-1]['ece']:.3f}", err=True)
    lines = ["| system | n | entities | precision | recall | ECE (10 bins) | ECE if calibrated (mean; 95%) "
             "| area under the PR curve (AP) | temperature |", "|---|---|---|---|---|---|---|---|---|"]
    for name, rs in runs.items():
        cells = [mean_sd([r[key] * scale for r in rs], digits)
                 for key, scale, digits in (("n", 1, 0), ("precision", 100, 2), ("recall", 100, 2), ("ece", 1, 3))]
        cells.append(f"{numpy.mean([r['floor'] for r in rs]):.3f}; {numpy.mean([r['floor95'] for r in rs]):.3f}")
        cells.append(mean_sd([r["ap"] for r in rs], 3))
        temps = ", ".join(f"{t:.2f}" for t in temperatures.get(name, [])) or "1"
        lines.append(f"| {name} | {len(rs)} | " + " | ".join(cells) + f" | {temps} |")
    if any(len(rs) > 1 for rs in runs.values()):
        lines += ["", "ECE and AP of each pipeline, in the order given:", "", "| system | ECE | AP |", "|---|---|---|"]
        lines += [f"| {name} | " + ", ".join(f"{r['ece']:.3f}" for r in rs) + " | "
                  + ", ".join(f"{r['ap']:.3f}" for r in rs) + " |" for name, rs in runs.items()]
    lines += ["", "Precision / recall (%) of the entities at or above each threshold (mean over the pipelines of a "
              "system):", "", "| system | " + " | ".join(f">= {t}" for t in THRESHOLDS) + " |",
              "|---|" + "---|" * len(THRESHOLDS)]
    for name, rs in runs.items():
        cells = []
        for j in range(len(THRESHOLDS)):
            precisions = [r["by_threshold"][j][1] for r in rs]
            p = float("nan") if numpy.isnan(precisions).all() else numpy.nanmean(precisions)
            rc = numpy.mean([r["by_threshold"][j][2] for r in rs])
            cells.append(f"{100 * p:.1f} / {100 * rc:.1f}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    results = {name: rs[0] for name, rs in runs.items()}  # the figures: each system's first pipeline
    text = "\n".join(lines)
    typer.echo(text)
    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
        command = "python -m projects.paper.scripts.entity_calibration " + str(test) + "".join(
            f" --model {spec}" for spec in model) + (f" --dev {dev}" if dev is not None else "") + (
            " --fit-bias" if fit_bias else "")
        output.write_text(f"Entity confidence on {test} ({len(gold)} gold entities).\n\nCommand: `{command}`\n\n"
                          + text + "\n", encoding="utf8")
    if figures is not None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        figures.mkdir(parents=True, exist_ok=True)
        fig, ax = plt.subplots(figsize=(4.5, 4.5))
        ax.plot([0, 1], [0, 1], color="grey", linestyle=":")
        for name, r in results.items():
            ax.plot([b[2] for b in r["bins"]], [b[3] for b in r["bins"]], marker="o", label=f"{name} (ECE {r['ece']:.3f})")
        ax.set(xlabel="confidence", ylabel="accuracy", title="Reliability (predicted entities)")
        ax.legend()
        fig.tight_layout()
        fig.savefig(figures / "reliability.png", dpi=120)
        fig, ax = plt.subplots(figsize=(4.5, 4.5))
        for name, r in results.items():
            ax.plot(*r["curve"], label=f"{name} (AP {r['ap']:.3f})")
        ax.set(xlabel="recall", ylabel="precision", title="Precision-recall by threshold")
        ax.legend()
        fig.tight_layout()
        fig.savefig(figures / "pr.png", dpi=120)


if __name__ == "__main__":
    typer.run(main)
