"""``python -m spacy_nldm bench pipeline``: training and tagging speed of the spaCy components.

``--task tag`` (the default) times the taggers on an ARK file; ``--task ner`` the entity components beside
spaCy's ``ner`` on an entity file in a CoNLL layout (``python -m spacy_nldm convert ner`` reads the same files,
e.g. ``../shared/data/ner/wnut17/wnut17train.conll``), with the entity F1 on the training set as the sanity check.

Every system gets the same encoder (``--encoder``): ``bilstm``, hash embeddings + a 1-layer BiLSTM as in the
project configs, or ``cnn``, the tok2vec that ``spacy init config -p tagger`` writes for spaCy's tagger
(hash embeddings + a 4-layer maxout window CNN of width 96), and is trained for ``--epochs`` on an ARK file (the paper's training set is oct27.traindev, e.g.
``python -m spacy_nldm bench pipeline ../shared/data/twitter_pos/oct27.traindev``) in batches of about
``--batch-words`` words, then tags the same tweets. Words per second are
reported for wall time and for process CPU time (close to the wall time of a run alone on a shared
machine when ``--threads 1``). ``--gpu-id 0`` trains and tags on that GPU, as ``spacy train --gpu-id 0``
does; then only the wall-time columns measure the systems.
"""
import platform
import random
import time
from pathlib import Path
from typing import Dict, List, Optional

import typer

from ..defaults import NLDM_MODEL
from .app import bench_app

#: ``model`` and ``component`` settings over the factory's defaults (:mod:`spacy_nldm.defaults`);
#: all but the k=2, k=5 and k=none rows run by default
SYSTEMS: Dict[str, Dict] = {
    "nldm": {"factory": "nldm_tagger", "model": {}},
    "nldm store_tree=false": {"factory": "nldm_tagger", "model": {}, "component": {"store_tree": False}},
    "nldm k=2": {"factory": "nldm_tagger", "model": {"max_dist": 2}},
    "nldm k=5": {"factory": "nldm_tagger", "model": {"max_dist": 5}},
    "nldm k=none": {"factory": "nldm_tagger", "model": {"max_dist": None}},
    "crf order 1": {"factory": "crf_tagger", "model": {"order": 1}},
    "crf order 2": {"factory": "crf_tagger", "model": {"order": 2}},
    "spacy tagger": {"factory": "tagger", "model": {}},
    "nldm_ner": {"factory": "nldm_ner", "model": {}, "task": "ner"},
    "crf_ner": {"factory": "crf_ner", "model": {}, "task": "ner"},
    "crf_ner order 2": {"factory": "crf_ner", "model": {"order": 2}, "task": "ner"},
    "spacy ner": {"factory": "ner", "model": {}, "task": "ner"},
}
DEFAULT_SYSTEMS = {"tag": ("nldm", "nldm store_tree=false", "crf order 1", "crf order 2", "spacy tagger"),
                   "ner": ("nldm_ner", "crf_ner", "spacy ner")}
#: each task's systems' baselines in the ratio columns (first, second)
BASELINES = {"tag": ("crf order 1", "spacy tagger"), "ner": ("crf_ner", "spacy ner")}
#: the speed goals: (system, baseline, train ratio, tag ratio) on the CPU words per second
GOALS = (("crf order 1", "spacy tagger", 0.9, 0.9), ("nldm", "crf order 1", 0.7, 0.8),
         ("crf_ner", "spacy ner", 0.5, 0.8), ("nldm_ner", "crf_ner", 0.5, 0.5))
#: the encoders' widths by default
WIDTHS = {"cnn": 96, "bilstm": 100}


def encoder(kind: str, width: int) -> Dict:
    """The tok2vec every system gets: ``cnn`` (spaCy's tagger's, from ``spacy init config -p tagger``) or
    ``bilstm`` (the project configs')."""
    rows = [5000, 1000, 2500, 2500] if kind == "cnn" else [5000, 1000, 2500, 500]
    embed = {"@architectures": "spacy.MultiHashEmbed.v2", "width": width, "attrs": ["NORM", "PREFIX", "SUFFIX", "SHAPE"],
             "rows": rows, "include_static_vectors": False}
    if kind == "cnn":
        encode = {"@architectures": "spacy.MaxoutWindowEncoder.v2", "width": width, "depth": 4, "window_size": 1,
                  "maxout_pieces": 3}
    else:
        encode = {"@architectures": "spacy-nldm.TorchBiLSTMEncoder.v1", "width": width, "depth": 1, "dropout": 0.0}
    return {"@architectures": "spacy.Tok2Vec.v2", "embed": embed, "encode": encode}


def build(system: str, tok2vec: Dict, edge_scorer: str, label_dim: int, rank: int):
    import spacy

    spec = SYSTEMS[system]
    nlp = spacy.blank("en")
    if spec["factory"] == "tagger":  # no label is negative: the ARK tag "!" is a plain label
        config = {"neg_prefix": "\u0000", "model": {"@architectures": "spacy.Tagger.v2", "tok2vec": tok2vec}}
    elif spec["factory"] == "ner":  # the model `spacy init config -p ner` writes, on the same tok2vec
        config = {"model": {"@architectures": "spacy.TransitionBasedParser.v2", "state_type": "ner",
                            "extra_state_tokens": False, "hidden_width": 64, "maxout_pieces": 2, "use_upper": True,
                            "nO": None, "tok2vec": tok2vec}}
    else:
        model = {"edge_scorer": edge_scorer, "label_dim": label_dim, "rank": rank, **spec["model"]}
        config = {"model": {**model, "tok2vec": tok2vec}, **spec.get("component", {})}
    nlp.add_pipe(spec["factory"], name="tagger", config=config)
    return nlp


def batches(examples: List, batch_words: int):
    batch: List = []
    words = 0
    for eg in examples:
        batch.append(eg)
        words += len(eg)
        if words >= batch_words:
            yield batch
            batch, words = [], 0
    if batch:
        yield batch


def read_sentences(data: Path, task: str):
    """(words, tags) of an ARK file's tweets, or (words, BIO tags) of an entity file's sentences."""
    if task == "tag":
        from ..corpora.ark import read_ark

        return [(s.words, s.tags) for s in read_ark(data)]
    from ..corpora.conll_ner import read_conll_ner

    return [(s.words, s.tags) for s in read_conll_ner(data)]


def examples_of(nlp, sents, task: str):
    from spacy.tokens import Doc
    from spacy.training import Example
    from spacy.training.iob_utils import iob_to_biluo

    if task == "tag":
        return [Example.from_dict(Doc(nlp.vocab, words=w), {"tags": t}) for w, t in sents]
    return [Example.from_dict(Doc(nlp.vocab, words=w), {"entities": iob_to_biluo(t)}) for w, t in sents]


def train_accuracy(tagged, examples, task: str) -> float:
    """Token accuracy of the tags, or entity F1 (exact span and type), of the tagged training docs."""
    if task == "tag":
        pairs = [(t.tag_, g.tag_) for doc, eg in zip(tagged, examples) for t, g in zip(doc, eg.reference)]
        return sum(a == b for a, b in pairs) / max(1, len(pairs))
    found = {(i, e.start, e.end, e.label_) for i, doc in enumerate(tagged) for e in doc.ents}
    gold = {(i, e.start, e.end, e.label_) for i, eg in enumerate(examples) for e in eg.reference.ents}
    return 2 * len(found & gold) / max(1, len(found) + len(gold))


def run_system(system: str, sents, *, epochs: int, batch_words: int, tok2vec: Dict, edge_scorer: str,
               label_dim: int, rank: int, seed: int, warmup: int, tag_repeats: int) -> Dict[str, float]:
    """One system's training and tagging speed; tagging is timed ``tag_repeats`` times and the fastest pass
    counts (the same docs, the same model: one pass of a small file is short enough for the machine's
    noise to move it)."""
    from spacy.tokens import Doc
    from thinc.api import fix_random_seed

    fix_random_seed(seed)
    nlp = build(system, tok2vec, edge_scorer, label_dim, rank)
    task = SYSTEMS[system].get("task", "tag")
    examples = examples_of(nlp, sents, task)
    gold = list(examples)  # in the file's order (training shuffles ``examples``)
    optimizer = nlp.initialize(lambda: examples)
    n_words = sum(len(w) for w, _ in sents)
    rng = random.Random(seed)
    for batch in list(batches(examples, batch_words))[:warmup]:  # untimed: first-call costs
        nlp.update(batch, sgd=optimizer)
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(epochs):
        rng.shuffle(examples)
        for batch in batches(examples, batch_words):
            nlp.update(batch, sgd=optimizer)
    train_wall, train_cpu = time.perf_counter() - wall, time.process_time() - cpu
    docs = [Doc(nlp.vocab, words=w) for w, _ in sents[:warmup]]
    list(nlp.pipe(docs, batch_size=256))  # untimed, as the training: first-call costs (compiled loops)
    tag_wall = tag_cpu = float("inf")
    for _ in range(max(1, tag_repeats)):
        docs = [Doc(nlp.vocab, words=w) for w, _ in sents]  # fresh docs each pass, made before the clock starts
        wall, cpu = time.perf_counter(), time.process_time()
        tagged = list(nlp.pipe(docs, batch_size=256))
        tag_wall, tag_cpu = min(tag_wall, time.perf_counter() - wall), min(tag_cpu, time.process_time() - cpu)
    return {
        "train_wps": epochs * n_words / train_wall,
        "train_wps_cpu": epochs * n_words / train_cpu,
        "tag_wps": n_words / tag_wall,
        "tag_wps_cpu": n_words / tag_cpu,
        "train_acc": train_accuracy(tagged, gold, task),
    }


@bench_app.command("pipeline")
def bench_pipeline(
    data: Path = typer.Argument(..., help="ARK file to train and tag (token<TAB>tag lines), e.g. oct27.traindev; "
                                "with --task ner an entity file (token ... BIO tag lines), e.g. wnut17train.conll."),
    task: str = typer.Option("tag", help="tag (the taggers beside spaCy's tagger) or ner (the entity components "
                             "beside spaCy's ner)."),
    systems: str = typer.Option("", help=f"Comma-separated, from: {', '.join(SYSTEMS)} (default: the task's "
                                "systems but k=2, k=5, k=none and order 2 of crf_ner)."),
    encoder_kind: str = typer.Option("bilstm", "--encoder", help="The encoder every system gets: bilstm (hash "
                                     "embeddings + a BiLSTM) or cnn (spaCy's tagger's tok2vec)."),
    epochs: int = typer.Option(1, help="Training epochs timed."),
    limit: int = typer.Option(0, help="Use only the first N sentences (0 = all)."),
    batch_words: int = typer.Option(1000, help="Words per training batch."),
    width: int = typer.Option(0, help="Encoder width (0: 96 for cnn, as spaCy's tagger; 100 for bilstm)."),
    edge_scorer: str = typer.Option(NLDM_MODEL["edge_scorer"], help="Edge scorer of the structured systems."),
    label_dim: int = typer.Option(NLDM_MODEL["label_dim"], help="Label embedding size D_t."),
    rank: int = typer.Option(NLDM_MODEL["rank"], help="Trilinear rank D_r."),
    threads: int = typer.Option(0, help="torch threads (0 = torch's default)."),
    warmup: int = typer.Option(3, help="Untimed training batches before the timed epochs, and untimed docs "
                                       "tagged before the timed tagging (first-call costs)."),
    seed: int = typer.Option(0, help="Random seed of the weights and of the batch order."),
    gpu_id: int = typer.Option(-1, help="GPU to train and tag on (-1: the CPU)."),
    rounds: int = typer.Option(2, help="Rounds over the systems, every other one in reverse order; each figure is "
                                       "the system's best round (the first system measured is otherwise slower)."),
    tag_repeats: int = typer.Option(3, help="Timed tagging passes per round over the same docs; the fastest counts."),
    output: Optional[Path] = typer.Option(None, help="Also write the Markdown table here."),
) -> None:
    """Training and tagging words per second of nldm (the component's defaults, with and without the stored
    tree), crf (order 1, 2) and spaCy's tagger, or of nldm_ner, crf_ner and spaCy's ner, on one encoder, with
    the ratios of the speed goals."""
    import torch

    from ..corpora.errors import ConversionError

    if task not in DEFAULT_SYSTEMS:
        raise typer.BadParameter(f"--task must be one of {list(DEFAULT_SYSTEMS)}, got {task!r}")
    if encoder_kind not in WIDTHS:
        raise typer.BadParameter(f"--encoder must be one of {list(WIDTHS)}, got {encoder_kind!r}")
    width = width or WIDTHS[encoder_kind]
    tok2vec = encoder(encoder_kind, width)
    if threads:
        torch.set_num_threads(threads)
    where = "CPU"
    if gpu_id >= 0:  # as `spacy train --gpu-id`: thinc's ops on CuPy, one memory pool shared with torch
        from thinc.api import require_gpu, set_gpu_allocator

        try:
            set_gpu_allocator("pytorch")
            require_gpu(gpu_id)
        except ValueError as err:  # thinc's reasons: no CuPy, no GPU, a torch without CUDA
            typer.secho(f"error: --gpu-id {gpu_id}: {err}", fg=typer.colors.RED, err=True)
            raise typer.Exit(code=1)
        where = torch.cuda.get_device_name(gpu_id)
    try:
        sents = read_sentences(data, task)
    except ConversionError as err:
        typer.secho(f"error: {err}", fg=typer.colors.RED, err=True)
        raise typer.Exit(code=1)
    if limit:
        sents = sents[:limit]
    n_words = sum(len(w) for w, _ in sents)
    names = [s.strip() for s in systems.split(",") if s.strip()] or list(DEFAULT_SYSTEMS[task])
    of_task = [name for name in SYSTEMS if SYSTEMS[name].get("task", "tag") == task]
    unknown = [s for s in names if s not in of_task]
    if unknown:
        raise typer.BadParameter(f"unknown systems {unknown} for --task {task}; choose from {of_task}")
    first, second = BASELINES[task]
    head = (
        f"{platform.machine()}, {where}, torch {torch.__version__}, {torch.get_num_threads()} torch threads; "
        f"{data.name}: {len(sents)} sentences, {n_words} words; encoder MultiHashEmbed({width}) + "
        f"{'MaxoutWindow CNN(depth 4' if encoder_kind == 'cnn' else 'BiLSTM(depth 1'}, width {width}); "
        f"{edge_scorer} D_t={label_dim} D_r={rank}; {epochs} epoch(s), batches of ~{batch_words} words, "
        f"{warmup} untimed warm-up batches (and docs, before tagging); best of {rounds} round(s), "
        f"every other one in reverse order, and of {tag_repeats} tagging pass(es) per round"
    )
    header = (
        f"| system | train w/s | train w/s (CPU) | tag w/s | tag w/s (CPU) | train CPU w/s / {first} | tag CPU w/s / "
        f"{first} | train / {second} | tag / {second} | train-set {'acc' if task == 'tag' else 'entity F1'} |\n"
        "|---|---|---|---|---|---|---|---|---|---|"
    )
    typer.echo(head)
    results: Dict[str, Dict[str, float]] = {}
    for round_ in range(max(1, rounds)):
        for name in names if round_ % 2 == 0 else names[::-1]:
            row = run_system(name, sents, epochs=epochs, batch_words=batch_words, tok2vec=tok2vec,
                             edge_scorer=edge_scorer, label_dim=label_dim, rank=rank, seed=seed, warmup=warmup,
                             tag_repeats=tag_repeats)
            typer.echo(f"round {round_ + 1}, {name}: " + ", ".join(f"{k} {v:.3f}" for k, v in row.items()))
            best = results.setdefault(name, row)
            for key, value in row.items():  # words/s: the best round; the accuracy is the same in every round
                best[key] = max(best[key], value)
    results = {name: results[name] for name in names}
    ratio = lambda name, base, key: (results[name][key] / results[base][key]  # noqa: E731
                                     if name in results and base in results else float("nan"))
    lines = [header]
    for name, row in results.items():
        lines.append(
            f"| {name} | {row['train_wps']:.0f} | {row['train_wps_cpu']:.0f} | {row['tag_wps']:.0f} | "
            f"{row['tag_wps_cpu']:.0f} | {ratio(name, first, 'train_wps_cpu'):.2f} | "
            f"{ratio(name, first, 'tag_wps_cpu'):.2f} | {ratio(name, second, 'train_wps_cpu'):.2f} | "
            f"{ratio(name, second, 'tag_wps_cpu'):.2f} | {row['train_acc']:.3f} |"
        )
    goals = [f"{name} / {base}: train {ratio(name, base, 'train_wps_cpu'):.2f} (goal >= {train:g}), "
             f"tag {ratio(name, base, 'tag_wps_cpu'):.2f} (goal >= {tag:g})"
             for name, base, train, tag in GOALS if name in results and base in results]
    lines += [""] + goals if goals else []
    typer.echo("\n".join(lines))
    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(head + "\n\n" + "\n".join(lines) + "\n", encoding="utf8")
        typer.echo(f"Wrote {output}")
