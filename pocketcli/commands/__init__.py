"""One module per `pocket` subcommand: each has add_parser(subparsers) and run(args) -> exit code."""
