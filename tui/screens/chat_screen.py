"""The main screen: saved chats on the left, the conversation, the prompt box and a status bar."""
from __future__ import annotations

import time

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, ProgressBar, Static

from pocketcli.chat.session import ChatSession
from pocketcli.chat.slash import is_slash, run_slash

from ..engine_client import EngineClient
from ..messages import (KernelsCompiling, ModelFailed, ModelLoaded, ModelLoading, ReplyChunk, ReplyFailed,
                        ReplyFinished)
from ..widgets.chat_input import ChatInput
from ..widgets.conversation_list import ConversationList
from ..widgets.message_view import MessageView

DELETE_CONFIRM_S = 3.0


class ChatScreen(Screen):
    BINDINGS = [
        Binding("escape", "stop", "Stop"),
        Binding("ctrl+r", "regenerate", "Regenerate"),
        Binding("ctrl+n", "new_chat", "New chat"),
        Binding("ctrl+l", "delete_chat", "Delete chat"),
        Binding("ctrl+s", "settings", "Settings"),
        Binding("ctrl+t", "pick_model", "Model"),
        Binding("ctrl+o", "export", "Export"),
        Binding("ctrl+b", "toggle_sidebar", "Chats"),
        Binding("ctrl+f", "search", "Search", show=False),
    ]

    def __init__(self, session: ChatSession, engine: EngineClient):
        super().__init__()
        self.session = session
        self.engine = engine
        self.generating = False
        self.model_loading = True
        self.announce_model = False
        self.compile_note = ""  # which kernel numba compiles, while it does
        self.editing_turn_id: str | None = None
        self.reply_view: MessageView | None = None
        self.reply_streaming = False  # the reply view is mounted and takes text
        self._unstreamed: list[str] = []
        self._delete_armed_at = 0.0

    def compose(self) -> ComposeResult:
        with Horizontal():
            yield ConversationList(self.session.store, id="sidebar")
            with Vertical(id="main"):
                yield VerticalScroll(id="messages")
                yield ProgressBar(total=None, show_eta=False, show_percentage=False, id="loading")
                yield ChatInput(id="prompt")
                yield Static(id="status")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#messages", VerticalScroll).anchor()
        self.query_one("#prompt", ChatInput).focus()
        self.render_conversation()

    # --- the view --------------------------------------------------------------------------------------
    def render_conversation(self) -> None:
        messages = self.query_one("#messages", VerticalScroll)
        messages.remove_children()
        conversation = self.session.conversation
        messages.mount_all(MessageView(turn, turn.role, conversation.branch_position(turn.id))
                           for turn in conversation.path())
        self.update_status()

    def update_status(self, note: str = "") -> None:
        session = self.session
        stats = session.last_stats
        speed = f"{stats.decode_tokens_per_second:.1f} tok/s" if stats else "– tok/s"
        spec = f"spec {stats.spec_acceptance:.0%} accepted" if stats and stats.spec_acceptance is not None else ""
        parts = [session.model_label, session.device, speed,
                 f"ctx {session.context_used}/{session.context_size}", spec, self.state_text() or note]
        self.query_one("#status", Static).update(" │ ".join(p for p in parts if p))
        self.query_one("#loading", ProgressBar).display = self.model_loading

    def state_text(self) -> str:
        if self.compile_note:  # the reason a load or a first reply takes minutes on a cold cache
            return self.compile_note
        return ("loading model…" if self.model_loading else "generating… (Esc stops)" if self.generating
                else "editing a turn (Esc cancels)" if self.editing_turn_id else "")

    def refresh_sidebar(self) -> None:
        self.run_worker(self.query_one(ConversationList).refresh_list(self.session.conversation.id),
                        group="sidebar", exclusive=True)

    # --- engine events ---------------------------------------------------------------------------------
    def on_model_loading(self, message: ModelLoading) -> None:
        self.model_loading = True
        self.update_status()

    def on_model_loaded(self, message: ModelLoaded) -> None:
        self.model_loading = False
        if self.announce_model:  # the first model needs no toast: the status bar names it
            self.notify(f"model {message.model} loaded", title="Model", timeout=3)
        self.update_status()

    def on_model_failed(self, message: ModelFailed) -> None:
        self.model_loading = False
        self.notify(message.error, title="Model", severity="error", timeout=8)
        self.update_status()

    def on_kernels_compiling(self, message: KernelsCompiling) -> None:
        progress = message.progress
        self.compile_note = "" if progress.is_done else progress.describe()
        if progress.is_done and progress.summary():
            self.notify(progress.summary(), title="Kernels", timeout=6)
        self.update_status()

    async def on_reply_chunk(self, message: ReplyChunk) -> None:
        if self.reply_view is None or not self.reply_streaming:
            self._unstreamed.append(message.text)  # the reply view is not mounted yet
        else:
            await self.reply_view.append(message.text)

    async def on_reply_finished(self, message: ReplyFinished) -> None:
        if message.stats is not None and message.stats.context_note:
            self.notify(message.stats.context_note, title="Context", severity="warning", timeout=8)
        await self._end_reply()

    async def on_reply_failed(self, message: ReplyFailed) -> None:
        self.notify(message.error, title="Generation failed", severity="error", timeout=8)
        await self._end_reply()

    async def _end_reply(self) -> None:
        if self.reply_view is not None:
            await self.reply_view.end_stream()
        self.reply_view, self.reply_streaming, self.generating = None, False, False
        self.render_conversation()
        self.refresh_sidebar()

    # --- input -----------------------------------------------------------------------------------------
    @on(ChatInput.Submitted)
    def submit(self, event: ChatInput.Submitted) -> None:
        if is_slash(event.text):
            self.run_command(event.text)
        elif self.generating:
            self.notify("wait for the reply to finish, or press Esc to stop it", severity="warning")
        elif self.editing_turn_id:
            turn_id, self.editing_turn_id = self.editing_turn_id, None
            self.session.edit(turn_id, event.text)
            self.start_reply()
        else:
            self.session.send(event.text)
            self.start_reply()

    def start_reply(self) -> None:
        self.generating = True
        self.render_conversation()
        self.reply_view, self.reply_streaming, self._unstreamed = MessageView(None, "assistant"), False, []
        self.query_one("#messages", VerticalScroll).mount(self.reply_view)
        self.reply_view.call_after_refresh(self._open_stream, self.reply_view)
        self.refresh_sidebar()
        self.engine.generate()
        self.update_status()

    async def _open_stream(self, view: MessageView) -> None:
        if view is self.reply_view and not self.reply_streaming:
            view.start_stream()
            self.reply_streaming = True
            text, self._unstreamed = "".join(self._unstreamed), []
            await view.append(text)

    def run_command(self, line: str) -> None:
        if line.strip() in ("/quit", "/exit"):
            self.app.exit()
            return
        if self.generating and not line.startswith(("/stats", "/help", "/temp", "/system")):
            self.notify("stop the reply first (Esc)", severity="warning")
            return
        result = run_slash(self.session, line)
        if result.action == "pick_model":
            self.action_pick_model()
            return
        if result.action == "model":
            self.switch_model(result.arg)
        elif result.action == "reload":
            self.editing_turn_id = None
            self.render_conversation()
            self.refresh_sidebar()
        self.notify(result.text, severity="error" if result.action == "error" else "information",
                    timeout=8 if "\n" in result.text else 4)
        self.update_status()

    @on(MessageView.EditRequested)
    def edit_turn(self, event: MessageView.EditRequested) -> None:
        if self.generating:
            return
        self.editing_turn_id = event.turn_id
        prompt = self.query_one("#prompt", ChatInput)
        prompt.load_text(self.session.conversation.turns[event.turn_id].content)
        prompt.move_cursor(prompt.document.end)
        prompt.focus()
        self.update_status()

    @on(MessageView.BranchRequested)
    def switch_branch(self, event: MessageView.BranchRequested) -> None:
        if self.generating:
            return
        chosen = self.session.switch_branch(event.turn_id, event.offset)
        self.render_conversation()
        self.call_after_refresh(self._focus_turn, chosen.id)

    def _focus_turn(self, turn_id: str) -> None:
        for view in self.query(MessageView):
            if view.turn and view.turn.id == turn_id:
                view.focus()

    @on(ConversationList.Opened)
    def open_conversation(self, event: ConversationList.Opened) -> None:
        if self.generating:
            self.notify("stop the reply first (Esc)", severity="warning")
            return
        self.session.open(event.conversation_id)
        self.editing_turn_id = None
        self.render_conversation()

    # --- actions ---------------------------------------------------------------------------------------
    def action_stop(self) -> None:
        if self.generating:
            self.engine.stop()
        elif self.editing_turn_id:
            self.editing_turn_id = None
            self.query_one("#prompt", ChatInput).clear()
            self.update_status()

    def action_regenerate(self) -> None:
        if self.generating:
            return
        try:
            self.session.prepare_regenerate()
        except ValueError as exc:
            self.notify(str(exc), severity="warning")
            return
        self.start_reply()

    def action_new_chat(self) -> None:
        if not self.generating:
            self.run_command("/clear")

    def action_delete_chat(self) -> None:
        if self.generating:
            return
        now = time.monotonic()
        if now - self._delete_armed_at > DELETE_CONFIRM_S:
            self._delete_armed_at = now
            self.notify("press Ctrl+L again to delete this chat", severity="warning")
            return
        self._delete_armed_at = 0.0
        self.run_command("/delete")

    def action_export(self) -> None:
        self.run_command("/export")

    def action_toggle_sidebar(self) -> None:
        sidebar = self.query_one("#sidebar")
        sidebar.display = not sidebar.display

    def action_search(self) -> None:
        sidebar = self.query_one("#sidebar")
        sidebar.display = True
        sidebar.query_one("#search").focus()

    def action_pick_model(self) -> None:
        if self.generating or self.model_loading:
            self.notify("wait for the model or the reply first", severity="warning")
            return
        from pocketcli.registry import model_choices

        from .model_picker_screen import ModelPickerScreen

        try:
            choices = model_choices()
        except Exception as exc:  # a broken user models.toml is a toast, not a crash
            self.notify(str(exc), title="Model", severity="error", timeout=8)
            return
        self.app.push_screen(ModelPickerScreen(choices, self.session.model_label), self._load_chosen)

    def _load_chosen(self, reference: str | None) -> None:
        if reference:
            self.switch_model(reference)

    def switch_model(self, reference: str) -> None:
        self.model_loading, self.announce_model = True, True
        self.update_status()
        self.engine.load_model(reference)

    def action_settings(self) -> None:
        from .settings_screen import SettingsScreen

        self.app.push_screen(SettingsScreen(self.session.settings), self._apply_settings)

    def _apply_settings(self, settings) -> None:
        if settings is None:
            return
        self.session.settings = settings
        if settings.system != self.session.conversation.system:
            self.session.set_system(settings.system)
        self.notify("settings apply to the next reply")
        self.update_status()
