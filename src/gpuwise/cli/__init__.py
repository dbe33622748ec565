"""Thin typer commands: parse flags, call the library, render a rich table or ``--json``."""
