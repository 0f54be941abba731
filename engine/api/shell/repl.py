"""The interactive shell: a prompt_toolkit prompt with history, completion and multi-line statements ended by `;`."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from prompt_toolkit import PromptSession
from prompt_toolkit.history import FileHistory, History, InMemoryHistory
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent

from trdb.api.shell.completion import SqlCompleter
from trdb.api.shell.registry import Quit
from trdb.api.shell.runner import QUIT_WORDS, Cancelled, Runner
from trdb.api.shell.version import version
from trdb.parser import is_complete

PROMPT = "trdb> "
CONTINUATION = "...> "


def history_path() -> Path:
    """$TRDB_HISTORY, else ~/.trdb_history."""
    return Path(os.environ.get("TRDB_HISTORY") or Path.home() / ".trdb_history").expanduser()


def _history(err) -> History:
    path = history_path()
    try:
        with open(path, "a", encoding="utf-8"):
            pass
    except OSError as exc:
        print(f"Warning: history is not kept: cannot write {path}: {exc.strerror}", file=err)
        return InMemoryHistory()
    return FileHistory(str(path))


def ready(text: str) -> bool:
    """Whether Enter runs the text: empty, a dot command, or statements ended by `;`."""
    return not text.strip() or text.lstrip().startswith((".", "\\")) or bool(QUIT_WORDS.match(text)) or is_complete(text)


def _bindings() -> KeyBindings:
    bindings = KeyBindings()

    @bindings.add("enter")
    def _enter(event: KeyPressEvent) -> None:
        buffer = event.current_buffer
        if buffer.complete_state is not None and buffer.complete_state.current_completion is not None:
            buffer.complete_state = None  # Enter takes the highlighted completion
        elif ready(buffer.text):
            buffer.validate_and_handle()
        else:
            buffer.insert_text("\n")

    return bindings


def _continuation(width: int, line_number: int, is_soft_wrap: bool) -> str:
    return CONTINUATION.rjust(width)


def banner(database: Optional[str]) -> str:
    where = f'database "{database}"' if database else "a database in memory (give a file name to keep it)"
    return (f"trdb {version()}, the tensor-relational database, on {where}.\n"
            "Statements end with ';'. Enter .help for the dot commands; Ctrl-C cancels, Ctrl-D leaves.")


def interact(runner: Runner, database: Optional[str]) -> int:
    """Read and run statements until Ctrl-D or .quit; returns the exit status (0)."""
    session = PromptSession(history=_history(runner.err), completer=SqlCompleter(runner), multiline=True,
                            key_bindings=_bindings(), prompt_continuation=_continuation,
                            complete_while_typing=False, enable_history_search=False)
    print(banner(database), file=runner.out, flush=True)
    while True:
        try:
            text = session.prompt(PROMPT)
        except KeyboardInterrupt:
            continue  # Ctrl-C while typing: the line is dropped
        except EOFError:
            return 0
        try:
            runner.run_script(text, None, bail=False)
        except Cancelled:
            continue
        except KeyboardInterrupt:  # between statements (printing a result): nothing to cancel
            print("Interrupted.", file=runner.err, flush=True)
        except Quit:
            return 0
        except Exception as exc:  # noqa: BLE001 - a bug in the shell: one message, and the shell stays
            runner.error(exc)
