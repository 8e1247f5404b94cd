"""Many concurrent streaming clients, some vanishing mid-stream: the engine ends with nothing running and every
KV block free."""
import http.client
import json
import re
import threading
import time

NUM_CLIENTS = 16
NUM_DISCONNECTING = NUM_CLIENTS // 4


def metric(live_server, name: str, labels: str = "") -> float:
    status, text = live_server.request("GET", "/metrics")
    assert status == 200
    match = re.search(rf"^{re.escape(name + labels)} (\S+)$", text, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


def wait_until_idle(live_server, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (metric(live_server, "pocket_num_requests_running") == 0
                and metric(live_server, "pocket_num_requests_waiting") == 0
                and metric(live_server, "pocket_kv_blocks_used") == 0):
            return
        time.sleep(0.1)
    raise AssertionError("the engine did not become idle")


def stream_then_disconnect(live_server, body: dict) -> str:
    """Open a streaming request, read until the first content event, then drop the connection."""
    conn = http.client.HTTPConnection(live_server.base_url.removeprefix("http://"), timeout=120)
    conn.request("POST", "/v1/chat/completions", body=json.dumps({**body, "stream": True}),
                 headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    assert response.status == 200
    while True:
        line = response.fp.readline().decode()
        if line.startswith("data: ") and '"content":"' in line and '"content":""' not in line:
            break
        assert line, "stream ended before any content"
    conn.sock.close()
    conn.close()
    return line


def chat_body(index: int, max_tokens: int) -> dict:
    return {"messages": [{"role": "user", "content": f"Count from {index} to {index + 20}."}],
            "max_tokens": max_tokens, "temperature": 0.7, "seed": index, "ignore_eos": True}


def test_disconnect_mid_stream_aborts_and_frees_blocks(live_server):
    aborted_before = metric(live_server, "pocket_request_finished_total", '{finish_reason="abort"}')
    stream_then_disconnect(live_server, chat_body(0, 200))
    wait_until_idle(live_server, timeout=10)
    assert metric(live_server, "pocket_request_finished_total", '{finish_reason="abort"}') == aborted_before + 1


def test_soak_concurrent_streams_with_disconnects(live_server, client, model_name):
    results, errors = {}, []

    def normal(index):
        try:
            body = chat_body(index, 5)
            stream = client.chat.completions.create(model=model_name, stream=True, messages=body["messages"],
                                                    max_tokens=5, temperature=0.7, seed=index,
                                                    extra_body={"ignore_eos": True})
            results[index] = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        except Exception as exc:  # surfaced below
            errors.append(exc)

    def vanishing(index):
        try:
            stream_then_disconnect(live_server, chat_body(index, 100))
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=vanishing if i % 4 == 0 else normal, args=(i,)) for i in range(NUM_CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors[:3]
    assert len(results) == NUM_CLIENTS - NUM_DISCONNECTING and all(results.values())
    wait_until_idle(live_server)
    assert metric(live_server, "pocket_kv_blocks_free") == live_server.app.state.server.engine_loop.stats().num_blocks
