"""projects/paper/scripts/transfer_config.py: another system's base config with a tuned config's searched values."""
import subprocess
import sys
from pathlib import Path

from thinc.api import Config

from nldm_fixtures import ROOT  # noqa: E402
from projects.paper.scripts.transfer_config import transfer, tuned_values

from projects.paper.tuning.space import load_space  # noqa: E402
from projects.paper.tuning.study import base_config  # noqa: E402

SPACE = ROOT / "projects" / "paper" / "configs" / "glove_bilstm" / "space.yml"
BASE = ROOT / "projects" / "paper" / "configs" / "glove_bilstm"


def _tuned_nldm(tmp_path: Path) -> Path:
    """A tuned NLDM config as the search writes it: the base with a trial's overrides (SGD, other widths)."""
    space = load_space(SPACE)
    values = {"optimizer": "sgd", "sgd_learn_rate": 0.3, "sgd_summed_loss": False, "dropout": 0.125,
              "word_dropout": 0.25, "embed_width": 100, "hidden_size": 200, "label_dim": 10, "max_dist": 4}
    config = Config().from_str(base_config(BASE / "nldm.cfg").to_str(), interpolate=False,
                               overrides=space.overrides(values, "nldm"))
    path = tmp_path / "twitter-nldm.cfg"
    config.to_disk(path)
    return path


def _flat(config: Config, prefix: str = "") -> dict:
    out = {}
    for key, value in config.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def test_values_read_back_exactly_and_round_trip(tmp_path):
    space = load_space(SPACE)
    tuned = _tuned_nldm(tmp_path)
    values = tuned_values(space, tuned, "nldm")
    assert values == {"optimizer": "sgd", "sgd_learn_rate": 0.3, "sgd_summed_loss": False, "dropout": 0.125,
                      "word_dropout": 0.25, "embed_width": 100, "hidden_size": 200, "label_dim": 10, "max_dist": 4}
    again, applied = transfer(space, values, BASE / "nldm.cfg", "nldm")  # onto its own base: the tuned config
    assert applied == values
    assert _flat(again) == _flat(base_config(tuned))


def test_another_head_gets_the_values_that_apply_and_nothing_else(tmp_path):
    space = load_space(SPACE)
    values = tuned_values(space, _tuned_nldm(tmp_path), "nldm")
    for system, component in (("crf1", "crf"), ("softmax", "tagger")):
        config, applied = transfer(space, values, BASE / f"{system}.cfg", system)
        expected = {k: v for k, v in values.items() if k != "max_dist"}  # no tree
        if system == "softmax":  # no label embedding, no structured loss
            expected = {k: v for k, v in expected.items() if k not in ("label_dim", "sgd_summed_loss")}
        assert applied == expected
        new, old = _flat(config), _flat(base_config(BASE / f"{system}.cfg"))
        changed = {k for k in new if new[k] != old.get(k)} | (set(old) - set(new))
        t2v = f"components.{component}.model.tok2vec"
        want = {"training.optimizer.@optimizers", "training.optimizer.learn_rate", "training.dropout",
                f"{t2v}.embed.word_dropout", f"{t2v}.embed_width", f"{t2v}.hidden_size"}
        if system == "crf1":
            want |= {f"components.{component}.normalize_loss", f"components.{component}.model.label_dim"}
        # SGD.v1 takes no Adam betas / eps: the optimizer block is replaced whole
        assert want <= changed
        assert all(k.startswith("training.optimizer.") for k in changed - want), changed - want
        assert new["training.optimizer.learn_rate"] == 0.3 and new[f"{t2v}.embed_width"] == 100


def test_cli_writes_configs_that_name_their_source(tmp_path):
    tuned = _tuned_nldm(tmp_path)
    out = tmp_path / "out" / "{system}.cfg"
    run = subprocess.run([sys.executable, str(ROOT / "projects" / "paper" / "scripts" / "transfer_config.py"), "--tuned", str(tuned),
                          "--from", "nldm", "--space", str(SPACE), "--base", str(BASE / "{system}.cfg"),
                          "--systems", "crf1,softmax", "--output", str(out)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    for system in ("crf1", "softmax"):
        text = (tmp_path / "out" / f"{system}.cfg").read_text()
        assert str(tuned) in text.splitlines()[0]
        assert Config().from_str(text, interpolate=False)["training"]["optimizer"]["@optimizers"] == "SGD.v1"
    missing = subprocess.run([sys.executable, str(ROOT / "projects" / "paper" / "scripts" / "transfer_config.py"), "--tuned",
                              str(tmp_path / "nope.cfg"), "--from", "nldm", "--space", str(SPACE), "--base", "x",
                              "--systems", "crf1", "--output", str(out)], capture_output=True, text=True)
    assert missing.returncode == 2 and "nope.cfg does not exist" in missing.stderr
