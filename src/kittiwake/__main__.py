"""`python -m kittiwake`: the command line."""

from kittiwake.cli.main import main

if __name__ == "__main__":
    main()
