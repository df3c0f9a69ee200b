"""The study's scripts, run from the repository root as ``python -m projects.paper.scripts.<name>`` (or by
path, ``python projects/paper/scripts/<name>.py``); they import each other as ``projects.paper.scripts.*``."""
