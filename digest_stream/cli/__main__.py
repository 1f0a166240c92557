"""`python -m digest_stream.cli`: the console entry point, for tests and containers."""

from digest_stream.cli import main

main()
