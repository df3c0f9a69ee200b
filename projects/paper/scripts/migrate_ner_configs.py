"""Migration of the entity study's run records when the entity components' settings change without changing
what a run trains (run once per change; kept to show what changed).

    python -m projects.paper.scripts.migrate_ner_configs [projects/paper/results/ner/runs.jsonl]

Each change is an edit of a ``crf_ner`` / ``nldm_ner`` component block (:data:`EDITS`), in the order made:

- ``temperature`` joined the settings: it acts at prediction only and its default (1) is the distribution as
  trained and as evaluated;
- ``missing_entity_bias`` joined them, and ``average_params`` left them (fixed at its default, true): the bias's
  default (0) is the plain likelihood the runs trained with.

A record whose block the edits change takes the edited config and its key, after a check that the edited config
is today's ``generate_entity_config`` of its system, encoder and budget, with its own ``scheme`` (the BIO runs set
it); nothing is trained again.
"""
import json
import sys
from pathlib import Path

from thinc.api import Config

from projects.paper.runs.spacy_train import ENTITY_RESULTS, Run, generate_entity_config

FACTORIES = ("crf_ner", "nldm_ner")


def add_temperature(block: dict) -> None:
    block.setdefault("temperature", 1.0)


def add_missing_entity_bias(block: dict) -> None:
    block.setdefault("missing_entity_bias", 0.0)
    if block.pop("average_params", True) is not True:
        raise ValueError("average_params = false: not what the component trains with today")


EDITS = (add_temperature, add_missing_entity_bias)


def as_dict(config: Config) -> str:
    return json.dumps(config, sort_keys=True, default=str)


def migrated(row: dict) -> dict:
    """The record with today's config and key, or as it is (another system, or nothing to edit)."""
    if row["system"] not in FACTORIES:
        return row
    config = Config().from_str(row["config"], interpolate=False)
    block = config["components"][row["system"]]
    before = as_dict(config)
    for edit in EDITS:
        edit(block)
    if as_dict(config) == before:
        return row
    today = generate_entity_config(row["system"], row["setting"], "en", config["training"]["max_steps"])
    today["components"][row["system"]]["scheme"] = block["scheme"]
    if as_dict(config) != as_dict(Config().from_str(today.to_str(), interpolate=False)):
        raise ValueError(f"{row['key']}: its edited config is not today's")
    text = config.to_str()
    run = Run(row["dataset"], row["system"], row["setting"], row["seed"], text, row.get("variant", "defaults"))
    return {**row, "key": run.key, "config": text}


def main(results: Path = ENTITY_RESULTS) -> None:
    rows = [json.loads(line) for line in results.read_text(encoding="utf8").splitlines() if line.strip()]
    out = [migrated(row) for row in rows]
    changed = sum(a["key"] != b["key"] for a, b in zip(rows, out))
    results.write_text("".join(json.dumps(row) + "\n" for row in out), encoding="utf8")
    print(f"{results}: {changed} of {len(rows)} records took today's config and key")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else ENTITY_RESULTS)
