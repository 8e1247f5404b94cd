"""A real uvicorn server on a free loopback port, serving the default model, shared by the server tests."""
import http.client
import json
import socket
import threading
import time

import pytest
import uvicorn

from pocketcli.config import EngineConfig
from pocketcli.engine.engine_loop import EngineLoop
from pocketcli.engine.llm_engine import LLMEngine
from pocketcli.registry import load_registry, resolve_model
from pocketcli.server import make_app

CTX_SIZE = 256
MAX_NUM_SEQS = 8


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class LiveServer:
    def __init__(self, app, port: int):
        self.app = app
        self.base_url = f"http://127.0.0.1:{port}"
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def start(self) -> "LiveServer":
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.02)
        return self

    def request(self, method: str, path: str, body: bytes | str | dict | None = None, headers: dict | None = None):
        """(status, parsed JSON or text): raw HTTP, so tests can send bodies no client library would."""
        if isinstance(body, dict):
            body = json.dumps(body)
        conn = http.client.HTTPConnection(self.base_url.removeprefix("http://"), timeout=120)
        try:
            conn.request(method, path, body=body, headers={"Content-Type": "application/json", **(headers or {})})
            response = conn.getresponse()
            raw = response.read().decode()
        finally:
            conn.close()
        try:
            return response.status, json.loads(raw)
        except ValueError:
            return response.status, raw

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture(scope="session")
def model_name() -> str:
    return load_registry().default


@pytest.fixture(scope="session")
def engine_loop():
    config = EngineConfig(resolve_model(None), ctx_size=CTX_SIZE, max_num_seqs=MAX_NUM_SEQS)
    loop = EngineLoop(LLMEngine(config)).start()
    yield loop
    loop.stop()


@pytest.fixture(scope="session")
def live_server(engine_loop, model_name):
    server = LiveServer(make_app(engine_loop, model_name), free_port()).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def client(live_server):
    import openai

    return openai.OpenAI(base_url=live_server.base_url + "/v1", api_key="unused", max_retries=0, timeout=300)


@pytest.fixture(scope="session")
def reasoning_client(engine_loop, model_name):
    """A second app on the same engine with `--reasoning-parser think` (the default model's template has none)."""
    import openai

    server = LiveServer(make_app(engine_loop, model_name, reasoning_parser="think"), free_port()).start()
    yield openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0, timeout=300)
    server.stop()
