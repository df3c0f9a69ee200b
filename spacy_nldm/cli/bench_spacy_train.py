"""``python -m spacy_nldm bench spacy-train``: the taggers on the route spaCy users take.

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
import subprocess
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Tuple

import typer

from . import bench_app


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
#: held-out datasets, never used to choose a default (not in --datasets' default), made by `python -m spacy
#: project run convert-heldout`: PoSTWITA (Italian tweets) and Russian GSD, whose train files are missing,
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
DEFAULT_RESULTS = Path("results/spacy_train/runs.jsonl")
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


#: the components whose settings :data:`NEUTRAL_SETTINGS` names
STRUCTURED = ("crf_tagger", "nldm_tagger")
#: settings added to the components after runs were recorded, at the value that trains exactly what the
#: configs trained before they existed: a component block ("component") or its model block ("model") stating
#: one at that value has the key it had without it, so the recorded runs are found again; ``embed_attrs`` and
#: ``embed_rows`` are not config settings but the head embeddings' tables (:func:`resolve_head_embeddings`),
#: at the values the recorded runs were trained with
NEUTRAL_SETTINGS = {("component", "token_loss"): 0.0, ("component", "average_params"): False,
                    ("component", "tree_smoothing"): "uniform",
                    ("model", "hidden_width"): 0, ("model", "distance_prior"): 0.0, ("model", "distance_labels"): False,
                    ("model", "embed_width"): 0, ("model", "embed_depth"): 0, ("model", "embed_mix"): False,
                    ("model", "chain_factor"): False, ("model", "head_scores"): False,
                    ("model", "tie_directions"): False,
                    ("model", "embed_attrs"): ["NORM", "PREFIX", "SUFFIX", "SHAPE"],
                    ("model", "embed_rows"): [10000, 2000, 5000, 5000]}


def drop_neutral(block: dict, neutral: Dict[Tuple[str, str], object] = NEUTRAL_SETTINGS) -> None:
    """Delete from a structured component's ``block`` (its settings and its ``model``) each of the ``neutral``
    settings (a subset of :data:`NEUTRAL_SETTINGS`) that it states at its neutral value, once the model's null
    head embeddings are replaced by the values they stand for (:func:`resolve_head_embeddings`)."""
    resolve_head_embeddings(block.get("model", {}))
    for (where, name), value in neutral.items():
        section = block if where == "component" else block.get("model", {})
        if name in section and section[name] == value:
            del section[name]


def resolve_head_embeddings(model: dict) -> None:
    """Replace a null ``embed_width`` / ``embed_depth`` / ``embed_mix`` in a structured component's ``model``
    block by what the architecture reads for it (``defaults.resolve_head_embeddings``, ``resolve_embed_mix``),
    so that configs that train the same model have the same key. Head embeddings of a width above 0 also
    put the tables they are built with into the key (``embed_attrs``, ``embed_rows``: ``defaults.OWN_ATTRS``
    and ``OWN_ROWS``, which no config states), so that changing those constants makes new runs instead of
    finding the old ones."""
    from ..pipeline.defaults import OWN_ATTRS, OWN_ROWS, listens_in_config, resolve_embed_mix
    from ..pipeline.defaults import resolve_head_embeddings as resolve

    width, depth = model.get("embed_width", 0), model.get("embed_depth", 0)
    if width is None or depth is None:
        width, depth = resolve(width, depth, listens_in_config(model))
        for name, value in (("embed_width", width), ("embed_depth", depth)):
            if name in model:
                model[name] = value
    if "embed_mix" in model and model["embed_mix"] is None:
        model["embed_mix"] = resolve_embed_mix(None, depth, listens_in_config(model))
    if width:
        model["embed_attrs"], model["embed_rows"] = list(OWN_ATTRS), list(OWN_ROWS)


def run_key(dataset: str, config_text: str, seed: int) -> str:
    """A run's identity: dataset, seed and the config's settings (sections and keys in any order; the
    :data:`NEUTRAL_SETTINGS` at their neutral value left out)."""
    from thinc.api import Config

    config = Config().from_str(config_text, interpolate=False)
    for block in config.get("components", {}).values():
        if block.get("factory") in STRUCTURED:
            drop_neutral(block)
    settings = json.dumps(config, sort_keys=True, default=str)
    return f"{dataset}/{hashlib.sha1(settings.encode('utf8')).hexdigest()[:12]}/seed{seed}"


def generate_config(system: str, setting: str, lang: str, *, labels_with_bang: bool = False):
    """The config ``spacy init config -p SYSTEM -l LANG`` writes (``setting`` "shared": our component
    listening to the tok2vec of ``-p tagger``'s config instead)."""
    from spacy.cli.init_config import init_config

    from .. import pipeline  # noqa: F401  (registers the factories)

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


def _apply(config, settings: List[str], system: str, *, every_system: bool = False):
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


def _one_thread_env() -> Dict[str, str]:
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    return env


def _host() -> str:
    return f"{os.cpu_count()} CPUs, {platform.machine()}, Python {platform.python_version()}"


def this_machine(jobs: int) -> str:
    """The machine a run is made on, as a row records it (runs from different machines compare only roughly)."""
    import torch

    return f"{_host()}, torch {torch.__version__}, {jobs} runs at a time"


def machine_of(row: dict) -> str:
    """The machine of a run without its load ("N runs at a time"): runs of one machine share their timing."""
    machine = row.get("machine") or "not recorded"
    return re.sub(r"(, \d+ runs at a time| \(runs at a time not recorded\))$", "", machine)


def execute(run: Run, corpus: Path, workdir: Path, max_steps: int, machine: str) -> dict:
    """Train and evaluate one run in a subprocess each (``spacy train``, ``spacy evaluate``); the row."""
    folder, lang = ALL_DATASETS[run.dataset]
    data = corpus / folder
    out = workdir / run.folder
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.cfg").write_text(run.config, encoding="utf8")
    train_cmd = [
        sys.executable, "-m", "spacy", "train", str(out / "config.cfg"), "--output", str(out / "model"),
        "--paths.train", str(data / "train.spacy"), "--paths.dev", str(data / "dev.spacy"),
        "--training.max_steps", str(max_steps), "--system.seed", str(run.seed),
    ]
    start = time.perf_counter()
    with open(out / "train.log", "w", encoding="utf8") as log:
        done = subprocess.run(train_cmd, stdout=log, stderr=subprocess.STDOUT, env=_one_thread_env())
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"spacy train failed for {run.key} ({run.system}, {run.setting}): see {out / 'train.log'}")
    eval_cmd = [
        sys.executable, "-m", "spacy", "evaluate", str(out / "model" / "model-best"), str(data / "test.spacy"),
        "--gold-preproc", "--output", str(out / "test.json"),
    ]
    with open(out / "evaluate.log", "w", encoding="utf8") as log:
        done = subprocess.run(eval_cmd, stdout=log, stderr=subprocess.STDOUT, env=_one_thread_env())
    if done.returncode != 0:
        raise RuntimeError(f"spacy evaluate failed for {run.key}: see {out / 'evaluate.log'}")
    scores = json.loads((out / "test.json").read_text(encoding="utf8"))
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


def _split(text: str) -> List[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def choose(text: str, allowed: Iterable[str], what: str) -> List[str]:
    """The comma-separated names in ``text``; a usage error names the first one not in ``allowed``."""
    names, allowed = _split(text), list(allowed)
    unknown = [name for name in names if name not in allowed]
    if unknown:
        raise typer.BadParameter(f"unknown {what} {unknown[0]!r}; choose from {', '.join(allowed)}")
    return names


@bench_app.command("spacy-train")
def bench_spacy_train(
    datasets: str = typer.Option(",".join(DATASETS), help=f"Comma-separated, from {', '.join(DATASETS)}; or the held-out {', '.join(HELD_OUT)} (`spacy project run convert-heldout`)."),
    systems: str = typer.Option(",".join(SYSTEMS), help="Comma-separated factories, from tagger, crf_tagger, nldm_tagger."),
    settings: str = typer.Option(",".join(SETTINGS), help="Encoder settings: own (each config as `spacy init config` writes it), shared (our component listening to the tagger config's tok2vec)."),
    seeds: str = typer.Option("0,1,2", help="Training seeds ([system] seed), comma-separated."),
    max_steps: int = typer.Option(1500, help="[training] max_steps of every run."),
    corpus: Path = typer.Option(Path("corpus"), help="Folder of the converted corpora (`spacy project run corpora`)."),
    results: Path = typer.Option(DEFAULT_RESULTS, help="Runs file (JSON lines): read, and appended as runs finish."),
    workdir: Path = typer.Option(DEFAULT_WORKDIR, help="Where configs, logs and trained pipelines go."),
    jobs: int = typer.Option(2, help="Runs at a time (each `spacy train` at one torch thread)."),
    set_: List[str] = typer.Option([], "--set", help="Override on the structured components' configs, SECTION.KEY=VALUE with {c} for the component, e.g. components.{c}.label_smoothing=0.1 (repeatable)."),
    set_all: List[str] = typer.Option([], "--set-all", help="Override on every system's config, spaCy's tagger too, e.g. training.optimizer.learn_rate=0.002 (repeatable)."),
    variant: str = typer.Option("defaults", help="Name of the variant in the results (with --set or --set-all)."),
    output: Optional[Path] = typer.Option(None, help="Also write the Markdown tables here."),
    dry_run: bool = typer.Option(False, "--dry-run/--no-dry-run", help="Print the runs to do without training."),
    table_only: bool = typer.Option(False, "--table-only/--no-table-only", help="Write the tables from the finished runs in --results without training the missing ones."),
) -> None:
    """spaCy's tagger, crf_tagger and nldm_tagger trained by `spacy train` from the configs `spacy init config`
    writes, evaluated by `spacy evaluate --gold-preproc` on the test split: mean ± sd over seeds, differences
    to tagger, training time. Resumable: finished runs are read from --results."""
    from .. import about

    names = choose(systems, SYSTEMS, "system")
    sets = choose(datasets, ALL_DATASETS, "dataset")
    modes = choose(settings, SETTINGS, "setting")
    seed_list = [int(s) for s in _split(seeds)]
    for d in sets:
        for split in ("train", "dev", "test"):
            path = corpus / ALL_DATASETS[d][0] / f"{split}.spacy"
            if not path.exists():
                step = "convert-heldout" if d in HELD_OUT else "corpora"
                raise typer.BadParameter(f"{path}: no such corpus file (run `python -m spacy project run {step}`)")
    plan: List[Tuple[str, Run]] = []  # seed by seed: a partial table has every dataset at the first seeds
    configs = {}
    for d in sets:
        bang = labels_with_bang(corpus / ALL_DATASETS[d][0] / "train.spacy")
        for mode in modes:
            for system in names:
                config = _apply(generate_config(system, mode, ALL_DATASETS[d][1], labels_with_bang=bang), set_, system)
                config = _apply(config, set_all, system, every_system=True)
                configs[d, mode, system] = config.to_str()
    for seed in seed_list:
        for (d, mode, system), text in configs.items():
            changed = set_all or (set_ and system != "tagger")
            plan.append((mode, Run(d, system, mode, seed, text, variant if changed else "defaults")))
    done = load_rows(results)
    todo, seen = [], set()
    for _, run in plan:
        if run.key not in done and run.key not in seen:
            seen.add(run.key)
            todo.append(run)
    typer.echo(f"{len(plan)} cells, {len(todo)} runs to do ({len(done)} in {results}); spacy-nldm {about.__version__}")
    if dry_run:
        for run in todo:
            typer.echo(f"  {run.dataset} {run.system} {run.setting} seed {run.seed} -> {workdir / run.folder}")
        return
    if table_only:
        todo = []
    results.parent.mkdir(parents=True, exist_ok=True)
    lock = threading.Lock()
    start = time.perf_counter()
    failures = []
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        machine = this_machine(jobs)
        futures = {pool.submit(execute, run, corpus, workdir, max_steps, machine): run for run in todo}
        for number, future in enumerate(as_completed(futures), start=1):
            run = futures[future]
            try:
                row = future.result()
            except RuntimeError as err:
                failures.append(str(err))
                typer.echo(f"[{number}/{len(todo)}] FAILED {err}", err=True)
                continue
            with lock, open(results, "a", encoding="utf8") as out:
                out.write(json.dumps(row) + "\n")
            done[row["key"]] = row
            typer.echo(f"[{number}/{len(todo)}] {run.dataset} {run.system} {run.setting} seed {run.seed}: test "
                       f"{row['test_tag_acc']:.2f}, {row['train_seconds']:.0f} s (elapsed {time.perf_counter() - start:.0f} s)")
    text = _tables(plan, done, sets, names, modes, seeds, max_steps, set_, set_all, variant, results)
    typer.echo("\n" + text)
    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text, encoding="utf8")
        typer.echo(f"Wrote {output}")
    if failures:
        raise typer.Exit(1)


def _tables(plan, done, sets, names, modes, seeds, max_steps, set_, set_all, variant, results) -> str:
    command = (f"python -m spacy_nldm bench spacy-train --datasets {','.join(sets)} --systems {','.join(names)} "
               f"--settings {','.join(modes)} --seeds {seeds} --max-steps {max_steps}"
               + "".join(f" --set '{s}'" for s in set_) + "".join(f" --set-all '{s}'" for s in set_all)
               + (f" --variant {variant}" if set_ or set_all else "")
               + (f" --results {results}" if Path(results) != DEFAULT_RESULTS else ""))
    used = {run.key: done[run.key] for _, run in plan if run.key in done}  # a run may fill cells of both settings
    machines = Counter(row.get("machine") or "not recorded" for row in used.values())
    hosts = Counter(machine_of(row) for row in used.values())
    timing = hosts.most_common(1)[0][0] if len(hosts) > 1 else None  # seconds from one machine only
    parts = [f"Written {time.strftime('%Y-%m-%d')} on {_host()}; runs as listed in the runs file, made on: "
             + "; ".join(f"{name} ({count} runs)" for name, count in sorted(machines.items())) + ".\n",
             f"Test accuracy (%) of `spacy evaluate --gold-preproc` on model-best, mean ± sd over seeds {seeds}; "
             f"`spacy train` for {max_steps} steps from the configs `spacy init config -p SYSTEM` writes "
             "(gold_preproc = true); training wall seconds at one torch thread"
             + (f", of the runs made on {timing}" if timing else "")
             + " (runs made at the same time on one machine compare; others only roughly).\n",
             f"Command: `{command}`\n"]
    for mode in modes:
        cells: Dict[Tuple[str, str], List[dict]] = {}
        for m, run in plan:
            if m == mode and run.key in done:
                cells.setdefault((run.dataset, run.system), []).append(done[run.key])
        title = {"own": "each config as `spacy init config -p SYSTEM` writes it",
                 "shared": "our component listening to the `tok2vec` of `spacy init config -p tagger`"}[mode]
        parts.append(f"### Setting `{mode}`: {title}\n")
        parts.append("\n".join(route_table(cells, sets, names, timing)) + "\n")
    return "\n".join(parts)
