"""Slash commands typed in the chat input, shared by the plain REPL and the Textual app."""
from __future__ import annotations

from dataclasses import dataclass

from .session import ChatSession

HELP = """\
/system [TEXT]   show or set the system prompt
/temp [T]        show or set the temperature
/model [NAME]    switch to a registry name or GGUF path (no name: list them; the app opens a picker)
/clear           start a new chat (the current one stays saved)
/save [TITLE]    save the chat, optionally renaming it
/load [N|ID]     list saved chats, or open one by number, id or title
/export [PATH]   write the chat as Markdown
/delete          delete the current chat
/stats           numbers of the last reply
/help            this list
/quit            leave (or Ctrl+D / Ctrl+Q)"""


@dataclass
class SlashResult:
    text: str = ""
    # "" | "reload" (conversation replaced) | "model" (load `arg`) | "pick_model" (the app opens its picker) | "error"
    action: str = ""
    arg: str = ""


def is_slash(line: str) -> bool:
    return line.startswith("/") and not line.startswith("//")


def run_slash(session: ChatSession, line: str) -> SlashResult:
    name, _, arg = line[1:].strip().partition(" ")
    handler = COMMANDS.get(name.lower())
    if handler is None:
        return SlashResult(f"unknown command /{name} (try /help)", "error")
    try:
        return handler(session, arg.strip())
    except (KeyError, ValueError, OSError) as exc:
        return SlashResult(f"/{name}: {exc.args[0] if exc.args else exc}", "error")


def _system(session: ChatSession, arg: str) -> SlashResult:
    if not arg:
        return SlashResult(f"system prompt: {session.conversation.system or '(none)'}")
    session.set_system(arg)
    return SlashResult("system prompt set")


def _temp(session: ChatSession, arg: str) -> SlashResult:
    if not arg:
        return SlashResult(f"temperature: {session.settings.temperature}")
    session.settings = session.settings.updated(temperature=float(arg))
    return SlashResult(f"temperature set to {session.settings.temperature}")


def _model(session: ChatSession, arg: str) -> SlashResult:
    if not arg:
        from ..registry import load_registry

        names = ", ".join(sorted(load_registry().models)) or "none"
        return SlashResult(f"model: {session.model_label} (registry: {names}; or give a GGUF path)", "pick_model")
    return SlashResult(f"loading {arg}...", "model", arg)


def _clear(session: ChatSession, arg: str) -> SlashResult:
    session.new_conversation()
    return SlashResult("new chat", "reload")


def _save(session: ChatSession, arg: str) -> SlashResult:
    path = session.save(title=arg or None) or session.store.save(session.conversation)
    return SlashResult(f"saved to {path}")


def _load(session: ChatSession, arg: str) -> SlashResult:
    if not arg:
        rows = [f"{i:>3}. {c.title or '(untitled)'}  [{c.id}]" for i, c in enumerate(session.store.list(), 1)]
        return SlashResult("\n".join(rows) or "no saved chats")
    conversation = session.open(arg)
    return SlashResult(f"opened {conversation.title or conversation.id}", "reload")


def _export(session: ChatSession, arg: str) -> SlashResult:
    return SlashResult(f"exported to {session.export_markdown(arg or None)}")


def _delete(session: ChatSession, arg: str) -> SlashResult:
    session.delete_conversation()
    return SlashResult("chat deleted", "reload")


def _stats(session: ChatSession, arg: str) -> SlashResult:
    return SlashResult(format_stats(session))


def _help(session: ChatSession, arg: str) -> SlashResult:
    return SlashResult(HELP)


def format_stats(session: ChatSession) -> str:
    stats = session.last_stats
    context = f"context {session.context_used}/{session.context_size}"
    if stats is None:
        return f"model {session.model_label} on {session.device} | {context} | no reply yet"
    return (f"model {session.model_label} on {session.device} | prompt {stats.prompt_tokens} tok | "
            f"reply {stats.completion_tokens} tok, {stats.decode_tokens_per_second:.1f} tok/s | "
            f"finish: {stats.finish_reason} | {context}"
            + (f" | speculative: {stats.spec_acceptance:.0%} of drafts accepted" if stats.spec_acceptance is not None
               else ""))


COMMANDS = {"system": _system, "temp": _temp, "temperature": _temp, "model": _model, "clear": _clear,
            "new": _clear, "save": _save, "load": _load, "export": _export, "delete": _delete,
            "stats": _stats, "help": _help}
