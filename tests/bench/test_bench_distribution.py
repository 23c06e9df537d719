"""`kittiwake bench` with and without the benchmarks distribution: its commands join the group
through entry points, and without it each of their names says how to install it.

The group is built over a given list of entry points (`make_bench(entry_points=...)`): an empty one
is an environment without the distribution, whatever this one has installed."""

from __future__ import annotations

import tomllib
from importlib.metadata import EntryPoint
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from kittiwake.bench import distribution
from kittiwake.cli.bench_command import BUILT_IN, make_bench

ROOT = Path(__file__).resolve().parents[2]
BUILT_IN_NAMES = {"ops", "latency", "scale", "producer", "udp", "cluster"}


def _point(name: str, value: str) -> EntryPoint:
    return EntryPoint(name=name, value=value, group=distribution.COMMANDS_GROUP)


def test_the_wheel_builds_in_the_broker_s_own_benchmarks() -> None:
    assert {command.name for command in BUILT_IN} == BUILT_IN_NAMES
    assert not BUILT_IN_NAMES & set(distribution.DISTRIBUTION_COMMANDS)


@pytest.mark.parametrize("name", distribution.DISTRIBUTION_COMMANDS)
@pytest.mark.parametrize("arguments", [(), ("--help",), ("--tasks", "5", "extra")])
def test_a_command_of_the_distribution_without_it_says_how_to_install_it(name: str, arguments: tuple[str, ...]) -> None:
    result = CliRunner().invoke(make_bench(entry_points=()), [name, *arguments])
    assert result.exit_code == 1, result.output
    assert f"`kittiwake bench {name}`" in result.output
    assert "pip install -e ./benchmarks" in result.output and "make setup" in result.output
    assert "No such command" not in result.output and result.exception is not None
    assert isinstance(result.exception, SystemExit)  # a ClickException's exit, no traceback


def test_help_without_the_distribution_lists_the_broker_s_own_benchmarks() -> None:
    result = CliRunner().invoke(make_bench(entry_points=()), ["--help"])
    assert result.exit_code == 0, result.output
    listed = {line.split()[0] for line in result.output.split("Commands:")[1].splitlines() if line.strip()}
    assert listed == BUILT_IN_NAMES


def test_an_unknown_name_is_click_s_usage_error() -> None:
    result = CliRunner().invoke(make_bench(entry_points=()), ["nonsense"])
    assert result.exit_code == 2 and "No such command 'nonsense'" in result.output


def test_an_entry_point_joins_the_group_and_runs() -> None:
    group = make_bench(entry_points=[_point("echo", "kittiwake.bench.commands:udp_command")])
    assert "echo" in group.list_commands(click.Context(group))
    result = CliRunner().invoke(group, ["echo", "--help"])
    assert result.exit_code == 0 and "--threads" in result.output


def test_a_built_in_name_is_not_replaced_by_an_entry_point() -> None:
    group = make_bench(entry_points=[_point("ops", "kittiwake.bench.commands:udp_command")])
    result = CliRunner().invoke(group, ["ops", "--help"])
    assert result.exit_code == 0 and "--clients" in result.output


def test_an_installed_command_that_cannot_import_says_why() -> None:
    group = make_bench(entry_points=[_point("peers", "kittiwake_no_such_module:peers_command")])
    result = CliRunner().invoke(group, ["peers"])
    assert result.exit_code == 1
    assert "pip install -e ./benchmarks" in result.output and "kittiwake_no_such_module" in result.output


def test_the_distribution_declares_every_command_the_wheel_expects_of_it() -> None:
    project = tomllib.loads((ROOT / "benchmarks" / "pyproject.toml").read_text())
    points = project["project"]["entry-points"]
    assert set(points[distribution.COMMANDS_GROUP]) == set(distribution.DISTRIBUTION_COMMANDS)
    assert set(points[distribution.REFERENCES_GROUP]) == {"huey_enqueue"}
    assert "kittiwake[spark,peers,sqs,kombu]" in project["project"]["dependencies"]


def test_this_environment_has_the_distribution_installed_and_its_commands_load() -> None:
    """`make setup` installs benchmarks/ beside the package, so every bench command is here."""
    installed = distribution.installed_commands()
    assert set(installed) >= set(distribution.DISTRIBUTION_COMMANDS), (
        "the benchmarks distribution is not installed: make setup (pip install -e ./benchmarks)")
    for name in distribution.DISTRIBUTION_COMMANDS:
        command = distribution.load_command(name, installed)
        assert command is not None and command.name == name and command.params, name
    assert distribution.reference("huey_enqueue") is not None
