"""One module per `paradvisor` subcommand: each has `add_parser(subparsers)` and `run(args) -> int`."""
