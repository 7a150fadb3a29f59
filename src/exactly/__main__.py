"""`python -m exactly` runs the `exactly` command."""

from exactly.cli.main import main

main()
