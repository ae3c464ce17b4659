"""`python -m threadlog`: the `threadlog` command, for when the console script is not on PATH."""

from threadlog.cli import main

main()
