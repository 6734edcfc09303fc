# The `harness` console script. A plain `team` call (what agents run inside their turns) is parsed and run
# without loading Typer; everything else, help and usage errors included, goes to the Typer application.
import sys


def main() -> None:
    from harness.cli.commands import run_fast

    if run_fast(sys.argv[1:]):
        return
    from harness.cli.app import app

    app()


if __name__ == "__main__":
    main()
