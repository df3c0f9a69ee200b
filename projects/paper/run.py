"""Run a study command from the repository root, wherever it is started (the study's paths are relative to
the root: the study's projects/paper/configs/ and projects/paper/results/, the main job's configs/, corpus/,
training/, assets/). The commands of projects/paper/project.yml go
through it, since `spacy project run` starts them in this folder:

    python projects/paper/run.py tune --datasets twitter ...         # a command of python -m projects.paper
    python projects/paper/run.py synthetic_report --output ...      # a script of projects/paper/scripts

From the repository root the same commands are ``python -m projects.paper <command>`` and
``python -m projects.paper.scripts.<script>``.
"""
import os
import runpy
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = Path(__file__).resolve().parent / "scripts"


def main(argv) -> None:
    sys.path[0] = str(ROOT)  # projects.paper.* importable; this folder not on the path
    os.chdir(ROOT)
    if argv and (SCRIPTS / f"{argv[0]}.py").is_file():
        sys.argv = [str(SCRIPTS / f"{argv[0]}.py"), *argv[1:]]
        runpy.run_module(f"projects.paper.scripts.{argv[0]}", run_name="__main__", alter_sys=True)
        return
    from projects.paper.cli import app

    app(args=list(argv), prog_name="projects/paper/run.py")


if __name__ == "__main__":
    main(sys.argv[1:])
