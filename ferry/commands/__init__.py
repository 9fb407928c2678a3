"""One module per `ferry` subcommand."""
