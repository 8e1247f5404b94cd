"""A reasoning model's `<think>` section: split from the answer (hand-made replies, tags cut across chunks),
and shown collapsed in the reply view, live while the reply streams in."""
import pytest
from textual.app import App
from textual.widgets import Static

from pocketcli.chat.conversation import Turn
from pocketcli.chat.thinking import ThinkingSplit, ThinkingStream, split_thinking
from tui.widgets.message_view import MessageView


@pytest.mark.parametrize("text, streaming, expected", [
    ("plain answer", False, ThinkingSplit(None, "plain answer")),
    ("<think>\nstep 1\nstep 2\n</think>\n\nThe answer", False, ThinkingSplit("step 1\nstep 2", "The answer")),
    ("<think>still going", True, ThinkingSplit("still going", "", is_thinking=True)),
    ("prefilled by the template</think>answer", False, ThinkingSplit("prefilled by the template", "answer")),
    ("<thi", True, ThinkingSplit(None, "")),  # may still become the tag: held back
    ("<thi", False, ThinkingSplit(None, "<thi")),
    ("<b>bold</b>", True, ThinkingSplit(None, "<b>bold</b>")),
    ("<think></think>Hi", False, ThinkingSplit("", "Hi")),
])
def test_split_thinking(text, streaming, expected):
    assert split_thinking(text, streaming=streaming) == expected


class OneReply(App):
    def __init__(self, view: MessageView):
        super().__init__()
        self.view = view

    def compose(self):
        yield self.view


async def test_thinking_streams_into_a_collapsed_section():
    view = MessageView(None, "assistant")
    async with OneReply(view).run_test(size=(80, 20)) as pilot:
        view.start_stream()
        section = view.thinking
        assert not section.display
        await view.append("<thi")
        await view.append("nk>Let me see")
        await pilot.pause()
        assert section.display and section.collapsed and section.title == "Thinking… (3 words)"
        assert view.markdown.source == ""  # nothing of the thinking leaks into the answer
        await view.append(" about that.</think>\n\nThe **answer**")
        await view.append(" is 4.")
        await view.end_stream()
        await pilot.pause()
        assert section.title == "Thought for 5 words" and section.collapsed
        assert section.query_one(".thinking-text", Static).content == "Let me see about that."
        assert view.markdown.source == "The **answer** is 4."
        view.focus()
        await pilot.press("t")
        assert not section.collapsed


async def test_saved_reply_with_thinking_and_user_text_with_tags():
    reply = MessageView(Turn("a1", "assistant", "<think>hmm</think>Yes."), "assistant")
    user = MessageView(Turn("u1", "user", "what does <think>x</think> mean?"), "user")

    class Two(App):
        def compose(self):
            yield user
            yield reply

    async with Two().run_test(size=(80, 20)):
        assert reply.thinking.display and reply.markdown.source == "Yes."
        assert not user.thinking.display and "<think>" in user.markdown.source


@pytest.mark.parametrize("reply", ["<think>plan: a, then b</think>The answer is 4.",
                                   "  <think>\nx < y </thi and more</think>\n\nDone </think",
                                   "no thinking at all </th"])
def test_thinking_stream_shows_each_character_once_in_any_chunking(reply):
    """The plain REPL's deltas, fed one character or three at a time, add up to split_thinking's final parts."""
    final = split_thinking(reply)
    for size in (1, 3, len(reply)):
        stream, shown = ThinkingStream(), {"thinking": "", "answer": ""}
        for start in range(0, len(reply), size):
            for kind, text in stream.feed(reply[start:start + size]):
                shown[kind] += text
        assert shown["thinking"] == (final.thinking or "")
        assert shown["answer"] == final.answer


def test_thinking_stream_keeps_text_already_shown_as_answer():
    """A reply that starts inside the section (the template wrote `<think>`) looks like an answer until
    `</think>` arrives: what was shown stays shown, nothing twice, nothing lost."""
    reply = "already thinking</think>answer"
    stream, shown = ThinkingStream(), {"thinking": "", "answer": ""}
    for char in reply:
        for kind, text in stream.feed(char):
            shown[kind] += text
    assert shown == {"thinking": "", "answer": reply}
