"""The command lines' help (the package's ``python -m spacy_nldm`` and the study's ``python -m projects.paper``):
every command (sub-apps included) renders its --help, every parameter has a help text, flags take no value, and
bracketed text in the help texts ("[min, max]") is printed as written."""
import re

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from projects.paper.cli import app as paper_app
from spacy_nldm.cli import app

runner = CliRunner()
APPS = {"spacy-nldm": app, "projects.paper": paper_app}


def commands(name, command=None, path=()):
    """(app name, path, click command) of an app and of every command and sub-app under it."""
    command = get_command(APPS[name]) if command is None else command
    yield name, list(path), command
    for sub_name, sub in sorted(getattr(command, "commands", {}).items()):
        yield from commands(name, sub, (*path, sub_name))


COMMANDS = [item for name in APPS for item in commands(name)]
LEAVES = [(name, path, command) for name, path, command in COMMANDS if not hasattr(command, "commands")]
IDS = [" ".join([name, *path]) for name, path, _ in COMMANDS]


def rendered_help(name, path):
    result = runner.invoke(APPS[name], [*path, "--help"], terminal_width=100)
    assert result.exit_code == 0, result.output
    return result.output


def flat(text: str) -> str:
    return " ".join(text.split())


def test_the_walk_finds_the_commands_and_the_sub_apps():
    names = {" ".join([name, *path]) for name, path, _ in COMMANDS}
    assert {"spacy-nldm bench", "spacy-nldm bench pipeline", "spacy-nldm convert",
            "spacy-nldm convert ark", "spacy-nldm tag", "projects.paper synth", "projects.paper seed-runs",
            "projects.paper arc-length", "projects.paper tune", "projects.paper accuracy"} <= names


def test_the_package_cli_has_no_study_commands():
    """The study's commands (search, seed runs, synthetic data, the plain-loop comparison) are not the package's."""
    package = {" ".join(path) for name, path, _ in COMMANDS if name == "spacy-nldm"}
    assert not package & {"tune", "tune-table", "seed-runs", "seed-table", "arc-length", "synth", "derive-configs",
                          "glove-export", "glove-case-keys", "glove-check", "bench accuracy"}


@pytest.mark.parametrize("name,path,command", COMMANDS, ids=IDS)
def test_every_parameter_has_a_help_text(name, path, command):
    missing = [param.name for param in command.params if not (getattr(param, "help", None) or "").strip()]
    assert not missing, f"{' '.join(path)}: no help for {missing}"
    assert (command.help or "").strip(), f"{' '.join(path)} has no help"


@pytest.mark.parametrize("name,path,command", COMMANDS, ids=IDS)
def test_flags_take_no_value_and_the_help_shows_none(name, path, command):
    for param in command.params:
        if getattr(param, "type_descriptor", None) is not None and param.type_descriptor.annotation is bool:
            assert param.is_flag, f"{' '.join(path)} {param.opts}: a boolean option that takes a value"
            if param.default:  # on by default: a --no-x form turns it off
                assert param.secondary_opts, f"{' '.join(path)} {param.opts}: on by default, and no --no- form"
    assert "<bool>" not in rendered_help(name, path)


@pytest.mark.parametrize("name,path,command", COMMANDS, ids=IDS)
def test_bracketed_text_of_the_help_texts_is_printed(name, path, command):
    out = flat(rendered_help(name, path))
    texts = [command.help or ""] + [getattr(param, "help", None) or "" for param in command.params]
    for text in texts:
        for bracketed in re.findall(r"\[[^\]]*\]", text):
            assert flat(bracketed) in out, f"{' '.join(path)} --help lost {bracketed!r}"


@pytest.mark.parametrize("name,path,command", COMMANDS, ids=IDS)
def test_help_shows_no_type_placeholders_and_groups_list_whole_descriptions(name, path, command):
    """A user reads metavars that say what to type (not click's ``<int range>``, not ``""`` for an empty
    default), and a group's list of commands gives each one's first sentence whole, not cut with "..."."""
    out = rendered_help(name, path)
    assert "range>" not in out and '""' not in out, out
    if hasattr(command, "commands"):
        listed = flat(out.split("Commands:", 1)[1])
        for sub in command.commands.values():
            assert flat(sub.get_short_help_str(limit=10_000)) in listed


@pytest.mark.parametrize("name", sorted(APPS))
def test_without_a_command_the_help_is_printed_and_the_exit_status_is_0(name):
    result = runner.invoke(APPS[name], [], terminal_width=100)
    assert result.exit_code == 0, result.output
    assert result.output == rendered_help(name, [])  # what --help prints
