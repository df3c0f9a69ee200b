"""The paper's Figure 4: the NLDM's test accuracy as the latent tree's longest arc, k, varies.

One config (an NLDM pipeline), trained over seeds at each k with ``components.<nldm>.model.max_dist`` set on
the command line: models in ``<training>/k<k>/nldm/seed<s>``, rows in the runs file ``<results>`` under the keys
``k<k>/nldm-seed<s>`` (:mod:`..runs.records`; a run with a row is skipped). The table gives, per k, the mean ± std
test accuracy, the mean dev accuracy and the k that dev would choose within the paper's search range
(section 6.1: k in {2, ..., 10}); the figure plots mean ± std (test and dev) against k.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, List, Optional, Sequence, Tuple

from ..runs.seeds import RunError, RunSpec, load_records, mean_std, run_all

PAPER_K_RANGE = range(2, 11)  # the paper's search range for k (section 6.1)


def nldm_component(config: Path) -> Tuple[str, Optional[int]]:
    """The name of the one ``nldm_tagger`` component of the pipeline in ``config`` and its model's own
    ``max_dist`` (None where the config leaves it to the architecture's default)."""
    from spacy.util import load_config

    from projects.paper.registry import components_made_by

    if not Path(config).exists():
        raise RunError(f"config not found: {config}")
    pipeline = load_config(config, interpolate=False)
    names = components_made_by(pipeline, ["nldm_tagger"])
    if len(names) != 1:
        raise RunError(f"{config}: needs exactly one nldm_tagger component, found {len(names)} ({names})")
    return names[0], pipeline["components"][names[0]].get("model", {}).get("max_dist")


def arc_length_spec(config: Path, component: str, k: int, *, training: Path, results: Path,
                    **data_and_budget) -> RunSpec:
    """The runs of one k: ``config`` with its NLDM ``component``'s ``max_dist`` set to k (system name ``nldm``)."""
    if k < 1:
        raise RunError(f"k must be at least 1, got {k}")
    return RunSpec(config_pattern=str(config), training=Path(training) / f"k{k}", results=Path(results),
                   prefix=f"k{k}/", overrides={f"components.{component}.model.max_dist": str(k)}, **data_and_budget)


def run_arc_lengths(config: Path, component: str, ks: Sequence[int], seeds: Sequence[int], *, training: Path,
                    results: Path, echo: Callable[[str], None] = print, **data_and_budget) -> None:
    """Train and test the NLDM ``component`` of ``config`` (as :func:`nldm_component` names it) at every k over
    ``seeds``, seed-major (every k has a first result early); ``data_and_budget``: train, dev, test,
    max_steps, eval_frequency, threads, gpu_id."""
    specs = {k: arc_length_spec(config, component, k, training=training, results=results, **data_and_budget)
             for k in ks}
    for seed in seeds:
        for k, spec in specs.items():
            echo(f"-- k = {k}")
            run_all(spec, ["nldm"], [seed])


@dataclass
class ArcRow:
    """Mean figures of one k over its seeds (std None for one seed)."""

    k: int
    seeds: List[int]
    test: float
    test_std: Optional[float]
    dev: float
    dev_std: Optional[float]
    minutes: float  # mean training wall time per run


def summarise(results: Path, ks: Sequence[int]) -> List[ArcRow]:
    """One row per k with at least one run in the runs file ``results`` (keys ``k<k>/...``), in the order of
    ``ks``."""
    rows = []
    for k in ks:
        runs = sorted(load_records(Path(results), prefix=f"k{k}/").get("nldm", []), key=lambda r: r["seed"])
        if not runs:
            continue
        test, test_std = mean_std([r["test_acc"] for r in runs])
        dev, dev_std = mean_std([r["dev_acc"] for r in runs])
        minutes = sum(r["train_seconds"] for r in runs) / len(runs) / 60
        rows.append(ArcRow(k, [r["seed"] for r in runs], test, test_std, dev, dev_std, minutes))
    return rows


def dev_choice(rows: Sequence[ArcRow], search: Sequence[int] = PAPER_K_RANGE) -> Optional[ArcRow]:
    """The row with the highest mean dev accuracy among the ks in ``search`` (ties: the smaller k), over rows
    that share the largest seed count (a mean over fewer seeds is not compared with one over more)."""
    candidates = [row for row in rows if row.k in search]
    if not candidates:
        return None
    most = max(len(row.seeds) for row in candidates)
    return max((row for row in candidates if len(row.seeds) == most), key=lambda row: (row.dev, -row.k))


def _pm(mean: float, std: Optional[float]) -> str:
    return f"{mean:.2f} ± {std:.2f}" if std is not None else f"{mean:.2f}"


def render_table(rows: Sequence[ArcRow], *, title: str, command: str = "", note: str = "",
                 reference: Optional[int] = None) -> str:
    """Markdown: per k, test mean ± std, dev mean ± std, seeds, minutes per run, and the change in test
    accuracy against k = ``reference`` (the config's own k, where given); the dev choice in bold."""
    chosen = dev_choice(rows)
    ref = next((row for row in rows if row.k == reference), None)
    lines = [f"# {title}", ""]
    if note:
        lines += [note, ""]
    if command:
        lines += [f"Command: `{command}`", ""]
    lines += ["| k | test (mean ± std) | dev (mean ± std) | seeds | train min/run | test − k = "
              f"{reference if ref else '–'} |", "|---|---|---|---|---|---|"]
    for row in rows:
        marks = (["dev's choice"] if row is chosen else []) + (["the config's"] if row.k == reference else [])
        k = (f"**{row.k}**" if row is chosen else str(row.k)) + (f" ({'; '.join(marks)})" if marks else "")
        diff = f"{row.test - ref.test:+.2f}" if ref is not None and row is not ref else "–"
        lines.append(f"| {k} | {_pm(row.test, row.test_std)} | {_pm(row.dev, row.dev_std)} | "
                     f"{','.join(map(str, row.seeds))} | {row.minutes:.1f} | {diff} |")
    lines += ["", "Dev's choice: the highest mean dev accuracy over the paper's search range for k "
              f"({PAPER_K_RANGE.start}-{PAPER_K_RANGE.stop - 1}), among the ks with the most seeds. Std: sample "
              "standard deviation over seeds. Each run's commands are in its row of the runs file "
              "(key k<k>/nldm-seed<s>).", ""]
    return "\n".join(lines)


def write_figure(rows: Sequence[ArcRow], path: Path, title: str) -> None:
    """Test and dev accuracy (mean ± std over seeds) against k, as a PNG or SVG (by ``path``'s suffix)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ks = [row.k for row in rows]
    fig, ax = plt.subplots(figsize=(5.2, 3.6), dpi=150)
    for label, means, stds, fmt in (("test", [r.test for r in rows], [r.test_std or 0.0 for r in rows], "o-"),
                                    ("dev", [r.dev for r in rows], [r.dev_std or 0.0 for r in rows], "s--")):
        ax.errorbar(ks, means, yerr=stds, fmt=fmt, capsize=3, label=label)
    ax.set_xticks(ks)
    ax.set_xlabel("k, the longest arc of the latent tree")
    ax.set_ylabel("tag accuracy (%)")
    ax.set_title(title, fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
