"""The search space: which config values a trial sets, read from a small YAML file.

Format (see ``projects/paper/configs/tuned/space.yml``)::

    parameters:
      <name>:                      # an Optuna parameter, sampled in file order
        type: float | int | categorical
        low: 0.0003                # float / int
        high: 0.003
        log: true                  # optional (float / int)
        step: 2                    # optional (int)
        choices: [100, 200, 400]   # categorical
        set: <path> | [<path>, ...]      # config values set to the sampled value ...
        scale: 2                         # ... times this factor (D_h -> BiLSTM width = 2 * D_h)
        set_by_choice:                   # categorical only: the overrides each choice applies
          sgd: {training.optimizer: {"@optimizers": "SGD.v1", ...}}
        systems: [crf1, crf2, nldm]      # optional: only for these systems
        when: {optimizer: sgd}           # optional: only when earlier parameters took these values
        when_config: {<path>: [trilinear]}   # optional: only when the base config has one of these values

A path is a dotted config path; ``{component}`` stands for the tagging component of the system's config
(the last entry of ``[nlp] pipeline``: ``tagger``, ``crf`` or ``nldm``). Every path a parameter sets must exist
in the base config (a typo would otherwise train the default silently); a path whose value is a mapping replaces
that whole config block (e.g. the optimizer), and later paths inside it are folded into that mapping.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import srsly

TYPES = ("float", "int", "categorical")
KEYS = {"type", "low", "high", "log", "step", "choices", "set", "scale", "set_by_choice", "systems", "when",
        "when_config", "help"}


class SpaceError(ValueError):
    """A search-space file or parameter that cannot be used (the message says what to fix)."""


@dataclass
class Param:
    """One searched hyper-parameter: its distribution, where it goes in the config and when it applies."""

    name: str
    type: str
    low: Optional[float] = None
    high: Optional[float] = None
    log: bool = False
    step: Optional[float] = None
    choices: Optional[List[Any]] = None
    set: List[str] = field(default_factory=list)
    scale: float = 1
    set_by_choice: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    systems: Optional[List[str]] = None
    when: Dict[str, List[Any]] = field(default_factory=dict)
    when_config: Dict[str, List[Any]] = field(default_factory=dict)
    help: str = ""

    def describe(self) -> str:
        """The distribution in words, e.g. ``log-uniform [0.0003, 0.003]`` or ``one of {100, 200, 400}``."""
        if self.type == "categorical":
            return "one of {" + ", ".join(str(c) for c in self.choices or []) + "}"
        kind = "log-uniform" if self.log else ("integer" if self.type == "int" else "uniform")
        if self.type == "int" and self.log:
            kind = "integer, log scale"
        step = f" step {self.step:g}" if self.step else ""
        return f"{kind} [{self.low:g}, {self.high:g}]{step}"

    def applies_given(self, values: Mapping[str, Any]) -> bool:
        """Whether ``when`` holds for the values of the parameters before it (a missing one: it does not)."""
        return all(values.get(k, _MISSING) in allowed for k, allowed in self.when.items())

    def suggest(self, trial) -> Any:
        """Sample this parameter on an Optuna trial."""
        if self.type == "float":
            return trial.suggest_float(self.name, self.low, self.high, log=self.log, step=self.step)
        if self.type == "int":
            return trial.suggest_int(self.name, int(self.low), int(self.high), log=self.log, step=int(self.step or 1))
        return trial.suggest_categorical(self.name, self.choices)

    def contains(self, value: Any) -> bool:
        """Whether ``value`` is a point of the distribution (used for the baseline trial)."""
        if self.type == "categorical":
            return any(value == c and type(value) is type(c) or _same_number(value, c) for c in self.choices or [])
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return False
        if self.type == "int" and float(value) != int(value):
            return False
        return self.low <= value <= self.high

    def overrides(self, value: Any, component: str) -> List[Tuple[str, Any]]:
        """The (path, value) config overrides for a sampled ``value``."""
        out: List[Tuple[str, Any]] = []
        if self.set_by_choice:
            for path, v in self.set_by_choice.get(str(value), {}).items():
                out.append((fill_path(path, component), v))
        for path in self.set:
            out.append((fill_path(path, component), _scaled(value, self.scale)))
        return out


@dataclass
class Space:
    """An ordered list of :class:`Param` read from ``path``."""

    params: List[Param]
    path: str = "<space>"

    def for_system(self, system: str, config: Mapping, component: str) -> List[Param]:
        """The parameters searched for ``system`` with this base config (``systems`` and ``when_config``
        filters; ``when`` depends on the sampled values and is checked in :meth:`sample`)."""
        return [p for p in self.params if _applies_static(p, system, config, component)]

    def sample(self, trial, system: str, config: Mapping, component: str) -> Dict[str, Any]:
        """Sample the parameters that apply, in file order (define-by-run: conditional ones only when their
        ``when`` holds)."""
        values: Dict[str, Any] = {}
        for p in self.for_system(system, config, component):
            if p.applies_given(values):
                values[p.name] = p.suggest(trial)
        return values

    def overrides(self, values: Mapping[str, Any], component: str) -> Dict[str, Any]:
        """The ``spacy train`` overrides of sampled ``values`` (a flat dict, paths in application order)."""
        by_name = {p.name: p for p in self.params}
        pairs: List[Tuple[str, Any]] = []
        for name, value in values.items():
            if name not in by_name:
                raise SpaceError(f"{self.path}: no parameter '{name}' (the study was run with another space?)")
            pairs.extend(by_name[name].overrides(value, component))
        return fold_overrides(pairs)

    def check_against(self, system: str, config: Mapping, component: str, config_name: str) -> None:
        """Raise :class:`SpaceError` if a parameter searched for ``system`` sets a path the config lacks."""
        for p in self.for_system(system, config, component):
            paths = [fill_path(s, component) for s in p.set]
            for choice in p.set_by_choice.values():
                paths += [fill_path(s, component) for s in choice]
            for path in paths:
                if not has_path(config, path):
                    raise SpaceError(
                        f"{self.path}: parameter '{p.name}' sets '{path}', which {config_name} does not have "
                        f"(fix the path, or restrict the parameter with `systems:` or `when_config:`)"
                    )

    def baseline(self, system: str, config: Mapping, component: str) -> Dict[str, Any]:
        """The base config's own values as parameter values, where they are points of the space (the
        baseline trial: tuning then never ends below the shipped config at the same budget)."""
        values: Dict[str, Any] = {}
        for p in self.for_system(system, config, component):
            if not p.applies_given(values):
                continue
            value = _read_back(p, config, component, self._paths_set(component, but=p))
            if value is not _MISSING and p.contains(value):
                values[p.name] = value
        return values

    def _paths_set(self, component: str, but: Param) -> frozenset:
        """The config paths that the parameters other than ``but`` set."""
        return frozenset(fill_path(path, component) for q in self.params if q is not but for path in q.set)

    def fingerprint(self) -> str:
        """A canonical JSON of the space (stored with a study: a resumed study must search the same space)."""
        return json.dumps([p.__dict__ for p in self.params], sort_keys=True, default=str)


_MISSING = object()


def format_value(value: Any) -> str:
    """A parameter value as the tables and logs print it (floats to 4 significant digits)."""
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def load_space(path: Path | str) -> Space:
    """Read and check a search-space YAML file."""
    path = Path(path)
    if not path.exists():
        raise SpaceError(f"search space file not found: {path}")
    try:
        data = srsly.read_yaml(path)
    except Exception as err:  # ruamel raises several error types
        raise SpaceError(f"{path}: not valid YAML: {err}") from None
    return parse_space(data, str(path))


def parse_space(data: Any, where: str = "<space>") -> Space:
    """Check a parsed space (a mapping with ``parameters``) and build the :class:`Space`."""
    if not isinstance(data, Mapping) or not isinstance(data.get("parameters"), Mapping) or not data["parameters"]:
        raise SpaceError(f"{where}: expected a mapping with a non-empty `parameters:` mapping")
    params: List[Param] = []
    for name, spec in data["parameters"].items():
        params.append(_parse_param(str(name), spec, where, [p.name for p in params]))
    return Space(params, where)


def _parse_param(name: str, spec: Any, where: str, earlier: Sequence[str]) -> Param:
    at = f"{where}: parameter '{name}'"
    if not isinstance(spec, Mapping):
        raise SpaceError(f"{at}: expected a mapping")
    unknown = set(spec) - KEYS
    if unknown:
        raise SpaceError(f"{at}: unknown key(s) {', '.join(sorted(unknown))} (allowed: {', '.join(sorted(KEYS))})")
    kind = spec.get("type", "categorical" if "choices" in spec else None)
    if kind not in TYPES:
        raise SpaceError(f"{at}: `type` must be one of {', '.join(TYPES)}, not {kind!r}")
    p = Param(name=name, type=kind, log=bool(spec.get("log", False)), help=str(spec.get("help", "")))
    if kind == "categorical":
        choices = spec.get("choices")
        if not isinstance(choices, list) or not choices:
            raise SpaceError(f"{at}: a categorical parameter needs a non-empty `choices:` list")
        p.choices = list(choices)
    else:
        for key in ("low", "high"):
            if not _is_number(spec.get(key)):
                raise SpaceError(f"{at}: a {kind} parameter needs a numeric `{key}:`")
        p.low, p.high = spec["low"], spec["high"]
        if p.low >= p.high:
            raise SpaceError(f"{at}: low ({p.low}) must be below high ({p.high})")
        if p.log and p.low <= 0:
            raise SpaceError(f"{at}: a log-scale range needs low > 0")
        if spec.get("step") is not None:
            if not _is_number(spec["step"]) or spec["step"] <= 0:
                raise SpaceError(f"{at}: `step` must be a positive number")
            p.step = spec["step"]
    sets = spec.get("set", [])
    p.set = [sets] if isinstance(sets, str) else list(sets)
    if not all(isinstance(s, str) and "." in s for s in p.set):
        raise SpaceError(f"{at}: `set` must be a dotted config path or a list of them")
    if "scale" in spec:
        if not _is_number(spec["scale"]):
            raise SpaceError(f"{at}: `scale` must be a number")
        p.scale = spec["scale"]
    by_choice = spec.get("set_by_choice", {}) or {}
    if by_choice:
        if kind != "categorical":
            raise SpaceError(f"{at}: `set_by_choice` needs a categorical parameter")
        if not isinstance(by_choice, Mapping):
            raise SpaceError(f"{at}: `set_by_choice` must map choices to overrides")
        for choice, overrides in by_choice.items():
            if str(choice) not in {str(c) for c in p.choices}:
                raise SpaceError(f"{at}: `set_by_choice` names {choice!r}, which is not one of the choices")
            if not isinstance(overrides, Mapping) or not all(isinstance(k, str) and "." in k for k in overrides):
                raise SpaceError(f"{at}: `set_by_choice.{choice}` must map dotted config paths to values")
        p.set_by_choice = {str(c): dict(o) for c, o in by_choice.items()}
    if not p.set and not p.set_by_choice:
        raise SpaceError(f"{at}: needs `set:` (or `set_by_choice:`): where does its value go?")
    if spec.get("systems") is not None:
        systems = spec["systems"]
        if not isinstance(systems, list) or not systems:
            raise SpaceError(f"{at}: `systems` must be a non-empty list")
        p.systems = [str(s) for s in systems]
    p.when = _conditions(spec.get("when"), f"{at}: `when`")
    for other in p.when:
        if other not in earlier:
            raise SpaceError(f"{at}: `when` refers to '{other}', which is not a parameter defined above it")
    p.when_config = _conditions(spec.get("when_config"), f"{at}: `when_config`")
    return p


def _conditions(raw: Any, at: str) -> Dict[str, List[Any]]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise SpaceError(f"{at} must be a mapping")
    return {str(k): (list(v) if isinstance(v, list) else [v]) for k, v in raw.items()}


def _applies_static(p: Param, system: str, config: Mapping, component: str) -> bool:
    if p.systems is not None and system not in p.systems:
        return False
    for path, allowed in p.when_config.items():
        value = get_path(config, fill_path(path, component), _MISSING)
        if value is _MISSING or value not in allowed:
            return False
    return True


def _read_back(p: Param, config: Mapping, component: str, set_elsewhere: frozenset = frozenset()) -> Any:
    """The parameter value that the base config holds (inverse of :meth:`Param.overrides`). A choice's
    overrides are compared without the paths that other parameters set (``set_elsewhere``): SGD at a
    learning rate of 0.3 is still the SGD choice, whose block says 0.1."""
    if p.set_by_choice:
        # the choice whose overrides the config already has; a choice with no overrides matches any config
        matching = [c for c in p.choices or [] if all(
            _holds(config, fill_path(k, component), v, set_elsewhere)
            for k, v in p.set_by_choice.get(str(c), {}).items())]
        non_empty = [c for c in matching if p.set_by_choice.get(str(c))]
        if non_empty or matching:
            choice = (non_empty or matching)[0]
            return choice
        return _MISSING
    value = get_path(config, fill_path(p.set[0], component), _MISSING)
    if value is _MISSING or not _is_number(value):
        return value
    value = value / p.scale
    return int(value) if p.type == "int" or (p.type == "categorical" and float(value).is_integer()
                                               and all(isinstance(c, int) for c in p.choices or [])) else value


def _holds(config: Mapping, path: str, want: Any, skip: frozenset) -> bool:
    """Whether ``config`` has ``want`` at ``path`` (a mapping: key by key), paths in ``skip`` aside."""
    if path in skip:
        return True
    have = get_path(config, path, _MISSING)
    if isinstance(want, Mapping):
        return isinstance(have, Mapping) and all(_holds(config, f"{path}.{k}", v, skip) for k, v in want.items())
    return have == want


def fill_path(path: str, component: str) -> str:
    """Replace ``{component}`` in a config path."""
    return path.replace("{component}", component)


def get_path(config: Mapping, path: str, default: Any = None) -> Any:
    """The value at a dotted ``path`` of a nested config mapping, or ``default``."""
    node: Any = config
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return default
        node = node[part]
    return node


def has_path(config: Mapping, path: str) -> bool:
    """Whether a dotted ``path`` exists in the config (a key of an existing section)."""
    return get_path(config, path, _MISSING) is not _MISSING


def fold_overrides(pairs: Iterable[Tuple[str, Any]]) -> Dict[str, Any]:
    """Overrides as spaCy applies them, with paths inside a block that an earlier override replaces folded into
    that block (spaCy applies overrides in order, but a block given as a mapping would lose keys set before it)."""
    out: Dict[str, Any] = {}
    for path, value in pairs:
        parent = next((p for p in out if path.startswith(p + ".") and isinstance(out[p], dict)), None)
        if parent is None:
            out[path] = json.loads(json.dumps(value))  # a private copy
            continue
        node = out[parent]
        keys = path[len(parent) + 1:].split(".")
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        node[keys[-1]] = value
    return out


def _scaled(value: Any, scale: float) -> Any:
    if scale == 1 or not _is_number(value):
        return value
    out = value * scale
    return int(out) if float(out).is_integer() and isinstance(value, int) else out


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _same_number(a: Any, b: Any) -> bool:
    return _is_number(a) and _is_number(b) and float(a) == float(b)
