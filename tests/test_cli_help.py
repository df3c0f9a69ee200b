"""The command line's help: every command (sub-apps included) renders its --help, every parameter has a help
text, flags take no value, and bracketed text in the help texts ("[min, max]") is printed as written."""
import re

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from spacy_nldm.cli import app

runner = CliRunner()


def commands(command=None, path=()):
    """(path, click command) of the app and of every command and sub-app under it."""
    command = get_command(app) if command is None else command
    yield list(path), command
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        yield from commands(sub, (*path, name))


COMMANDS = list(commands())
LEAVES = [(path, command) for path, command in COMMANDS if not hasattr(command, "commands")]
IDS = [" ".join(path) or "spacy-nldm" for path, _ in COMMANDS]


def rendered_help(path):
    result = runner.invoke(app, [*path, "--help"], terminal_width=100)
    assert result.exit_code == 0, result.output
    return result.output


def flat(text: str) -> str:
    return " ".join(text.split())


def test_the_walk_finds_the_commands_and_the_sub_apps():
    names = {" ".join(path) for path, _ in COMMANDS}
    assert {"bench", "bench structs", "bench pipeline", "convert", "convert ark", "synth", "seed-runs",
            "arc-length", "tag", "tune"} <= names
    assert len(LEAVES) >= 20


@pytest.mark.parametrize("path,command", COMMANDS, ids=IDS)
def test_every_parameter_has_a_help_text(path, command):
    missing = [param.name for param in command.params if not (getattr(param, "help", None) or "").strip()]
    assert not missing, f"{' '.join(path)}: no help for {missing}"
    assert (command.help or "").strip(), f"{' '.join(path)} has no help"


@pytest.mark.parametrize("path,command", COMMANDS, ids=IDS)
def test_flags_take_no_value_and_the_help_shows_none(path, command):
    for param in command.params:
        if getattr(param, "type_descriptor", None) is not None and param.type_descriptor.annotation is bool:
            assert param.is_flag, f"{' '.join(path)} {param.opts}: a boolean option that takes a value"
            if param.default:  # on by default: a --no-x form turns it off
                assert param.secondary_opts, f"{' '.join(path)} {param.opts}: on by default, and no --no- form"
    assert "<bool>" not in rendered_help(path)


@pytest.mark.parametrize("path,command", COMMANDS, ids=IDS)
def test_bracketed_text_of_the_help_texts_is_printed(path, command):
    out = flat(rendered_help(path))
    texts = [command.help or ""] + [getattr(param, "help", None) or "" for param in command.params]
    for text in texts:
        for bracketed in re.findall(r"\[[^\]]*\]", text):
            assert flat(bracketed) in out, f"{' '.join(path)} --help lost {bracketed!r}"


@pytest.mark.parametrize("path,text", [
    (["synth"], "lengths are uniform in [min, max]"),
    (["bench", "spacy-train"], "([system] seed)"),
    (["bench", "spacy-train"], "[training] max_steps"),
    (["convert", "tweebank-v1"], "user_data['gold_heads']"),
])
def test_known_bracketed_strings_survive(path, text):
    assert text in flat(rendered_help(path))

