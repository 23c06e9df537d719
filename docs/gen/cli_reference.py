"""The command line's reference, from the click commands themselves.

`all_commands` walks `kittiwake.cli.main.cli` (lazy commands included: listing them imports them)
and renders each command's `--help` as the command prints it; `broker_options` renders the options
of `kittiwake broker` as a table for the operations page.
"""

from __future__ import annotations

import click

from kittiwake.cli.main import cli

WIDTH = 100


def _context(command: click.Command, name: str, parent: click.Context | None) -> click.Context:
    return click.Context(command, info_name=name, parent=parent, terminal_width=WIDTH, max_content_width=WIDTH)


def _walk(command: click.Command, name: str, parent: click.Context | None) -> list[tuple[str, click.Context]]:
    context = _context(command, name, parent)
    found = [(context.command_path, context)]
    if isinstance(command, click.Group):
        for child_name in command.list_commands(context):
            child = command.get_command(context, child_name)
            if child is not None and not child.hidden:
                found += _walk(child, child_name, context)
    return found


def all_commands() -> str:
    sections = []
    for path, context in _walk(cli, "kittiwake", None):
        level = "#" * min(2 + path.count(" "), 4)
        help_text = context.command.get_help(context).rstrip()
        sections.append(f"{level} `{path}`\n\n```text\n{help_text}\n```\n")
    return "\n".join(sections)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def broker_options() -> str:
    context = _context(cli, "kittiwake", None)
    broker = cli.get_command(context, "broker")
    assert broker is not None, "kittiwake broker is not installed"
    rows = ["| option | default | meaning |", "| --- | --- | --- |"]
    for param in broker.params:
        if not isinstance(param, click.Option) or param.hidden:
            continue
        names = " / ".join(f"`{name}`" for name in [*param.opts, *param.secondary_opts])
        default = param.default if not callable(param.default) else None
        shown = "" if default in (None, False, (), []) or param.is_flag and not default else f"`{default}`"
        envvar = f" (`${param.envvar}`)" if isinstance(param.envvar, str) else ""
        rows.append(f"| {names} | {shown} | {_cell(param.help or '')}{envvar} |")
    return "\n".join(rows) + "\n"
