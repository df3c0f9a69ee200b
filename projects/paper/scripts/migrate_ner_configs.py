"""One-off migration of the entity study's run records when the entity components gained ``temperature`` (run
once; kept to show what changed).

    python -m projects.paper.scripts.migrate_ner_temperature [projects/paper/results/ner/runs.jsonl]

``temperature`` acts at prediction only and its default (1) is the distribution as trained and as evaluated,
so a ``crf_ner`` or ``nldm_ner`` run made before it is the run today's generated config makes. Each such record
takes today's config and key (checked: its config with ``temperature = 1.0`` added is today's
``generate_entity_config`` of its system, encoder and budget); nothing is trained again.
"""
import json
import sys
from pathlib import Path

from thinc.api import Config

from projects.paper.runs.spacy_train import ENTITY_RESULTS, Run, generate_entity_config

FACTORIES = ("crf_ner", "nldm_ner")


def as_dict(text: str) -> str:
    return json.dumps(Config().from_str(text, interpolate=False), sort_keys=True, default=str)


def migrated(row: dict) -> dict:
    """The record with today's config and key, or as it is (another system, or temperature already there)."""
    if row["system"] not in FACTORIES:
        return row
    config = Config().from_str(row["config"], interpolate=False)
    block = config["components"][row["system"]]
    if "temperature" in block:
        return row
    block["temperature"] = 1.0
    today = generate_entity_config(row["system"], row["setting"], "en", config["training"]["max_steps"]).to_str()
    if json.dumps(config, sort_keys=True, default=str) != as_dict(today):
        raise ValueError(f"{row['key']}: its config with temperature = 1.0 is not today's")
    run = Run(row["dataset"], row["system"], row["setting"], row["seed"], today, row.get("variant", "defaults"))
    return {**row, "key": run.key, "config": today}


def main(results: Path = ENTITY_RESULTS) -> None:
    rows = [json.loads(line) for line in results.read_text(encoding="utf8").splitlines() if line.strip()]
    out = [migrated(row) for row in rows]
    changed = sum(a["key"] != b["key"] for a, b in zip(rows, out))
    results.write_text("".join(json.dumps(row) + "\n" for row in out), encoding="utf8")
    print(f"{results}: {changed} of {len(rows)} records took today's config and key")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else ENTITY_RESULTS)
