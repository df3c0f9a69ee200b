"""One-off migration of the study's run records to spacy-nldm 0.2 (run once; kept to show what changed).

    python -m projects.paper.scripts.migrate_runs_0_2

0.2 removed ten settings and renamed the architectures to ``.v2``. Each record's config is rewritten as 0.2
writes the config that trains the same model, so that a config of today finds its record by its plain text
(:func:`projects.paper.runs.spacy_train.run_key`, no list of neutral settings):

* a removed setting at its 0.1 default is dropped; one at another value stays (the record is a variant of the
  study that 0.2 cannot train again: its ``variant`` names it where it said "defaults");
* ``spacy-nldm.NLDMTagger.v1`` / ``CRFTagger.v1`` become ``.v2``;
* the spacy-train records made before ``average_params`` and the head embeddings existed get them at the value
  they trained with (``average_params = false``); ``embed_width`` / ``embed_depth`` / ``embed_mix`` become null
  where null trains what the run trained (0.1's reading of a null: none on a component's own encoder; width 96,
  depth 4 and ``embed_mix`` true on a listener), else an absent one gets the value it trained with.

Table 2's records (``results/runs.jsonl``) keep their results; their fingerprint is re-made from the
migrated config of ``configs/<system>.cfg`` (:func:`projects.paper.scripts.reproduce.config_fingerprint`)
where the record's fingerprint is that of today's file by 0.1's rule. The plain loop's runs of the factory
defaults (``results/accuracy/*.jsonl``, ``python -m projects.paper accuracy``) get the signature of the
migrated default config and version 0.2.0 where they hold 0.1's signature of today's defaults.
"""
import hashlib
import json
from pathlib import Path
from typing import List

from thinc.api import Config

RESULTS = Path("projects/paper/results")
STRUCTURED = ("crf_tagger", "nldm_tagger")
#: 0.1's defaults of the settings 0.2 removed: on the component and on its model
REMOVED_COMPONENT = {"token_loss": 0.0, "tree_smoothing": "uniform"}
REMOVED_MODEL = {"distance_prior": 0.0, "distance_labels": False, "chain_factor": False, "head_scores": False,
                 "tie_directions": False, "char_width": 0, "context_width": 0, "hidden_width": 0}
RENAMED = {"spacy-nldm.NLDMTagger.v1": "spacy-nldm.NLDMTagger.v2", "spacy-nldm.CRFTagger.v1": "spacy-nldm.CRFTagger.v2"}
LISTENER = "spacy.Tok2VecListener.v1"
#: 0.1's head embeddings on a listener when embed_width is null (pipeline.defaults of 0.1)
LISTENER_WIDTH, LISTENER_DEPTH = 96, 4
HEAD_EMBEDDINGS = ("embed_width", "embed_depth", "embed_mix")


def migrate_config(config: Config) -> List[str]:
    """Drop the removed settings at their 0.1 default and rename the architectures, in place; the removed
    settings left at other values, as ``name=value``."""
    kept = []
    for block in config.get("components", {}).values():
        if block.get("factory") not in STRUCTURED:
            continue
        model = block.get("model", {})
        for section, removed in ((block, REMOVED_COMPONENT), (model, REMOVED_MODEL)):
            for name, default in removed.items():
                if name in section and section[name] == default:
                    del section[name]
                elif name in section:
                    kept.append(f"{name}={json.dumps(section[name])}")
        if model.get("@architectures") in RENAMED:
            model["@architectures"] = RENAMED[model["@architectures"]]
    return kept


def _trained_embeddings(model: dict, listening: bool):
    """(width, depth, mix) of the head embeddings as 0.1 read a model block (absent: 0, 0, false)."""
    width, depth = model.get("embed_width", 0), model.get("embed_depth", 0)
    if width is None:
        width, depth = (LISTENER_WIDTH, LISTENER_DEPTH if depth is None else depth) if listening else (0, depth or 0)
    elif depth is None:
        depth = 0
    mix = model.get("embed_mix", False)
    if mix is None:
        mix = listening and depth > 0
    return width, depth, mix


def fill_later_settings(config: Config) -> None:
    """Give a structured component the settings added after its run, at the value it trained with, and its head
    embeddings as null where null trains the same (the form of the generated configs), in place."""
    for block in config.get("components", {}).values():
        if block.get("factory") not in STRUCTURED:
            continue
        block.setdefault("average_params", False)
        model = block["model"]
        listening = model.get("tok2vec", {}).get("@architectures") == LISTENER
        trained = _trained_embeddings(model, listening)
        if _trained_embeddings({**model, **dict.fromkeys(HEAD_EMBEDDINGS)}, listening) == trained:
            model.update(dict.fromkeys(HEAD_EMBEDDINGS))  # as the generated config states them
            continue
        for index, name in enumerate(HEAD_EMBEDDINGS):
            if name in model:
                continue
            with_null = _trained_embeddings({**model, name: None}, listening)
            model[name] = None if with_null == trained else trained[index]


def migrate_spacy_train(path: Path) -> int:
    """Rewrite one runs file of ``python -m projects.paper spacy-train``; the number of records changed."""
    from projects.paper.runs.spacy_train import run_key

    lines, changed = [], 0
    for line in path.read_text(encoding="utf8").splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        config = Config().from_str(row["config"], interpolate=False)
        kept = migrate_config(config)
        fill_later_settings(config)
        text = config.to_str(interpolate=False)
        if kept and row.get("variant", "defaults") == "defaults":
            row["variant"] = "+".join(kept)
        if text != row["config"]:
            changed += 1
        row["config"] = text
        row["key"] = run_key(row["dataset"], text, row["seed"])
        lines.append(json.dumps(row))
    path.write_text("\n".join(lines) + "\n", encoding="utf8")
    return changed


def fingerprint_0_1(config_text: str, budget: dict) -> str:
    """0.1's fingerprint of a Table 2 config: its lines (comments left out) minus those stating a setting at
    the value 0.1 treated as neutral, and the budget."""
    neutral = {**REMOVED_COMPONENT, **REMOVED_MODEL, "average_params": False, "embed_width": 0, "embed_depth": 0,
               "embed_mix": False, "embed_attrs": ["NORM", "PREFIX", "SUFFIX", "SHAPE"],
               "embed_rows": [10000, 2000, 5000, 5000]}
    for name in ("char_width", "context_width"):  # not neutral to 0.1's fingerprint
        del neutral[name]
    skip = {f"{name} = {json.dumps(value)}" for name, value in neutral.items()}
    settings = [line for line in config_text.splitlines()
                if line.strip() and not line.strip().startswith("#") and line.strip() not in skip]
    text = "\n".join(settings).encode("utf8") + json.dumps(budget, sort_keys=True).encode()
    return hashlib.sha256(text).hexdigest()[:12]


def migrate_table2(runs: Path, configs: Path) -> int:
    """Re-make the fingerprint of Table 2's records (the runs file ``runs``, rewritten) made with today's
    ``configs/<system>.cfg``; how many."""
    from projects.paper.scripts.reproduce import config_fingerprint

    changed, records = 0, [json.loads(line) for line in runs.read_text(encoding="utf8").splitlines() if line.strip()]
    for record in records:
        text = (configs / f"{record['system']}.cfg").read_text(encoding="utf8")
        budget = {"max_epochs": int(record["budget"]["training.max_epochs"]),
                  "max_steps": int(record["budget"]["training.max_steps"]),
                  "patience": int(record["budget"]["training.patience"]), "eval_frequency": 0}
        if record.get("fingerprint") != fingerprint_0_1(text, budget):
            continue
        config = Config().from_str(text, interpolate=False)
        migrate_config(config)
        record["fingerprint"] = config_fingerprint(config.to_str(interpolate=False), budget)
        changed += 1
    runs.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf8")
    return changed


#: the version the migrated signatures of the plain loop's runs name (their identity holds the package version)
VERSION = "0.2.0"


def signature_0_1(factory: str) -> str:
    """0.1's signature of a factory's default config in the plain loop: the settings it held neutral left out
    (a null head embedding there stood for none)."""
    from spacy_nldm import about

    from projects.paper.cli.accuracy import config_signature, default_config

    config = default_config(factory)
    neutral = {"tree_smoothing": "uniform"}
    model_neutral = {"distance_prior": 0.0, "distance_labels": False, "chain_factor": False, "head_scores": False,
                     "tie_directions": False, "embed_width": None, "embed_depth": None, "embed_mix": None}
    for section, values in ((config, neutral), (config.get("model", {}), model_neutral)):
        for name, value in values.items():
            if name in section and section[name] == value:
                del section[name]
    return config_signature(config, about.__version__)


def migrate_accuracy(path: Path) -> int:
    """Re-name the signature of the runs of today's factory defaults in one runs file of ``python -m
    projects.paper accuracy`` (``<system> defaults <signature>``) by their 0.2 config; how many."""
    from projects.paper.cli.accuracy import SYSTEMS, config_signature, default_config

    renamed = {}
    for name, factory in SYSTEMS.items():
        config = Config({"components": {name: {"factory": factory, **default_config(factory)}}})
        migrate_config(config)
        settings = {key: value for key, value in config["components"][name].items() if key != "factory"}
        renamed[f"{name} defaults {signature_0_1(factory)}"] = f"{name} defaults {config_signature(settings, VERSION)}"
    lines, changed = [], 0
    for line in path.read_text(encoding="utf8").splitlines():
        row = json.loads(line)
        key = json.loads(row["key"])
        if key["system"] in renamed:
            key["system"] = renamed[key["system"]]
            row["key"] = json.dumps(key, sort_keys=True)
            if isinstance(row.get("spec"), dict):
                row["spec"]["system"] = key["system"]
            changed += 1
        lines.append(json.dumps(row))
    path.write_text("\n".join(lines) + "\n", encoding="utf8")
    return changed


def main() -> None:
    for path in sorted((RESULTS / "spacy_train").glob("*.jsonl")):
        print(f"{path}: {migrate_spacy_train(path)} records rewritten")
    print(f"{RESULTS / 'runs.jsonl'}: {migrate_table2(RESULTS / 'runs.jsonl', Path('configs'))} fingerprints re-made")
    for path in sorted((RESULTS / "accuracy").glob("*.jsonl")):
        print(f"{path}: {migrate_accuracy(path)} signatures re-made")


if __name__ == "__main__":
    main()
