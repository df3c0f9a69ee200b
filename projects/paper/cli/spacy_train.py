"""``python -m projects.paper spacy-train``: spaCy's ``tagger``, ``crf_tagger`` and ``nldm_tagger`` (or, on an
entity dataset, spaCy's ``ner`` and ``spancat``, ``crf_ner`` and ``nldm_ner``) trained by ``spacy train`` from the
configs ``spacy init config`` writes, datasets x systems x settings x seeds, resumable (the harness and its runs
file: :mod:`projects.paper.runs.spacy_train`).
"""
import time
from collections import Counter
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Tuple

import typer

from ..runs.queue import Run as QueueRun, run_queue
from ..runs.records import RunsFile
from ..runs.spacy_train import (ALL_DATASETS, DATASETS, DEFAULT_RESULTS, DEFAULT_VECTORS, DEFAULT_WORKDIR, ENTITY_DATASETS,
                                ENTITY_RESULTS, ENTITY_SETTINGS, ENTITY_SYSTEMS, ENTITY_WORKDIR, HELD_OUT,
                                INCORRECT_SPANS_DATASETS, SETTINGS, SPACY_ENTITY_SYSTEMS, SYSTEMS, Run, apply_overrides,
                                entity_tables, execute, execute_entities, generate_config, generate_entity_config, host,
                                is_entity_run, labels_with_bang, load_rows, machine_of, route_table, this_machine)
from . import app


def _split(text: str) -> List[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def choose(text: str, allowed: Iterable[str], what: str) -> List[str]:
    """The comma-separated names in ``text``; a usage error names the first one not in ``allowed``."""
    names, allowed = _split(text), list(allowed)
    unknown = [name for name in names if name not in allowed]
    if unknown:
        raise typer.BadParameter(f"unknown {what} {unknown[0]!r}; choose from {', '.join(allowed)}")
    return names


@app.command("spacy-train")
def spacy_train(
    datasets: str = typer.Option(",".join(DATASETS), help=f"Comma-separated, from {', '.join(DATASETS)}; or the held-out {', '.join(HELD_OUT)} (`spacy project run convert-heldout`); or the entity datasets {', '.join(ENTITY_DATASETS)} (`python -m spacy_nldm convert ner`), not mixed with the others."),
    systems: Optional[str] = typer.Option(None, help=f"Comma-separated factories, from {', '.join(SYSTEMS)} (default: all); on entity datasets from {', '.join(ENTITY_SYSTEMS)} (default: all)."),
    settings: Optional[str] = typer.Option(None, help=f"Encoder settings: own (each config as `spacy init config` writes it), shared (our component listening to the tagger config's tok2vec); default both. On entity datasets from {', '.join(ENTITY_SETTINGS)} (default own,vectors): vectors adds static vectors (--vectors), trf MiniLM through spacy-transformers."),
    seeds: str = typer.Option("0,1,2", help="Training seeds ([system] seed), comma-separated."),
    max_steps: int = typer.Option(1500, help="[training] max_steps of every run (on entity datasets written in the config: part of a run's key)."),
    vectors: Path = typer.Option(DEFAULT_VECTORS, help="spaCy vectors folder of the entity setting vectors (`spacy project run glove-vectors projects/paper`: GloVe 6B 50d)."),
    corpus: Path = typer.Option(Path("corpus"), help="Folder of the converted corpora (`spacy project run corpora`, then `spacy project run ud-corpora projects/paper`)."),
    results: Optional[Path] = typer.Option(None, help=f"Runs file (JSON lines): read, and appended as runs finish (default {DEFAULT_RESULTS}; on entity datasets {ENTITY_RESULTS})."),
    workdir: Optional[Path] = typer.Option(None, help=f"Where configs, logs and trained pipelines go (default {DEFAULT_WORKDIR}; on entity datasets {ENTITY_WORKDIR})."),
    jobs: int = typer.Option(2, help="Runs at a time (each `spacy train` at one torch thread)."),
    gpu_id: int = typer.Option(-1, "--gpu-id", help="GPU of `spacy train`, `spacy evaluate` and `spacy apply` (-1: the CPU); needed by the trf setting. Not part of a run's key: the machine it ran on is recorded beside it."),
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
    from spacy_nldm import about

    sets = choose(datasets, ALL_DATASETS, "dataset")
    entities = {is_entity_run(d) for d in sets}
    if len(entities) > 1:
        raise typer.BadParameter("entity datasets and tagging datasets are run separately")
    entities = entities.pop() if entities else False
    all_systems, all_settings = (tuple(ENTITY_SYSTEMS), ENTITY_SETTINGS) if entities else (SYSTEMS, SETTINGS)
    names = choose(systems or ",".join(all_systems), all_systems, "system")
    modes = choose(settings or ("own,vectors" if entities else ",".join(SETTINGS)), all_settings, "setting")
    default_results = ENTITY_RESULTS if entities else DEFAULT_RESULTS
    results = results or default_results
    workdir = workdir or (ENTITY_WORKDIR if entities else DEFAULT_WORKDIR)
    if entities and "vectors" in modes and not (vectors / "vocab" / "vectors").exists():
        raise typer.BadParameter(f"{vectors}: no spaCy vectors folder (run `spacy project run glove-vectors projects/paper`)")
    seed_list = [int(s) for s in _split(seeds)]
    for d in sets:
        for split in ("train", "dev", "test"):
            path = corpus / ALL_DATASETS[d][0] / f"{split}.spacy"
            if not path.exists():
                step = ("python -m spacy_nldm convert ner" if entities else "spacy project run "
                        + ("corpora" if d == "tw" else ("convert-heldout" if d in HELD_OUT else "ud-corpora") + " projects/paper"))
                raise typer.BadParameter(f"{path}: no such corpus file (run `{step}`)")
    plan: List[Tuple[str, Run]] = []  # seed by seed: a partial table has every dataset at the first seeds
    configs = {}
    for d in sets:
        bang = not entities and labels_with_bang(corpus / ALL_DATASETS[d][0] / "train.spacy")
        for mode in modes:
            for system in names:
                if entities:
                    config = generate_entity_config(system, mode, ALL_DATASETS[d][1], max_steps, vectors=vectors,
                                                    incorrect_spans=d in INCORRECT_SPANS_DATASETS)
                else:
                    config = generate_config(system, mode, ALL_DATASETS[d][1], labels_with_bang=bang)
                config = apply_overrides(config, set_, system)
                config = apply_overrides(config, set_all, system, every_system=True)
                configs[d, mode, system] = config.to_str()
    for seed in seed_list:
        for (d, mode, system), text in configs.items():
            changed = set_all or (set_ and system not in ("tagger",) + SPACY_ENTITY_SYSTEMS)
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
    start = time.perf_counter()
    machine = this_machine(jobs, gpu_id)
    finished = []

    def work(queued: QueueRun) -> dict:
        (run,) = queued.params
        if entities:
            return execute_entities(run, corpus, workdir, machine, gpu_id)
        return execute(run, corpus, workdir, max_steps, machine, gpu_id)

    def report(queued: QueueRun, row: dict) -> None:
        (run,) = queued.params
        done[row["key"]] = row
        finished.append(run)
        score = row["test_f"] if entities else row["test_tag_acc"]
        typer.echo(f"[{len(finished)}/{len(todo)}] {queued.name}: test {score:.2f}, {row['train_seconds']:.0f} s "
                   f"(elapsed {time.perf_counter() - start:.0f} s)")

    queue = [QueueRun(f"{run.dataset} {run.system} {run.setting} seed {run.seed}", run.key, (run,)) for run in todo]
    failed = run_queue(RunsFile(results), queue, work, jobs=max(1, jobs), report=report)
    text = _tables(plan, done, sets, names, modes, seeds, max_steps, set_, set_all, variant, results, entities,
                   default_results)
    typer.echo("\n" + text)
    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text, encoding="utf8")
        typer.echo(f"Wrote {output}")
    if failed:
        typer.echo(f"{failed} of {len(todo)} runs failed (their logs are under {workdir})", err=True)
        raise typer.Exit(1)


def _tables(plan, done, sets, names, modes, seeds, max_steps, set_, set_all, variant, results, entities,
            default_results) -> str:
    command = (f"python -m projects.paper spacy-train --datasets {','.join(sets)} --systems {','.join(names)} "
               f"--settings {','.join(modes)} --seeds {seeds} --max-steps {max_steps}"
               + "".join(f" --set '{s}'" for s in set_) + "".join(f" --set-all '{s}'" for s in set_all)
               + (f" --variant {variant}" if set_ or set_all else "")
               + (f" --results {results}" if Path(results) != default_results else ""))
    used = {run.key: done[run.key] for _, run in plan if run.key in done}  # a run may fill cells of both settings
    machines = Counter(row.get("machine") or "not recorded" for row in used.values())
    hosts = Counter(machine_of(row) for row in used.values())
    timing = hosts.most_common(1)[0][0] if len(hosts) > 1 else None  # seconds from one machine only
    parts = [f"Written {time.strftime('%Y-%m-%d')} on {host()}; runs as listed in the runs file, made on: "
             + "; ".join(f"{name} ({count} runs)" for name, count in sorted(machines.items())) + ".\n"]
    if entities:
        parts += [f"Test entity F1, P, R (%) of `spacy evaluate --gold-preproc` on model-best (`ents_*`; `spans_sc_*` "
                  f"for spancat), mean ± sd over seeds {seeds} (n: the seeds finished); surface F1: the shared task's "
                  "F1 over the unique (surface string, type) pairs of model-best's predictions on test (`spacy apply` "
                  f"on the test tokens), mean over seeds. `spacy train` for {max_steps} steps from the configs "
                  "`spacy init config -p SYSTEM` writes (gold_preproc = true); encoder own: as written, vectors: "
                  "with static vectors (GloVe 6B 50d), trf: MiniLM through spacy-transformers. Training wall "
                  "minutes at one torch thread" + (f", of the runs made on {timing}" if timing else "") + ".\n",
                  f"Command: `{command}`\n"]
        found: Dict[Tuple[str, str, str], List[dict]] = {}
        for m, run in plan:
            if run.key in done:
                found.setdefault((run.dataset, m, run.system), []).append(done[run.key])
        return "\n".join(parts + ["\n".join(entity_tables(found, sets, modes, names, timing)) + "\n"])
    parts += [f"Test accuracy (%) of `spacy evaluate --gold-preproc` on model-best, mean ± sd over seeds {seeds}; "
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
