"""Like-for-like configs: other systems' base configs with a tuned config's searched values.

    python -m projects.paper.scripts.transfer_config --tuned projects/paper/configs/tuned/glove_bilstm/twitter-nldm.cfg --from nldm \
        --space projects/paper/configs/glove_bilstm/space.yml --base "projects/paper/configs/glove_bilstm/{system}.cfg" \
        --systems softmax,crf1,crf2 --output "projects/paper/results/diagnosis/glove_bilstm_transfer/{system}.cfg"

The tuned config's values of the search space's parameters are read back from it (exactly, through the space:
``Space.baseline``), and each target system's base config gets those that apply to it (a softmax has no label
embedding or tree; a parameter the tuned system was not searched on keeps the base config's value). The output
differs from the base config only in those values, so that heads compared on it differ in the head alone.
"""
import argparse
import sys
from pathlib import Path
from typing import Dict, Tuple

from thinc.api import Config

if not __package__:  # run by path: the repository root on sys.path (for projects.paper.*), not this folder
    sys.path[0] = str(Path(__file__).resolve().parents[3])

from projects.paper.tuning.space import Space, load_space
from projects.paper.tuning.study import base_config, tagging_component


def tuned_values(space: Space, tuned: Path, system: str) -> Dict[str, object]:
    """The space's parameter values in a tuned config (those that apply to ``system``)."""
    config = base_config(tuned)
    return space.baseline(system, config, tagging_component(config, tuned))


def transfer(space: Space, values: Dict[str, object], base: Path, system: str) -> Tuple[Config, Dict[str, object]]:
    """``base`` (the target system's config) with the ``values`` that apply to ``system``; and those values."""
    config = base_config(base)
    component = tagging_component(config, base)
    applied: Dict[str, object] = {}
    for param in space.for_system(system, config, component):
        if param.name in values and param.applies_given(applied):
            applied[param.name] = values[param.name]
    space.check_against(system, config, component, str(base))
    overrides = space.overrides(applied, component)
    return Config().from_str(config.to_str(), interpolate=False, overrides=overrides), applied


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tuned", type=Path, required=True, help="the tuned config whose values are transferred")
    parser.add_argument("--from", dest="source", required=True, help="its system (softmax, crf1, crf2, nldm)")
    parser.add_argument("--space", type=Path, required=True, help="the search space the tuned config came from")
    parser.add_argument("--base", required=True, help="target base configs, {system} standing for the system")
    parser.add_argument("--systems", required=True, help="comma-separated target systems")
    parser.add_argument("--output", required=True, help="output path, {system} standing for the system")
    args = parser.parse_args()
    for path in (args.tuned, args.space):
        if not path.exists():
            parser.error(f"{path} does not exist")
    space = load_space(args.space)
    values = tuned_values(space, args.tuned, args.source)
    for system in [s.strip() for s in args.systems.split(",") if s.strip()]:
        base = Path(args.base.format(system=system))
        if not base.exists():
            parser.error(f"{base} does not exist")
        config, applied = transfer(space, values, base, system)
        shown = ", ".join(f"{k}={v}" for k, v in applied.items())
        header = (f"# {base} with the values of {args.tuned} ({args.source}) that apply to {system}, set through "
                  f"{args.space}:\n# {shown}\n# Written by projects/paper/scripts/transfer_config.py (like-for-like comparisons).\n")
        output = Path(args.output.format(system=system))
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(header + config.to_str() + "\n", encoding="utf8")
        print(f"{output}: {shown}")


if __name__ == "__main__":
    main()
