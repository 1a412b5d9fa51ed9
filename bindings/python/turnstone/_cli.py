"""The ``turnstone`` console script: the engine's command line (every
subcommand of the Rust ``turnstone`` binary but ``serve``), run in this
process by the native module."""

import sys

from ._native import cli_main


def main() -> None:
    sys.exit(cli_main(["turnstone", *sys.argv[1:]]))


if __name__ == "__main__":
    main()
