"""Helpers the Pilot tests share: build the app on a model, wait for the model and for replies, read the view."""
from pocketcli.chat.session import ChatSettings
from tui import make_app
from tui.screens.chat_screen import ChatScreen
from tui.widgets.chat_input import ChatInput
from tui.widgets.message_view import MessageView

SIZE = (100, 32)


def build(tiny_model, **settings):
    settings = {"temperature": 0.0, "max_tokens": 24, **settings}
    app = make_app(model=tiny_model, settings=ChatSettings(**settings),
                   engine_options={"ctx_size": 2048, "kv_type": "f16"})
    record_notifications(app)
    return app


def record_notifications(app) -> None:
    """Every toast the app shows lands in `app.notified` as (severity, message), kept after its timeout: on a
    loaded machine a 3 s toast can expire before the test reads `app._notifications`."""
    app.notified = []
    show = app.notify

    def notify(message, *args, **kwargs):
        app.notified.append((kwargs.get("severity", "information"), str(message)))
        return show(message, *args, **kwargs)

    app.notify = notify


async def ready(app, pilot) -> ChatScreen:
    while not isinstance(app.screen, ChatScreen) or app.screen.model_loading:
        await pilot.pause(0.02)
    return app.screen


async def idle(screen, pilot) -> None:
    await pilot.pause(0.02)
    while screen.generating:
        await pilot.pause(0.02)
    await pilot.pause()


async def send(screen, pilot, text: str, typed: bool = False) -> None:
    prompt = screen.query_one(ChatInput)
    prompt.focus()
    if typed:
        await pilot.press(*text)
    else:
        prompt.load_text(text)
    await pilot.press("enter")
    await idle(screen, pilot)


def views(screen) -> list[tuple[str, str]]:
    return [(v.role, v.turn.content) for v in screen.query(MessageView)]


def headers(screen) -> list[str]:
    return [v.header() for v in screen.query(MessageView)]
