"""Why the structured taggers lost to spaCy's ``tagger``: one change at a time, in the same loop.

    python -m projects.paper.scripts.diagnose_accuracy --datasets twitter,en --seeds 0 [--groups scorer,init,...]

Every run is the plain loop of ``projects.paper.runs.loop`` (factory defaults unless the row
says otherwise, ``nlp.initialize``'s default optimizer, batches of 16 sentences, 10 epochs, test
accuracy of the final weights). Runs are kept in ``projects/paper/results/accuracy/runs.jsonl`` (shared with
``python -m projects.paper accuracy``, whose runs are the "factory defaults" rows) and never re-run; the tables
go to stdout and ``projects/paper/results/diagnosis/tables.md`` (the write-up is
``projects/paper/results/diagnosis.md``). Settings that are not part of the product (the old initialisation, a
normalised loss, thinc's unpatched PyTorch shim) are applied by the ``patch_*`` functions below in
the run's own process (``RunSpec.setup``).
"""
import statistics
import sys
from pathlib import Path
from typing import Dict, List, Tuple

import typer

ROOT = Path(__file__).resolve().parents[3]
if not __package__:  # run by path: the repository root on sys.path (for projects.paper.*), not this folder
    sys.path[0] = str(ROOT)

from projects.paper.registry import STUDY_RESULTS, canonical  # noqa: E402
from projects.paper.runs.loop import RunSpec, run_all  # noqa: E402
from projects.paper.cli.accuracy import default_signature  # noqa: E402

HERE = "projects.paper.scripts.diagnose_accuracy"  # the runs' processes import the patches from here


# ----------------------------------------------------------------------------- patches (run in the child)
def patch_fan_in_init() -> None:
    """The parametrisation before the fix: factors drawn at N(0, 1/fan_in) (U3 also / sqrt(R)), no
    normalisers in the forward pass."""
    from spacy_nldm.models import scorers

    def _init(self, name, shape):
        import torch

        if name in self.zero_init:
            return torch.zeros(shape)
        fan_in = 1 if name == "label_emb" or len(shape) < 2 else shape[-2]
        scale = 1.0 / max(1, self.sizes["R"]) ** 0.5 if name == "U3" else 1.0
        return torch.randn(shape) * scale / max(1, fan_in) ** 0.5

    scorers.Scorer._init = _init
    scorers.Scorer._norm = lambda self, symbol: 1.0


def patch_paper_emission() -> None:
    """The paper's emission h W_e t_c (rank D_t, no bias, W_e ~ N(0, 1/I), t ~ N(0, 1)), as before the fix."""
    import torch
    from spacy_nldm.models import scorers

    patch_fan_in_init()
    scorers.Scorer.emission_shapes = {"W_e": ("I", "T"), "label_emb": ("C", "T")}
    scorers.Scorer.zero_init = ()
    scorers.EmissionTransition.zero_init = ("psi",)
    scorers.EmissionTransition.shapes = {"psi": ("X", "C", "M")}

    def forward(self, h):
        F = self.interaction(h)
        if F.dim() == 3:
            F = F.expand(*h.shape[:-1], *F.shape)
        return F + ((h @ self.W_e) @ self.label_emb[1:].T)[..., None, None, :]

    scorers.Scorer.forward = forward
    del torch


def patch_random_emission() -> None:
    """The direct emission W drawn at N(0, 1/I) instead of zero (spaCy's tagger: zero)."""
    import torch
    from spacy_nldm.models import scorers

    base = scorers.Scorer._init

    def _init(self, name, shape):
        if name == "W":
            return torch.randn(shape) / shape[0] ** 0.5
        return base(self, name, shape)

    scorers.Scorer._init = _init


def patch_random_transitions() -> None:
    """Transition / interaction parameters drawn at N(0, 1) instead of zero."""
    import torch
    from spacy_nldm.models import scorers

    base = scorers.Scorer._init

    def _init(self, name, shape):
        if name in ("psi", "A", "U3", "psi2"):
            return torch.randn(shape)
        return base(self, name, shape)

    scorers.Scorer._init = _init
    scorers.EmissionTransition.zero_init = ("W", "b")
    scorers.Bilinear.zero_init = ("W", "b")
    scorers.Trilinear.zero_init = property(lambda self: ("W", "b"))


def _scale_loss(per: str) -> None:
    """The component's loss and its gradient (a ``ScoreGradient``) divided by the batch's tokens or sentences,
    on top of what ``normalize_loss`` does (these rows ran when the loss was the batch's sum)."""
    from dataclasses import replace

    from spacy_nldm.pipeline.tagger import StructuredTagger

    get_loss = StructuredTagger.get_loss

    def scaled(self, examples, scores):
        loss, grad = get_loss(self, examples, scores)
        n = max(1, int(scores.lengths.sum()) if per == "token" else len(scores.lengths))
        return loss / n, replace(grad, scores=grad.scores / n, tables={k: v / n for k, v in grad.tables.items()})

    StructuredTagger.get_loss = scaled


def patch_loss_per_token() -> None:
    """The batch's loss and gradient divided by its number of tokens (mean per token)."""
    _scale_loss("token")


def patch_loss_per_sentence() -> None:
    """The batch's loss and gradient divided by its number of sentences (mean per sentence)."""
    _scale_loss("sentence")


def patch_thinc_shim() -> None:
    """thinc's own PyTorchShim: averaged weights are not applied to the torch head (its use_params
    looks for keys that finish_update never writes)."""
    from thinc.api import PyTorchWrapper_v2
    from spacy_nldm.models import lstm, tagger

    for module in (tagger, lstm):  # the modules that wrap a torch module for thinc, by this name
        if not hasattr(module, "torch_layer"):
            raise RuntimeError(f"{module.__name__} has no torch_layer to replace: update this ablation")
        module.torch_layer = PyTorchWrapper_v2


# ----------------------------------------------------------------------------- the ablations
def adam(**kw) -> Dict:
    """spaCy's default training optimizer with some settings changed."""
    base = {"@optimizers": "Adam.v1", "beta1": 0.9, "beta2": 0.999, "L2_is_weight_decay": True, "L2": 0.01,
            "grad_clip": 1.0, "use_averages": False, "eps": 1e-8, "learn_rate": 0.001}
    return {**base, **kw}


def sgd(lr: float, **kw) -> Dict:
    return {"@optimizers": "SGD.v1", "learn_rate": lr, "L2": 0.0, "grad_clip": 5.0, "use_averages": False, **kw}


def m(**kw) -> Dict:
    return {"model": kw}


def hash_cnn(word_dropout: float) -> Dict:
    """spaCy's ``tagger`` factory's default tok2vec, ``spacy.HashEmbedCNN.v2``, written out as
    ``spacy.Tok2Vec.v2`` with the blocks HashEmbedCNN builds (subword features: NORM, PREFIX, SUFFIX, SHAPE,
    rows embed_size and embed_size // 2), so that its MultiHashEmbed can be ``spacy-nldm.WordDropoutHashEmbed.v1``;
    at rate 0 it is the same network. Its settings are read from the tagger factory's default."""
    from spacy.pipeline.tagger import DEFAULT_TAGGER_MODEL

    cnn = DEFAULT_TAGGER_MODEL["tok2vec"]
    assert cnn["@architectures"] == "spacy.HashEmbedCNN.v2" and cnn["subword_features"] and not cnn["pretrained_vectors"]
    width, rows = cnn["width"], cnn["embed_size"]
    return {
        "@architectures": "spacy.Tok2Vec.v2",
        "embed": {"@architectures": "spacy-nldm.WordDropoutHashEmbed.v1", "width": width,
                  "attrs": ["NORM", "PREFIX", "SUFFIX", "SHAPE"], "rows": [rows] + [rows // 2] * 3,
                  "include_static_vectors": False, "word_dropout": word_dropout},
        "encode": {"@architectures": "spacy.MaxoutWindowEncoder.v2", "width": width,
                   "window_size": cnn["window_size"], "maxout_pieces": cnn["maxout_pieces"], "depth": cnn["depth"]},
    }


#: The row of today's factory defaults (normalize_loss = true): the runs of ``python -m projects.paper accuracy`` itself.
NOW = "factory defaults now (normalize_loss = true: mean per token)"
#: The study's starting point: the factory defaults before ``normalize_loss`` (which this study led to)
#: existed, i.e. a summed loss, identified by their default signatures (``python -m projects.paper accuracy``). Every
#: structured run of the study sets ``normalize_loss = false`` explicitly, so that it stays the same
#: run whatever the factories' defaults become.
BASE_SIGNATURES = {"tagger": "fd60faa667", "crf_tagger": "5e1d1390ac", "nldm_tagger": "4a5a5d703f"}
STUDY_BASE = {"normalize_loss": False}

#: group -> rows of (label, systems, spec fields). Systems: s = softmax, c = crf, n = nldm.
#: Head-only changes run on the NLDM alone (the CRF shares its scorer and training path); changes
#: to the optimiser and the loop also run on softmax, the reference. Ordered by what they tell.
ABLATIONS: Dict[str, List[Tuple[str, str, Dict]]] = {
    "decode": [
        ("max_dist 1 (the chain)", "n", dict(config=m(max_dist=1))),
        ("max_dist 3", "n", dict(config=m(max_dist=3))),
        ("max_dist 10", "n", dict(config=m(max_dist=10))),
    ],
    "init": [
        ("trilinear + emission, fan-in init (U3 zero)", "n",
         dict(config=m(edge_scorer="trilinear"), setup=f"{HERE}:patch_fan_in_init")),
        ("emission W random N(0, 1/I)", "n", dict(setup=f"{HERE}:patch_random_emission")),
        ("transitions / interactions random N(0, 1)", "n", dict(setup=f"{HERE}:patch_random_transitions")),
    ],
    "averaging": [
        ("weight averaging on (head averaged: fixed shim)", "sn", dict(optimizer=adam(use_averages=True))),
        ("weight averaging on, thinc's shim (head not averaged)", "n",
         dict(optimizer=adam(use_averages=True), setup=f"{HERE}:patch_thinc_shim")),
    ],
    "optimizer": [
        ("Adam lr 0.0005", "sn", dict(optimizer=adam(learn_rate=0.0005))),
        ("Adam lr 0.005", "sn", dict(optimizer=adam(learn_rate=0.005))),
        ("SGD lr 0.1 (paper range)", "sn", dict(optimizer=sgd(0.1))),
        ("Adam, no gradient clipping", "sn", dict(optimizer=adam(grad_clip=0.0))),
    ],
    "loss": [
        (NOW, "scn", {}),
        ("loss mean per token", "n", dict(setup=f"{HERE}:patch_loss_per_token")),
        ("loss mean per sentence", "n", dict(setup=f"{HERE}:patch_loss_per_sentence")),
    ],
    "dropout": [
        ("dropout 0.1", "sn", dict(drop=0.1)),
        ("dropout 0.3", "sn", dict(drop=0.3)),
    ],
    "size": [
        ("bilinear, label_dim 10", "n", dict(config=m(label_dim=10))),
        ("bilinear, label_dim 100", "n", dict(config=m(label_dim=100))),
        ("trilinear, rank 100", "n", dict(config=m(edge_scorer="trilinear", rank=100))),
        ("trilinear, rank 600", "n", dict(config=m(edge_scorer="trilinear", rank=600))),
    ],
    "before": [
        ("before the fix: trilinear (paper form, fan-in init), the old default", "cn",
         dict(config={"decode": "viterbi", **m(edge_scorer="trilinear", emission=False)},
              setup=f"{HERE}:patch_fan_in_init")),
        ("before the fix: emission_transition (paper emission h W_e t_c)", "cn",
         dict(config={"decode": "viterbi", **m(edge_scorer="emission_transition")},
              setup=f"{HERE}:patch_paper_emission")),
    ],
    "scorer": [
        ("emission_transition", "n", dict(config=m(edge_scorer="emission_transition"))),
        ("trilinear (emission + interaction)", "n", dict(config=m(edge_scorer="trilinear"))),
        ("trilinear, paper's pure form (no emission)", "n", dict(config=m(edge_scorer="trilinear", emission=False))),
    ],
}
#: Groups measured from today's factory defaults (the NOW row) rather than the study's starting point; their
#: ``tok2vec`` changes apply to every system, spaCy's tagger included.
ON_TODAY: Dict[str, List[Tuple[str, str, Dict]]] = {
    "word_dropout": [
        ("word dropout 0.25 (every system's tok2vec)", "scn", dict(tok2vec=hash_cnn(0.25))),
        ("word dropout 0.4 (every system's tok2vec)", "scn", dict(tok2vec=hash_cnn(0.4))),
    ],
}
ABLATIONS.update(ON_TODAY)
FACTORIES = {"s": ("softmax", "tagger"), "c": ("crf", "crf_tagger"), "n": ("nldm", "nldm_tagger")}


def base_label(group: str) -> str:
    """The label of the row a group's changes are measured from (and their differences taken to)."""
    return NOW if group in ON_TODAY else "factory defaults"


def specs_for(group: str, datasets: List[str], seeds: List[int], corpus: str) -> List[Tuple[str, str, RunSpec]]:
    """(row label, system, spec) of a group; the "factory defaults" row is the spec of
    ``python -m projects.paper accuracy`` itself, so the two share runs."""
    out = []
    rows = [(base_label(group), "scn", {})] + ABLATIONS[group]
    for label, systems, fields in rows:
        for key in systems:
            name, factory = FACTORIES[key]
            for dataset in datasets:
                for seed in seeds:
                    spec_fields = dict(fields)  # a copy per run: every run of the row gets the row's config
                    config = spec_fields.pop("config", {})
                    tok2vec = spec_fields.pop("tok2vec", None)
                    if factory == "tagger":  # spaCy's tagger has no head settings of ours
                        config = {}
                    elif label != NOW and group not in ON_TODAY:
                        config = {**STUDY_BASE, **config}
                    if tok2vec is not None:
                        config = {**config, "model": {**config.get("model", {}), "tok2vec": tok2vec}}
                    if label == NOW:
                        system = f"{name} defaults {default_signature(factory)}"
                    elif label == "factory defaults":
                        system = f"{name} defaults {BASE_SIGNATURES[factory]}"
                    else:
                        system = f"{name}: {label}"
                    spec = RunSpec(dataset=dataset, system=system, factory=factory, seed=seed,
                                   config=config, corpus=corpus, **spec_fields)
                    out.append((label, name, spec))
    return out


def table(group: str, entries, done: Dict, datasets: List[str]) -> List[str]:
    """Rows: ablation; columns: dataset x system (mean over seeds), and the difference to softmax."""
    systems = ["softmax", "crf", "nldm"]
    acc: Dict[Tuple[str, str, str], List[float]] = {}
    labels: List[str] = []
    for label, name, spec in entries:
        if label not in labels:
            labels.append(label)
        row = done.get(spec.key())
        if row is not None:  # the weights spaCy would use: the averages where averaging is on
            acc.setdefault((label, name, spec.dataset), []).append(row.get("acc_avg") or row["acc"])
    head = ["change"] + [f"{d} {s}" for d in datasets for s in systems]
    lines = [f"### {group}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    base = {(d, s): acc.get((base_label(group), s, d)) for d in datasets for s in systems}
    for decoder in ("viterbi", "posterior"):  # the defaults' own weights, scored with each decoder
        label = f"factory defaults, {decoder} decoding (same weights)"
        for _, name, spec in entries:
            row = done.get(spec.key())
            if spec.system.split(" ")[1:2] == ["defaults"] and row and row.get("acc_by_decoder"):
                acc.setdefault((label, name, spec.dataset), []).append(row["acc_by_decoder"][decoder])
                if label not in labels:
                    labels.insert(1, label)
    for label in labels:
        cells = [label]
        for d in datasets:
            softmax = acc.get((label, "softmax", d)) or base[(d, "softmax")]
            for s in systems:
                values = acc.get((label, s, d))
                if not values:
                    cells.append("")
                    continue
                mean = statistics.mean(values)
                diff = f" ({mean - statistics.mean(softmax):+.2f})" if softmax and s != "softmax" else ""
                cells.append(f"{mean:.2f}{diff}")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def main(
    datasets: str = typer.Option("twitter,en", help="Datasets (see projects.paper.runs.loop.DATASETS; tw is twitter)."),
    seeds: str = typer.Option("0", help="Seeds, comma-separated."),
    groups: str = typer.Option(",".join(ABLATIONS), help="Ablation groups, comma-separated."),
    corpus: str = typer.Option("corpus", help="Converted corpora folder."),
    results: Path = typer.Option(ROOT / STUDY_RESULTS / "accuracy" / "runs.jsonl", help="Runs file (JSON lines), shared with python -m projects.paper accuracy."),
    workers: int = typer.Option(2, help="Runs at a time."),
    run: bool = typer.Option(True, help="Run missing runs (--no-run: tables of what is there)."),
) -> None:
    sets = [canonical(d) for d in datasets.split(",")]
    seed_list = [int(s) for s in seeds.split(",")]
    out = ROOT / STUDY_RESULTS / "diagnosis" / "tables.md"
    sections = _sections(out)
    for group in groups.split(","):
        entries = specs_for(group, sets, seed_list, corpus)
        specs = [spec for _, _, spec in entries]
        done = run_all(specs, results, workers=workers, log=typer.echo) if run else _done(results)
        lines = table(group, entries, done, sets)
        typer.echo("\n".join(lines) + "\n")
        sections[group] = "\n".join(lines) + "\n"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(sections.values()), encoding="utf8")
    typer.echo(f"Updated the groups {groups} in {out}")


def _sections(path: Path) -> Dict[str, str]:
    """The tables already in ``path`` by group (its "### <group>" blocks, in order), so that a run of some
    groups replaces their tables and keeps the others."""
    sections: Dict[str, str] = {}
    if path.exists():
        for block in path.read_text(encoding="utf8").split("### ")[1:]:
            sections[block.split("\n", 1)[0].strip()] = "### " + block.rstrip("\n") + "\n"
    return sections


def _done(results: Path) -> Dict:
    from projects.paper.runs.loop import load_results

    return load_results(results)


if __name__ == "__main__":
    typer.run(main)
