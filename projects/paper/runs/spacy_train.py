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

Runs are kept in a JSON-lines file keyed by the config's text, dataset and seed: a finished run is never
recomputed, a changed default (which changes the generated config) makes a new one.
"""
import hashlib
import json
import os
import platform
import re
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from .queue import spacy_evaluate, spacy_train



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
ALL_DATASETS: Dict[str, Tuple[str, str]] = {**DATASETS, **HELD_OUT}
SYSTEMS = ("tagger", "crf_tagger", "nldm_tagger")
SETTINGS = ("own", "shared")
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
    (on every system, spaCy's ``tagger`` too, with ``every_system``); ``{c}`` in the section stands for the
    component's name."""
    if system == "tagger" and not every_system:
        return config
    for item in settings:
        path, _, raw = item.partition("=")
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        *sections, key = path.replace("{c}", system).split(".")
        node = config
        for section in sections:
            node = node.setdefault(section, {})
        node[key] = value
    return config


def host() -> str:
    return f"{os.cpu_count()} CPUs, {platform.machine()}, Python {platform.python_version()}"


def this_machine(jobs: int) -> str:
    """The machine a run is made on, as a row records it (runs from different machines compare only roughly)."""
    import torch

    return f"{host()}, torch {torch.__version__}, {jobs} runs at a time"


def machine_of(row: dict) -> str:
    """The machine of a run without its load ("N runs at a time"): runs of one machine share their timing."""
    machine = row.get("machine") or "not recorded"
    return re.sub(r"(, \d+ runs at a time| \(runs at a time not recorded\))$", "", machine)


def execute(run: Run, corpus: Path, workdir: Path, max_steps: int, machine: str) -> dict:
    """Train and evaluate one run, one ``spacy train`` and one ``spacy evaluate --gold-preproc`` at one thread
    (:func:`.queue.spacy_train`, :func:`.queue.spacy_evaluate`); the row. A failed command: RunFailed."""
    folder, _ = ALL_DATASETS[run.dataset]
    data = corpus / folder
    out = workdir / run.folder
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.cfg").write_text(run.config, encoding="utf8")
    overrides = {"paths.train": data / "train.spacy", "paths.dev": data / "dev.spacy",
                 "training.max_steps": max_steps, "system.seed": run.seed}
    seconds, _ = spacy_train(out / "config.cfg", out / "model", overrides, out / "train.log")
    scores = spacy_evaluate(out / "model" / "model-best", data / "test.spacy", out / "evaluate.log")
    meta = json.loads((out / "model" / "model-best" / "meta.json").read_text(encoding="utf8"))
    return {
        "key": run.key, "dataset": run.dataset, "system": run.system, "setting": run.setting, "seed": run.seed,
        "variant": run.variant, "max_steps": max_steps, "test_tag_acc": 100 * scores["tag_acc"],
        "dev_score": 100 * meta.get("performance", {}).get("tag_acc", float("nan")),
        "train_seconds": round(seconds, 1), "machine": machine, "config": run.config,
    }


def load_rows(results: Path) -> Dict[str, dict]:
    rows = {}
    if results.exists():
        for number, line in enumerate(results.read_text(encoding="utf8").splitlines(), start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{results}:{number}: not a JSON line ({err.msg})") from None
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
