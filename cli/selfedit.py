# `harness selfedit PATH`: write stdin to PATH when both safeguards of io.selfedit agree. Its exit statuses
# are the seed's, and scripts branch on them: 0 written, 2 a safeguard said no (the message names it, and
# safeguard 1 lists the Edit() rules it tried), 1 an I/O error. The safeguards run before stdin is read, so
# a refused call never waits on a terminal, and again once it is read, since the tree may change while stdin
# is pending (a review swapped a checked directory for a symlink to .claude then): the second verdict is the
# one that counts, and the write itself refuses a symlink that appears after it.
from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from harness.cli import output

if TYPE_CHECKING:
    from harness.io.selfedit import Allowed, Refused

REFUSED = 2
IO_ERROR = 1


def selfedit_command(
    path: Annotated[Path, typer.Argument(help="The file to write (its content comes on stdin).")],
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON document (errors too).")] = False,
) -> None:
    """Write stdin to PATH when the nearest .claude/settings.json allows it with an Edit(<glob>) rule
    (minimatch, dot: true, on the resolved path) and the work tree is on a branch other than main.

    Exit 0 when written, 2 when a safeguard refuses (the message names it), 1 on an I/O error."""
    from harness.io import selfedit  # here: `--help` and the rest of the CLI need none of it

    _check(path, json_out)
    data = sys.stdin.buffer.read(selfedit.MAX_CONTENT_BYTES + 1)
    if len(data) > selfedit.MAX_CONTENT_BYTES:
        _io_failure(json_out, f"stdin is larger than {selfedit.MAX_CONTENT_BYTES} bytes; nothing written")
    allowed = _check(path, json_out)
    try:
        selfedit.write_atomically(allowed.target, data)
    except selfedit.Refused as refused:
        _refused(json_out, refused)
    except OSError as error:
        _io_failure(json_out, f"cannot write {allowed.target}: {error.strerror or error}")
    view = {
        "written": str(allowed.target),
        "bytes": len(data),
        "rule": allowed.rule,
        "settings": str(allowed.settings),
        "branch": allowed.branch,
    }
    if json_out:
        output.emit_json(view)
    else:
        output.say(f"wrote {len(data)} bytes to {allowed.target} ({allowed.rule}, branch {allowed.branch})")


def _check(path: Path, json_out: bool) -> Allowed:
    """Both safeguards for `path`, or the exit that reports the first that says no."""
    from harness.io import selfedit

    try:
        return selfedit.check(path)
    except selfedit.Refused as refused:
        _refused(json_out, refused)
    except OSError as error:
        _io_failure(json_out, f"cannot check {path}: {error.strerror or error}")


def _refused(json_out: bool, refused: Refused) -> NoReturn:
    from harness.io.selfedit import SAFEGUARDS

    if json_out:
        document: dict[str, object] = {
            "error": "refused",
            "safeguard": refused.safeguard,
            "name": SAFEGUARDS[refused.safeguard],
            "detail": refused.message(),
        }
        if refused.rules is not None:
            document["rulesTried"] = list(refused.rules)
        output.emit_json(document)
    else:
        output.emit_error(False, "refused", refused.message())
    raise SystemExit(REFUSED) from None


def _io_failure(json_out: bool, detail: str) -> NoReturn:
    output.emit_error(json_out, "io_error", detail)
    raise SystemExit(IO_ERROR)
