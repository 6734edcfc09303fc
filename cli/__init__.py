# harness.cli: the Typer command line, the only layer a person or an agent types into.
