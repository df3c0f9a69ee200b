"""The command line's Typer apps (``app`` and its ``bench`` group), on which the command modules register
their commands; :mod:`spacy_nldm.cli` imports those modules."""
import typer
from typer.core import TyperGroup

# The help texts are plain text: with rich markup (typer's default), "[min, max]" or "[training]" in a help
# text is read as a style tag and vanishes, and every flag is shown with a "<bool>" value it does not take.
# Every Typer of the CLI (sub-apps too: each renders its own commands' help) passes MARKUP.
MARKUP = None


class FullHelpGroup(TyperGroup):
    """A command group whose list of commands shows each command's whole first sentence, wrapped, where click
    cuts it to the terminal's width with "..."; called without a command it prints its help and exits 0
    (click's ``no_args_is_help`` exits 2, as for a usage error)."""

    def format_commands(self, ctx, formatter) -> None:
        rows = [(name, command.get_short_help_str(limit=1_000)) for name in self.list_commands(ctx)
                if (command := self.get_command(ctx, name)) is not None and not command.hidden]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def parse_args(self, ctx, args):
        if not args:
            typer.echo(ctx.get_help())
            ctx.exit(0)
        return super().parse_args(ctx, args)


app = typer.Typer(
    name="spacy-nldm",
    help="Neural Latent Dependency Model tools: data conversion, tagging, benchmarks.",
    cls=FullHelpGroup,
    add_completion=False,
    rich_markup_mode=MARKUP,
)
bench_app = typer.Typer(help="Benchmarks that print speed and memory figures.", cls=FullHelpGroup,
                        rich_markup_mode=MARKUP)
app.add_typer(bench_app, name="bench")
