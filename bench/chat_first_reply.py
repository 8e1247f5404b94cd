"""`pocket chat --plain` as a person uses it: in a terminal (a pty), wait for the prompt, type a question, press
Enter, and time the reply's first word and the word the answer needs (issue 28: first reply within 2 s of Enter).

    python bench/chat_first_reply.py [-m MODEL] [--question TEXT] [--expect WORD] [-r ROUNDS]

prompt_toolkit asks the terminal for the cursor position and waits for the answer, which a real terminal sends at
once and this pty never does; PROMPT_TOOLKIT_NO_CPR=1 stands in for that answer.
"""
from __future__ import annotations

import argparse
import os
import pty
import re
import select
import subprocess
import time

ESCAPES = re.compile(rb"\x1b\[[0-9;?]*[a-zA-Z]|\x08")  # CSI sequences and backspaces


class Terminal:
    def __init__(self, command: list[str]):
        env = {**os.environ, "TERM": "xterm", "PROMPT_TOOLKIT_NO_CPR": "1"}
        self.master, slave = pty.openpty()
        self.process = subprocess.Popen(command, stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True)
        os.close(slave)
        self.screen = b""

    def text(self, start: int = 0) -> bytes:
        return ESCAPES.sub(b"", self.screen[start:])

    def wait_for(self, found, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if select.select([self.master], [], [], 0.01)[0]:
                try:
                    self.screen += os.read(self.master, 65536)
                except OSError:
                    return False
                if found():
                    return True
        return False

    def type(self, text: str) -> None:
        os.write(self.master, text.encode())

    def close(self) -> None:
        self.type("/exit\r")
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()


def one_round(args) -> tuple[float, float, float]:
    started = time.perf_counter()
    terminal = Terminal(["pocket", "chat", "--plain", "-n", "32"] + (["-m", args.model] if args.model else []))
    try:
        if not terminal.wait_for(lambda: terminal.text().rstrip().endswith(b">"), args.timeout):
            raise SystemExit(f"no prompt within {args.timeout} s:\n{terminal.text().decode(errors='replace')}")
        ready_s = time.perf_counter() - started
        terminal.wait_for(lambda: False, 0.3)  # the prompt settles
        mark = len(terminal.screen)
        entered = time.perf_counter()
        terminal.type(args.question + "\r")
        reply = lambda: terminal.text(mark).split(args.question.encode())[-1]  # after the echoed question
        terminal.wait_for(lambda: re.search(rb"\w", reply()) is not None, args.timeout)
        first_word_s = time.perf_counter() - entered
        terminal.wait_for(lambda: args.expect.encode() in reply(), args.timeout)
        expected_s = time.perf_counter() - entered
        return ready_s, first_word_s, expected_s
    finally:
        terminal.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-m", "--model", default=None, help="default: pocket chat's default model")
    ap.add_argument("--question", default="What is the capital of Japan?")
    ap.add_argument("--expect", default="Tokyo", help="a word of the answer to time")
    ap.add_argument("-r", "--rounds", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=120.0)
    args = ap.parse_args()
    for index in range(args.rounds):
        ready_s, first_word_s, expected_s = one_round(args)
        print(f"round {index + 1}: prompt after {ready_s:.2f} s; first reply word {first_word_s:.2f} s after Enter, "
              f"'{args.expect}' {expected_s:.2f} s")


if __name__ == "__main__":
    main()
