"""The command line's reference, from the click commands themselves.

`all_commands` walks `kittiwake.cli.main.cli` (lazy commands included: listing them imports them)
and renders each command's `--help` as the command prints it; `broker_options` renders the options
of `kittiwake broker` as a table for the operations page.
"""

from __future__ import annotations

import html

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
    """One table cell: on one line, with Markdown's table and link syntax escaped."""
    text = " ".join(text.split())
    for special in ("\\", "|", "[", "]", "*", "_", "`"):
        text = text.replace(special, "\\" + special)
    return text.replace("<", "&lt;")


def _names(text: str) -> str:
    """An option's names and metavar as code, safe inside a table cell."""
    return "<code>" + html.escape(text).replace("|", "&#124;") + "</code>"


def broker_options() -> str:
    """The options of `kittiwake broker` as click shows them in its help: names, metavar, default."""
    root = _context(cli, "kittiwake", None)
    broker = cli.get_command(root, "broker")
    assert broker is not None, "kittiwake broker is not installed"
    context = _context(broker, "broker", root)
    rows = ["| option | meaning |", "| --- | --- |"]
    for param in broker.get_params(context):
        record = param.get_help_record(context)
        if record is None or not isinstance(param, click.Option):
            continue
        names, help_text = record
        rows.append(f"| {_names(names)} | {_cell(help_text)} |")
    return "\n".join(rows) + "\n"
