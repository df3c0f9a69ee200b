"""``projects/paper/results/tuning.md``: one row per study (dataset, system) and the search space, in Markdown."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from .space import Space, format_value

SYSTEM_ORDER = ["softmax", "crf1", "crf2", "nldm"]


def load_summaries(study_dir: Path) -> List[Dict[str, Any]]:
    """The summary of every study in ``study_dir/*.db`` (sorted by dataset, then system in the paper's order)."""
    import optuna

    from .study import summary

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    rows = []
    for db in sorted(Path(study_dir).glob("*.db")):
        storage = f"sqlite:///{db.resolve()}"
        for name in optuna.study.get_all_study_names(storage):
            rows.append(summary(optuna.load_study(study_name=name, storage=storage)))

    def key(row: Dict[str, Any]):
        s = row["settings"]
        system = s.get("system", "")
        return (s.get("dataset", ""), SYSTEM_ORDER.index(system) if system in SYSTEM_ORDER else 99, system)

    return sorted(rows, key=key)


def _acc(value: Optional[float]) -> str:
    return "–" if value is None else f"{value:.2f}"


def _trials(row: Dict[str, Any]) -> str:
    shared, rejudged = row.get("shared", 0), row.get("rejudged", 0)
    return (f"{row['finished'] - shared - rejudged}" + (f" + {shared} shared" if shared else "")
            + (f" + {rejudged} re-judged" if rejudged else ""))


def _best(row: Dict[str, Any]) -> str:
    if row["best_number"] is None:
        return "–"
    origin = row.get("best_shared_from")
    return f"{row['best_number']} ({origin}'s)" if origin else str(row["best_number"])


def render(rows: Sequence[Dict[str, Any]], space: Optional[Space] = None, command: str = "",
           pruner: str = "") -> str:
    """The Markdown report."""
    lines = [
        "# Hyper-parameter search on dev (`python -m projects.paper tune`)",
        "",
        "Dev token accuracy (%, `tag_acc`, the best evaluation of each trial). Each trial is one `spacy train` "
        "run of the system's config with the trial's overrides, a fixed step budget and seed; the test sets "
        "are not used. The first trial of each study is the shipped config's own values (column "
        "*Shipped*). *Trials* counts finished trials (complete + pruned), the same number for every system, then "
        "those that ran another system's best settings (*shared*: `tune --share best`; *Best trial* names the "
        "study and trial a shared best came from) and pruned trials run again under a fairer pruner "
        "(*re-judged*: `tune --rejudge-pruned`); "
        "*Failed* counts trials that stopped with an error or were interrupted (an interrupted trial is run "
        "again with the same parameters when the search resumes).",
        "",
    ]
    if command:
        lines += [f"Command: `{command}`", ""]
    if pruner:
        lines += [f"Pruning: {pruner}.", ""]
    lines += [
        "| Dataset | System | Base config | Best dev acc. | Shipped | Trials | Pruned | Failed | "
        "Steps (eval every) | Trial minutes | Best trial | Best parameters |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        s = r["settings"]
        params = ", ".join(f"{k}={format_value(v)}" for k, v in r["best_params"].items()) or "–"
        lines.append(
            f"| {s.get('dataset', '?')} | {s.get('system', '?')} | `{s.get('config', '?')}` | {_acc(r['best_value'])} | "
            f"{_acc(r['baseline_value'])} | {_trials(r)} | {r['pruned']} | {r['failed']} | "
            f"{s.get('steps', '?')} ({s.get('eval_frequency', '?')}) | {r['minutes']} | {_best(r)} | {params} |"
        )
    if not rows:
        lines.append("| – | – | – | – | – | 0 | 0 | 0 | – | – | – | no study found |")
    if space is not None:
        lines += ["", f"## Search space (`{space.path}`)", "",
                  "| Parameter | Distribution | Systems | When | Sets |", "|---|---|---|---|---|"]
        for p in space.params:
            when = ", ".join(f"{k} = {'/'.join(map(str, v))}" for k, v in {**p.when, **p.when_config}.items())
            sets = ", ".join(f"`{x}`" for x in p.set) or ", ".join(
                f"{c}: {', '.join(f'`{k}`' for k in o) or 'base config'}" for c, o in p.set_by_choice.items())
            if p.scale != 1:
                sets += f" (× {p.scale:g})"
            name = f"{p.name}" + (f" ({p.help})" if p.help else "")
            lines.append(f"| {name} | {p.describe()} | {', '.join(p.systems or ['all'])} | {when or '–'} | {sets} |")
    return "\n".join(lines) + "\n"


def write_report(study_dir: Path, output: Path, space: Optional[Space] = None, command: str = "",
                 pruner: str = "") -> str:
    text = render(load_summaries(study_dir), space, command, pruner)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text, encoding="utf8")
    return text
