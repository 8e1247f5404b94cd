"""The model picker: registry entries and model files found in the models dir, opened by Ctrl+T and by `/model`
with no name; picking one loads it (status bar follows), a model that cannot load is a toast."""
from pocketcli.registry import model_choices
from tests.tui.pilot import SIZE, build, ready, send, views
from tui.screens.model_picker_screen import ModelPickerScreen


def test_choices_list_registry_then_local_files(models_dir):
    choices = {c.label: c for c in model_choices()}
    assert list(choices) == ["gemma3-270m", "remote", "smollm2-135m-instruct", "other-tiny.gguf", "some-hf-model"]
    assert choices["gemma3-270m"].installed and "default" not in choices["gemma3-270m"].detail
    assert "default" in choices["smollm2-135m-instruct"].detail  # the chat default, installed or not
    assert not choices["remote"].installed and "pocket pull" in choices["remote"].detail
    assert choices["other-tiny.gguf"].reference == str(models_dir / "local" / "other-tiny.gguf")
    assert choices["some-hf-model"].detail.startswith("Hugging Face dir")


async def pick(app, pilot, label: str) -> None:
    picker = app.screen
    assert isinstance(picker, ModelPickerScreen)
    picker.query_one("#models").highlighted = [c.label for c in picker.choices].index(label)
    await pilot.press("enter")
    await pilot.pause()


async def test_picker_switches_model_and_shows_load_errors(tiny_model, models_dir):
    app = build(tiny_model)
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(app, pilot)
        await pilot.press("ctrl+t")
        await pilot.pause()
        await pick(app, pilot, "other-tiny.gguf")
        await ready(app, pilot)
        assert "other-tiny.gguf" in str(screen.query_one("#status").render())
        await send(screen, pilot, "hello")
        assert views(screen)[-1][0] == "assistant"
        await send(screen, pilot, "/model")  # no name: the picker again
        assert isinstance(app.screen, ModelPickerScreen)
        await pick(app, pilot, "remote")
        await ready(app, pilot)
        assert any(sev == "error" and "pocket pull remote" in m for sev, m in app.notified)
        assert "other-tiny.gguf" in str(screen.query_one("#status").render())
        await pilot.press("ctrl+t", "escape")
        assert app.screen is screen and not screen.model_loading
        screen.switch_model(tiny_model)  # what a pick does: the progress bar shows until the model is loaded
        assert screen.query_one("#loading").display and "loading model" in str(screen.query_one("#status").render())
        await ready(app, pilot)
        assert not screen.query_one("#loading").display
        assert ("information", "model tiny-llama.gguf loaded") in app.notified
