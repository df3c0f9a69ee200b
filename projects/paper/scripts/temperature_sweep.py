"""Dev log loss and test ECE of entity pipelines over a fine grid of temperatures: whether a finer fit than
``fit_temperature``'s grid (four steps to each doubling) would give better calibrated probabilities on test.

    python -m projects.paper.scripts.temperature_sweep corpus/ner/wnut17/dev.spacy corpus/ner/wnut17/test.spacy \\
        training/ner/wnut17-664ee596292b-seed0/model/model-best ... \\
        --output projects/paper/results/ner/temperature_sweep.md

For each pipeline (crf_ner or nldm_ner) and each temperature 2^(k / STEPS), k = 0..K: the dev log loss of its
predicted entities (what ``fit_temperature`` minimises) and the test ECE (``entity_calibration``'s, 10 bins).
The table marks each pipeline's dev optimum on the fine grid and on ``fit_temperature``'s grid.
"""
from pathlib import Path
from typing import List, Optional

import typer

STEPS = 16  # temperatures per doubling
LARGEST = 10  # k = 0..LARGEST: T from 1 to 2^(10/16) = 1.54


def main(
    dev: Path = typer.Argument(..., help="Dev DocBin (the fit's data)"),
    test: Path = typer.Argument(..., help="Test DocBin with gold entities"),
    models: List[Path] = typer.Argument(..., help="Trained pipelines with crf_ner or nldm_ner"),
    output: Optional[Path] = typer.Option(None, help="Also write the Markdown table here"),
) -> None:
    import spacy
    from spacy.tokens import DocBin
    from spacy.training import Corpus
    from spacy.vocab import Vocab

    from spacy_nldm.pipeline.calibration import TEMPERATURES, entity_component, entity_outcomes, log_loss

    from .entity_calibration import calibration, predictions

    docs = list(DocBin().from_disk(test).get_docs(Vocab()))
    gold = {(i, e.start, e.end, e.label_) for i, d in enumerate(docs) for e in d.ents}
    temperatures = [2.0 ** (k / STEPS) for k in range(LARGEST + 1)]
    lines = ["| pipeline | " + " | ".join(f"T {t:.3f}" for t in temperatures) + " |",
             "|---|" + "---|" * len(temperatures)]
    for path in models:
        nlp = spacy.load(path)
        examples = list(Corpus(str(dev), gold_preproc=True)(nlp))
        component = nlp.get_pipe(entity_component(nlp))
        losses, eces = [], []
        for t in temperatures:
            component.temperature = t
            losses.append(log_loss(entity_outcomes(nlp, examples)))
            eces.append(calibration(predictions(nlp, docs), gold)["ece"])
            typer.echo(f"{path} T {t:.3f}: dev log loss {losses[-1]:.4f}, test ECE {eces[-1]:.3f}", err=True)
        fine = min(range(len(temperatures)), key=lambda j: losses[j])
        coarse = min((j for j, t in enumerate(temperatures) if any(abs(t - c) < 1e-9 for c in TEMPERATURES)),
                     key=lambda j: losses[j])
        cells = [f"{e:.3f} ({loss:.4f})" + (" fine" if j == fine else "") + (" grid" if j == coarse else "")
                 for j, (e, loss) in enumerate(zip(eces, losses))]
        lines.append(f"| {path} | " + " | ".join(cells) + " |")
    text = "\n".join(lines)
    typer.echo(text)
    if output is not None:
        command = f"python -m projects.paper.scripts.temperature_sweep {dev} {test} " + " ".join(map(str, models))
        output.write_text(f"Test ECE (dev log loss) at each temperature; `fine`: the dev optimum of this grid, `grid`: "
                          f"the dev optimum among `fit_temperature`'s temperatures.\n\nCommand: `{command}`\n\n"
                          + text + "\n", encoding="utf8")


if __name__ == "__main__":
    typer.run(main)
