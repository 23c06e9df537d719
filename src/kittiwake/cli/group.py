"""The click group class of the `kittiwake` command: lazy commands and one error format.

Two things every command gets from here rather than doing itself:

* Errors: a `kittiwake.errors` error escaping a command prints
  `error CODE: message` on stderr and exits 1; a usage error (a bad option or
  argument, caught by click before anything is sent) prints the usage, then
  `error BAD_REQUEST: message`, and exits 2. Scripts can match on the code.
* Lazy commands: commands registered as "module:attribute" are imported only
  when used (or listed by --help), so a slow or optional module (the broker,
  benchmarks, Spark) costs nothing to other commands, and a command whose
  module is not installed is simply absent instead of breaking the CLI.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

import click

from kittiwake import errors


class CommandFailed(click.ClickException):
    """A Kittiwake error raised by a command, shown as `error CODE: message`."""

    exit_code = 1

    def __init__(self, error: errors.KittiwakeError) -> None:
        super().__init__(error.message)
        self.error = error

    def show(self, file: Any = None) -> None:
        click.echo(f"error {self.error.code}: {self.error.message}", err=True)


class BadUsage(click.UsageError):
    """A usage error shown with its usage line and as `error BAD_REQUEST: message`."""

    def show(self, file: Any = None) -> None:
        if self.ctx is not None:
            click.echo(self.ctx.get_usage(), err=True)
            click.echo(f"Try '{self.ctx.command_path} --help' for help.", err=True)
        click.echo(f"error {errors.BadRequest.code}: {self.format_message()}", err=True)


class KittiwakeGroup(click.Group):
    """A click group with lazily imported commands and Kittiwake's error format."""

    def __init__(self, *args: Any, lazy_commands: dict[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy_commands: dict[str, str] = dict(lazy_commands or {})

    def add_lazy_command(self, name: str, target: str) -> None:
        """Register `name` as the click command at "module:attribute", imported on first use."""
        self.lazy_commands[name] = target

    def list_commands(self, ctx: click.Context) -> list[str]:
        names = set(super().list_commands(ctx))
        names.update(name for name, target in self.lazy_commands.items() if _module_exists(target))
        return sorted(names)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is not None or cmd_name not in self.lazy_commands:
            return command
        module_name, _, attribute = self.lazy_commands[cmd_name].partition(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:
                return None  # not installed (yet): the command is absent, the CLI still works
            raise
        command = getattr(module, attribute)
        if not isinstance(command, click.Command):
            raise TypeError(f"{self.lazy_commands[cmd_name]} is not a click command")
        self.add_command(command, cmd_name)
        return command

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except errors.KittiwakeError as exc:
            raise CommandFailed(exc) from None
        except click.UsageError as exc:
            if isinstance(exc, BadUsage):
                raise
            raise BadUsage(exc.message, exc.ctx) from None


def _module_exists(target: str) -> bool:
    module_name = target.partition(":")[0]
    try:
        return importlib.util.find_spec(module_name) is not None
    except ModuleNotFoundError:
        return False
