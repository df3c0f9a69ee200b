"""The `all` workflow's summary: metrics/<dataset>.md, test accuracy of each system, with dev accuracy and time.

    python -m projects.paper.scripts.all_table --dataset twitter --systems softmax,crf1,crf2,nldm
reads metrics/<dataset>/<system>.json (spacy evaluate --gold-preproc on the test split),
training/<dataset>/<system>/model-best/meta.json and config.cfg (dev accuracy, max steps) and, where a step
recorded it (scripts/timed.py), training/<dataset>/<system>/time.json (times),
writes the table (git-ignored: the committed reference run is projects/paper/results/reference/<dataset>.md, which no run
writes) and says where the trained pipelines are and how to load one.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

if not __package__:  # run by path: the repository root on sys.path (for projects.paper.*), not this folder
    sys.path[0] = str(Path(__file__).resolve().parents[3])

from projects.paper.registry import DATASETS, PAPER_TABLE2, SYSTEM_NAMES, SYSTEMS, parse_list
from spacy.util import load_config


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--dataset", default="twitter")
    p.add_argument("--systems", default="all")
    p.add_argument("--output", type=Path, default=None)
    args = p.parse_args()
    key = args.dataset
    systems = parse_list(args.systems, SYSTEMS)
    out = args.output or Path("metrics") / f"{key}.md"
    rows = []
    total, timed = 0.0, False
    for s in systems:
        metrics = Path("metrics") / key / f"{s}.json"
        meta = Path("training") / key / s / "model-best" / "meta.json"
        timing = Path("training") / key / s / "time.json"
        test = json.loads(metrics.read_text())["tag_acc"] * 100 if metrics.exists() else None
        dev = json.loads(meta.read_text())["performance"].get("tag_acc") if meta.exists() else None
        t = json.loads(timing.read_text())["seconds"] if timing.exists() else None
        cpu = json.loads(timing.read_text()).get("cpu_seconds") if timing.exists() else None
        total += t or 0.0
        trained = meta.parent / "config.cfg"  # the budget the run trained with (spacy train writes it)
        steps = load_config(trained)["training"]["max_steps"] if trained.exists() else None
        timed = timed or timing.exists()
        rows.append(
            f"| {SYSTEM_NAMES[s]} (`{s}`) | {'%.2f' % test if test is not None else '–'} | "
            f"{'%.2f' % (dev * 100) if dev is not None else '–'} | {PAPER_TABLE2[s][key]:.2f} | "
            f"{steps or '–'} | {'%.1f' % (t / 60) if t is not None else '–'} | "
            f"{'%.1f' % (cpu / 60) if cpu is not None else '–'} |"
        )
    split = "daily547 (test), model selected on oct27.test (dev)" if key == "twitter" else "test"
    text = "\n".join([
        f"# `spacy project run all`: {DATASETS[key]['paper']} POS, test accuracy",
        "",
        f"Token accuracy (%) on {split}, `spacy evaluate --gold-preproc`, one seed, the `all` workflow's "
        "short budget (see project.yml vars). The paper's Table 2 numbers are full-budget, tuned runs.",
        "",
        "| System | Test acc. | Dev acc. (best) | Paper | max steps | train wall time (min) | train CPU time (min) |",
        "|---|---|---|---|---|---|---|",
        *rows,
        "",
        f"Total training wall time: {total / 60:.1f} min (CPU time = wall time on an idle machine at one thread; "
        "the wall time here depends on what else ran on the shared 2-core machine)." if timed else
        "Times: not recorded (the main job runs spacy train itself; `python -m projects.paper.scripts.timed` records "
        "a step's time as training/<dataset>/<system>/time.json).",
        "",
    ])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(text)
    print(where_things_are(key, systems, out))


def where_things_are(key: str, systems, table: Path) -> str:
    """The end of the `all` workflow: where the trained pipelines are and how to use one."""
    models = {s: (Path("training") / key / s / "model-best").resolve() for s in systems}
    width = max(len(s) for s in systems)
    lines = ["", "Trained pipelines (spaCy pipeline folders; model-best = the best on dev):"]
    lines += [f"  {s:<{width}}  {path}{'' if path.exists() else '  (missing: its training failed?)'}"
              for s, path in models.items()]
    example = models.get("nldm", next(iter(models.values())))
    lines += [
        "Load one in Python:",
        f"  import spacy; nlp = spacy.load({str(example)!r})",
        '  doc = nlp("OMG I love this song"); print([(t.text, t.tag_, t._.nldm_head) for t in doc])',
        f"Tag a corpus: python -m spacy apply {example} input.jsonl tagged.spacy",
        "Package one: python -m spacy project run package",
        f"This run's table: {table.resolve()} (the committed reference run is projects/paper/results/reference/{key}.md).",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
