"""The ``kilorl`` command line. Each subcommand group lives in its own module."""
