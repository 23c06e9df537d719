"""`python -m kittiwake.broker`: the `kittiwake broker` command without the CLI group."""

from kittiwake.cli.broker_command import broker

if __name__ == "__main__":
    broker(prog_name="python -m kittiwake.broker")
