"""Test entity scores of trained pipelines as trained and with the ``entity_bias`` fitted on dev
(``spacy_nldm.pipeline.fit_entity_bias``: the grid's best dev entity F1), side by side.

    python -m projects.paper.scripts.entity_bias --dev corpus/ner/wnut17/dev.spacy --test corpus/ner/wnut17/test.spacy \\
        --model crf_ner=training/ner/wnut17-XXXX-seed0/model/model-best --model crf_ner=...seed1/model/model-best \\
        --output projects/paper/results/ner/entity_bias.md

A name given with several pipelines (its seeds) gets the mean ± sd over them; each pipeline's fitted bias and
scores are listed below. F1, P, R: spaCy's ``ents_*`` of ``nlp.evaluate`` on the test docs' tokens (exact span and
type, as ``spacy evaluate``). Only crf_ner / nldm_ner pipelines (spaCy's components have no such bias).
"""
from pathlib import Path
from typing import Dict, List, Optional

import numpy
import typer

from projects.paper.scripts.entity_calibration import mean_sd


def examples(nlp, path: Path):
    """The DocBin's gold docs as examples on their own tokens (spaCy's ``Corpus`` with ``gold_preproc``)."""
    from spacy.training import Corpus

    return list(Corpus(str(path), gold_preproc=True)(nlp))


def main(
    model: List[str] = typer.Option(..., help="NAME=PATH of a trained crf_ner / nldm_ner pipeline (repeatable)"),
    dev: Path = typer.Option(..., help="Dev DocBin with gold entities: the bias is fitted on it"),
    test: Path = typer.Option(..., help="Test DocBin with gold entities"),
    output: Optional[Path] = typer.Option(None, help="Also write the Markdown tables here"),
) -> None:
    import spacy

    from spacy_nldm.pipeline import fit_entity_bias
    from spacy_nldm.pipeline.calibration import entity_component

    rows: Dict[str, List[dict]] = {}
    for spec in model:
        name, _, path = spec.partition("=")
        nlp = spacy.load(path)
        component = nlp.get_pipe(entity_component(nlp))
        test_examples, dev_examples = examples(nlp, test), examples(nlp, dev)
        component.entity_bias = 0.0
        plain = nlp.evaluate(test_examples)
        bias = fit_entity_bias(nlp, dev_examples)
        fitted = nlp.evaluate(test_examples)
        row = {"path": path, "bias": bias, **{f"{k}_plain": 100 * plain[f"ents_{k}"] for k in "fpr"},
               **{f"{k}_fitted": 100 * fitted[f"ents_{k}"] for k in "fpr"}}
        rows.setdefault(name, []).append(row)
        typer.echo(f"{name} ({path}): bias {bias:.2f}; test F1 {row['f_plain']:.2f} -> {row['f_fitted']:.2f}", err=True)
    command = ("python -m projects.paper.scripts.entity_bias --dev " + str(dev) + " --test " + str(test)
               + "".join(f" --model {spec}" for spec in model))
    lines = [f"Test entity F1 / P / R (%) on {test} as trained (bias 0) and with the entity bias fitted on {dev} "
             "(the best dev F1 on the grid -1 to 6, steps of 1/4, extended in the same steps up to 16 while its best "
             "is the largest value tried); mean ± sd over the pipelines of a name.\n",
             f"Command: `{command}`\n",
             "| system | n | F1 as trained | F1 bias fitted | change | P / R as trained | P / R bias fitted | fitted bias |",
             "|---|---|---|---|---|---|---|---|"]
    for name, rs in rows.items():
        change = [r["f_fitted"] - r["f_plain"] for r in rs]
        lines.append(
            f"| {name} | {len(rs)} | {mean_sd([r['f_plain'] for r in rs], 2)} | {mean_sd([r['f_fitted'] for r in rs], 2)} | "
            f"{numpy.mean(change):+.2f} | {numpy.mean([r['p_plain'] for r in rs]):.2f} / "
            f"{numpy.mean([r['r_plain'] for r in rs]):.2f} | {numpy.mean([r['p_fitted'] for r in rs]):.2f} / "
            f"{numpy.mean([r['r_fitted'] for r in rs]):.2f} | " + ", ".join(f"{r['bias']:.2f}" for r in rs) + " |")
    lines += ["", "| system | pipeline | bias | F1 as trained | F1 bias fitted |", "|---|---|---|---|---|"]
    lines += [f"| {name} | {r['path']} | {r['bias']:.2f} | {r['f_plain']:.2f} | {r['f_fitted']:.2f} |"
              for name, rs in rows.items() for r in rs]
    text = "\n".join(lines) + "\n"
    typer.echo(text)
    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text, encoding="utf8")


if __name__ == "__main__":
    typer.run(main)
