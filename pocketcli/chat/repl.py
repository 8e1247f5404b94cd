"""`pocket chat --plain`: a prompt_toolkit REPL (persistent history, multi-line input) streaming replies
through rich; with stdin not a terminal it answers the whole of stdin once and exits. Kernels compiling (a cold
numba cache) show on stderr, or in the loading spinner while a model loads."""
from __future__ import annotations

import sys
from contextlib import closing

from rich.console import Console

from ..compile_progress import CompileProgress, CompileWatch
from ..compile_progress_line import report_compiles_to_stderr
from ..paths import history_file
from .session import ChatSession
from .thinking import ThinkingStream
from .slash import is_slash, run_slash

BANNER = "[bold]pocket chat[/] · model [cyan]{model}[/] · Enter sends, Ctrl+J or Alt+Enter adds a line, " \
         "/help lists commands, Ctrl+C stops a reply, Ctrl+D quits"


def run_pipe(session: ChatSession, text: str) -> int:
    with report_compiles_to_stderr() as compiles:
        session.load_model()
        session.send(text)
        for piece in compiles.stream_after_compiles(session.stream_reply()):
            sys.stdout.write(piece)
            sys.stdout.flush()
    sys.stdout.write("\n")
    if session.last_stats is not None and session.last_stats.context_note:
        print(session.last_stats.context_note, file=sys.stderr)
    return 0


def run_repl(session: ChatSession, console: Console | None = None) -> int:
    console = console or Console(highlight=False)
    load_model(session, console)
    console.print(BANNER.format(model=session.model_label))
    prompt_session = make_prompt_session()
    while True:
        try:
            line = prompt_session.prompt("> ")
        except KeyboardInterrupt:
            continue
        except EOFError:
            return 0
        if not line.strip():
            continue
        if line.strip() in ("/quit", "/exit"):
            return 0
        if is_slash(line):
            run_repl_slash(session, line, console)
            continue
        session.send(line)
        stream_to_console(session, console)


def run_repl_slash(session: ChatSession, line: str, console: Console) -> None:
    result = run_slash(session, line)
    console.print(result.text, style="red" if result.action == "error" else "dim", markup=False)
    if result.action == "model":
        try:
            load_model(session, console, result.arg)
            console.print(f"model: {session.model_label}", style="dim")
        except Exception as exc:  # a bad name or file must not end the chat
            console.print(f"cannot load {result.arg}: {exc}", style="red", markup=False)
    elif result.action == "reload":
        for turn in session.conversation.path():
            console.print(("> " if turn.role == "user" else "") + turn.content, markup=False)


def load_model(session: ChatSession, console: Console, model: str | None = None) -> None:
    """Loads under a spinner that also tells which kernels compile, if any do."""
    label = model or session.model_label
    with console.status(f"loading {label}...") as status:
        with CompileWatch(lambda progress: show_compile_status(console, status, label, progress)):
            session.load_model(model)


def show_compile_status(console: Console, status, label: str, progress: CompileProgress) -> None:
    if not progress.is_done:
        status.update(f"loading {label}: {progress.describe()}")
    elif progress.summary():
        console.print(progress.summary(), style="dim", markup=False)


def stream_to_console(session: ChatSession, console: Console) -> None:
    try:
        stream = ThinkingStream()
        with closing(session.stream_reply()) as pieces, report_compiles_to_stderr() as compiles:
            for piece in compiles.stream_after_compiles(pieces):
                for kind, text in stream.feed(piece):
                    print_reply_delta(console, kind, text, stream)
        console.print()
        if session.last_stats is not None and session.last_stats.context_note:
            console.print(session.last_stats.context_note, style="yellow", markup=False)
    except KeyboardInterrupt:
        console.print("\n(stopped)", style="dim")
    except Exception as exc:  # a failed reply must not end the chat
        console.print(f"\nerror: {exc}", style="red", markup=False)


def print_reply_delta(console: Console, kind: str, text: str, stream: ThinkingStream) -> None:
    """Thinking dim and italic under a `thinking:` label; the answer in green, on its own line after it."""
    if kind == "thinking" and stream.num_thinking_shown == len(text):
        console.print("thinking: ", end="", style="dim", markup=False)
    if kind == "answer" and stream.num_thinking_shown and stream.num_answer_shown == len(text):
        console.print()
    style = "dim italic" if kind == "thinking" else "green"
    console.print(text, end="", markup=False, soft_wrap=True, style=style)


def make_prompt_session():
    from prompt_toolkit import PromptSession
    from prompt_toolkit.history import FileHistory
    from prompt_toolkit.key_binding import KeyBindings

    bindings = KeyBindings()

    @bindings.add("enter")
    def _send(event):
        event.current_buffer.validate_and_handle()

    @bindings.add("c-j")
    @bindings.add("escape", "enter")
    def _newline(event):
        event.current_buffer.insert_text("\n")

    @bindings.add("c-d")
    def _quit(event):
        if event.current_buffer.text:
            event.current_buffer.delete()
        else:
            event.app.exit(exception=EOFError)

    path = history_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    return PromptSession(history=FileHistory(str(path)), multiline=True, key_bindings=bindings,
                         prompt_continuation=lambda width, line_number, soft_wrap: "." * (width - 1) + " ")
