# The `harness` console script. The common calls (`team`, what agents run inside their turns, the top help,
# `daemon status`, `agent list`) are parsed and run without loading Typer (cli/fast.py); everything else,
# usage errors included, goes to the Typer application.
# Whatever happens, the user gets the contract's exit status and at most one error line (one JSON document
# with --json) with a stable code, never a traceback.
import os
import sys

# What a shell reports for a command that Ctrl-C ended (128 + SIGINT); `wait` is often ended that way.
INTERRUPTED = 130


def run(argv: list[str]) -> int:
    """Run the command line `argv` (without the program name) and return its exit status."""
    from harness.cli import output

    json_out = "--json" in (argv[: argv.index("--")] if "--" in argv else argv)
    if argv[:1] == ["--version"]:
        from importlib.metadata import version

        number = version("harness")
        print(output.json_text({"version": number}) if json_out else f"harness {number}")
        return output.OK
    try:
        from harness.cli.fast import run_fast

        if run_fast(argv):
            return output.OK
        from harness.cli.app import run_typer

        return run_typer(argv, json_out)
    except SystemExit as stop:
        return stop.code if isinstance(stop.code, int) else output.PROTOCOL_ERROR
    except KeyboardInterrupt:
        return INTERRUPTED
    except BrokenPipeError:  # the reader left (`harness --help | head -1`): nothing more to say to it
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nor at exit, when stdout flushes
        return output.PROTOCOL_ERROR
    except Exception as error:  # a bug: still one line, with a code a script can tell from the others
        detail = f"{type(error).__name__}: {error} (a bug in harness; please report it)"
        output.emit_error(json_out, "internal", detail)
        return output.PROTOCOL_ERROR


def main() -> None:
    sys.exit(run(sys.argv[1:]))


if __name__ == "__main__":
    main()
