"""One-off migration of the entity study's runs when ``normalize_loss``, ``tok2vec_loss`` and ``label_smoothing``
left the entity components' settings (run once; kept to show what changed).

    python -m projects.paper.scripts.migrate_ner_runs

The three keys trained with the values the components now fix (``spacy_nldm.defaults.NER_TRAINING``), and the
settings added since (``spans_key``, ``threshold``, ``candidate_threshold``, ``n_best``) act at prediction only, at
their defaults as spaCy fills them when it loads the pipeline: so a run trained with the old config is the run
today's generated config trains, and its record takes that config (checked: the old one with the three keys
dropped and the new ones at their defaults is today's). For each run folder under ``training/ner`` whose config
holds them at those values: the keys are dropped from its config and its saved pipelines' configs; a record of
the run in the runs file gets today's key and config; a run that trained but was not evaluated (its evaluation
failed on the dropped keys) is evaluated now (one whose training log a failed restart overwrote is left to be
trained again), its training time read from its files' times (the config written
before ``spacy train``, ``model-last`` after).
"""
import json
from pathlib import Path

from thinc.api import Config

from projects.paper.runs.spacy_train import (ALL_DATASETS, ENTITY_RESULTS, ENTITY_WORKDIR, Run, entity_record,
                                             generate_entity_config, run_key, this_machine)
from spacy_nldm.defaults import NER_COMMON, NER_TRAINING

#: the settings added to the entity components after the runs were made (prediction only)
ADDED = ("spans_key", "threshold", "candidate_threshold", "n_best")

FACTORIES = ("crf_ner", "nldm_ner")


def stripped(text: str):
    """(today's config text, system) of a config with the three keys at the fixed values, else None; a
    ValueError where it is not today's config once those are dropped and the added settings filled."""
    config = Config().from_str(text, interpolate=False)
    for system in FACTORIES:
        block = config.get("components", {}).get(system)
        if block and all(block.get(key) == value for key, value in NER_TRAINING.items()):
            for key in NER_TRAINING:
                del block[key]
            for key in ADDED:
                block.setdefault(key, NER_COMMON[key])
            today = generate_entity_config(system, "own", "en", config["training"]["max_steps"])
            if json.dumps(config, sort_keys=True, default=str) != json.dumps(
                    Config().from_str(today.to_str(), interpolate=False), sort_keys=True, default=str):
                raise ValueError(f"a {system} config that is not today's once migrated")
            return today.to_str(), system
    return None


def main(workdir: Path = ENTITY_WORKDIR, results: Path = ENTITY_RESULTS, corpus: Path = Path("corpus")) -> None:
    rows = [json.loads(line) for line in results.read_text(encoding="utf8").splitlines() if line.strip()]
    by_key = {row["key"]: row for row in rows}
    for out in sorted(p for p in workdir.iterdir() if (p / "config.cfg").exists()):
        found = stripped((out / "config.cfg").read_text(encoding="utf8"))
        if found is None:
            continue
        text, system = found
        dataset, _, seed = out.name.split("-")
        old = run_key(dataset, (out / "config.cfg").read_text(encoding="utf8"), int(seed[len("seed"):]))
        started = (out / "config.cfg").stat().st_mtime  # written just before spacy train
        (out / "config.cfg").write_text(text, encoding="utf8")
        for saved in ("model-best", "model-last"):
            path = out / "model" / saved / "config.cfg"
            if path.exists():
                path.write_text(stripped(path.read_text(encoding="utf8"))[0], encoding="utf8")
        run = Run(dataset, system, "own", int(seed[len("seed"):]), text)
        if old in by_key:
            row = by_key.pop(old)
            row.update(key=run.key, config=text)
            by_key[run.key] = row
            print(f"{out.name}: record {old} -> {run.key}")
        elif "E    #" not in (out / "train.log").read_text(encoding="utf8"):
            print(f"{out.name}: its training log was overwritten by a failed start: to be trained again")
        elif (out / "model" / "model-last" / "meta.json").exists():
            seconds = (out / "model" / "model-last" / "meta.json").stat().st_mtime - started
            folder, _ = ALL_DATASETS[dataset]
            by_key[run.key] = entity_record(run, corpus / folder, out, seconds, this_machine(1))
            print(f"{out.name}: evaluated as {run.key}: test {by_key[run.key]['test_f']:.2f}")
    results.write_text("".join(json.dumps(row) + "\n" for row in by_key.values()), encoding="utf8")


if __name__ == "__main__":
    main()
