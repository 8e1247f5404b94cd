"""`pocket chat --plain` through a pipe and through a pseudo-terminal (pexpect), and a kill -9 mid-reply."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pexpect

from pocketcli.chat.session import ChatSession, ChatSettings
from pocketcli.chat.store import ConversationStore

POCKET = [sys.executable, "-m", "pocketcli.cli"]
ROOT = Path(__file__).resolve().parents[2]


def saved(data_dir) -> list[dict]:
    files = sorted((data_dir / "conversations").glob("*.json"))
    return [json.loads(f.read_text()) for f in files]


def spawn_chat(tiny_model, *extra) -> pexpect.spawn:
    args = POCKET[1:] + ["chat", "--plain", "-m", tiny_model, "--temperature", "0", "-c", "2048", *extra]
    child = pexpect.spawn(sys.executable, args, cwd=str(ROOT), env=dict(os.environ, TERM="dumb"),
                          encoding="utf-8", timeout=90, dimensions=(40, 200))
    child.expect("Ctrl\\+D quits")
    child.expect("> ")
    return child


def test_pipe_prints_reply_and_exits(tiny_model, data_dir):
    result = subprocess.run(POCKET + ["chat", "-m", tiny_model, "--temperature", "0", "-n", "8"], cwd=ROOT,
                            input="Say hi", capture_output=True, text=True, timeout=180, env=dict(os.environ))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip()
    [conversation] = saved(data_dir)
    assert [t["role"] for t in conversation["turns"]] == ["user", "assistant"]
    assert conversation["turns"][0]["content"] == "Say hi"


def test_pipe_with_empty_stdin_is_a_usage_error(tiny_model, data_dir):
    result = subprocess.run(POCKET + ["chat", "-m", tiny_model], cwd=ROOT, input="", capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 2 and "no prompt" in result.stderr


def test_repl_multiline_slash_commands_and_history(tiny_model, data_dir):
    child = spawn_chat(tiny_model, "-n", "6")
    child.send("line one\nline two\r")  # \n is Ctrl+J: a new line; \r is Enter: send
    child.expect("> ")
    child.send("/temp 0.5\r")
    child.expect("temperature set to 0.5")
    child.send("/stats\r")
    child.expect("tok/s")
    child.send("/save Plain test\r")
    child.expect("saved to")
    child.expect("> ")
    child.send("/quit\r")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    [conversation] = saved(data_dir)
    assert conversation["title"] == "Plain test"
    assert conversation["turns"][0]["content"] == "line one\nline two"
    assert "line two" in (data_dir / "chat_history").read_text()


def test_default_model_answers_two_turns_in_the_repl_and_one_through_a_pipe(chat_default_model, data_dir):
    """No -m: the chat default (SmolLM2-135M-Instruct) answers, greedy, without echoing the question."""
    args = POCKET[1:] + ["chat", "--plain", "--temperature", "0", "-n", "24", "-c", "2048"]
    child = pexpect.spawn(sys.executable, args, cwd=str(ROOT), env=dict(os.environ, TERM="dumb"),
                          encoding="utf-8", timeout=120, dimensions=(40, 200))
    child.expect("Ctrl\\+D quits")
    child.expect("> ")
    for question, answer in (("What is the capital of Japan?", "Tokyo"),
                             ("And what is the capital of France?", "Paris")):
        child.send(question + "\r")
        child.expect(answer)
        child.expect("> ")
    child.send("/quit\r")
    child.expect(pexpect.EOF)
    replies = [t["content"] for t in saved(data_dir)[0]["turns"] if t["role"] == "assistant"]
    assert len(replies) == 2 and "Tokyo" in replies[0] and "Paris" in replies[1]
    assert not any("What is the capital" in reply for reply in replies)  # not an echo of the prompt
    result = subprocess.run(POCKET + ["chat", "--temperature", "0", "-n", "24"], cwd=ROOT, capture_output=True,
                            input="What is the capital of Japan?", text=True, timeout=180, env=dict(os.environ))
    assert result.returncode == 0, result.stderr
    assert "Tokyo" in result.stdout and "What is the capital" not in result.stdout


def saved_earlier_chat(tiny_model) -> ChatSession:
    earlier = ChatSession(model=tiny_model, settings=ChatSettings(temperature=0, max_tokens=4),
                          store=ConversationStore(), engine_options={"ctx_size": 512, "kv_type": "f16"})
    earlier.reply("first question")
    return earlier


def assert_only_the_unfinished_reply_is_lost(data_dir, earlier: ChatSession) -> None:
    [conversation] = saved(data_dir)  # still valid JSON
    turns = {t["id"]: t for t in conversation["turns"]}
    leaf = turns[conversation["leaf_id"]]
    assert leaf["role"] == "user" and leaf["content"] == "second question"
    previous = turns[leaf["parent_id"]]
    assert previous["role"] == "assistant" and previous["content"] == earlier.conversation.path()[-1].content
    assert turns[previous["parent_id"]]["content"] == "first question"
    assert not list((data_dir / "conversations").glob(".*.tmp"))


def test_kill_9_mid_reply_loses_only_the_unfinished_reply(tiny_model, data_dir):
    earlier = saved_earlier_chat(tiny_model)
    child = spawn_chat(tiny_model, "-n", "2000")
    child.send("/load 1\r")
    child.expect("opened first question")
    child.expect("> ")
    child.send("second question\r")
    child.expect("second question\r+\n")  # the echo; what follows is the reply, streaming
    child.read_nonblocking(size=1, timeout=90)  # the reply has started
    assert "second question" in json.dumps(saved(data_dir))  # the user turn was saved before the reply began
    os.kill(child.pid, signal.SIGKILL)
    child.close(force=True)
    assert_only_the_unfinished_reply_is_lost(data_dir, earlier)


def test_kill_9_of_the_textual_app_mid_reply(tiny_model, data_dir):
    earlier = saved_earlier_chat(tiny_model)
    args = POCKET[1:] + ["chat", "-m", tiny_model, "--temperature", "0", "-c", "2048", "-n", "2000"]
    child = pexpect.spawn(sys.executable, args, cwd=str(ROOT), env=dict(os.environ, TERM="xterm-256color"),
                          encoding="utf-8", timeout=120, dimensions=(30, 100))
    child.expect("Regenerate")  # the footer: the app is up
    child.send("/load 1\r")
    child.send("second question\r")
    deadline = time.monotonic() + 120
    while "second question" not in json.dumps(saved(data_dir)):  # saved as soon as it is sent
        assert time.monotonic() < deadline and child.isalive()
        time.sleep(0.02)
    time.sleep(0.3)  # the reply is streaming now (2000 tokens take seconds)
    os.kill(child.pid, signal.SIGKILL)
    child.close(force=True)
    assert_only_the_unfinished_reply_is_lost(data_dir, earlier)


def test_stop_flag_ends_the_reply_in_the_repl(chat_default_model, data_dir):
    """`pocket chat --stop` (a flag made from SamplingParams.stop, as generate's): SmolLM2-135M-Instruct answers
    "Tokyo", greedy; with --stop Tokyo the reply ends just before it."""
    args = POCKET[1:] + ["chat", "--plain", "--temperature", "0", "-n", "24", "-c", "2048", "--stop", "Tokyo"]
    child = pexpect.spawn(sys.executable, args, cwd=str(ROOT), env=dict(os.environ, TERM="dumb"),
                          encoding="utf-8", timeout=120, dimensions=(40, 200))
    child.expect("Ctrl\\+D quits")
    child.expect("> ")
    child.send("What is the capital of Japan?\r")
    child.expect("> ")
    child.send("/quit\r")
    child.expect(pexpect.EOF)
    [reply] = [t for t in saved(data_dir)[0]["turns"] if t["role"] == "assistant"]
    assert reply["content"].strip() and "Tokyo" not in reply["content"]
    assert reply["finish_reason"] == "stop"
