"""--device: auto falls back to the CPU without a GPU; cuda without one is one clear line and exit code 2."""
import pytest

from pocketcli import device
from pocketcli.cli import main
from tests.models.tiny_gguf import write_tiny_model


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.delenv("NUMBA_ENABLE_CUDASIM", raising=False)
    monkeypatch.setattr(device, "has_nvidia_driver", lambda: False)


def test_auto_and_cpu_resolve_to_the_cpu_without_a_gpu(no_gpu):
    assert device.resolve_device("auto") == "cpu"
    assert device.resolve_device("cpu") == "cpu"
    assert device.backend_for("cpu", "reference") == "reference"
    assert device.backend_for("cuda", "cpu") == "cuda"


def test_cuda_without_a_gpu_is_a_user_error(no_gpu, tmp_path, capsys):
    with pytest.raises(device.DeviceUnavailableError, match="--device cuda: no NVIDIA driver found"):
        device.resolve_device("cuda")
    model = write_tiny_model(tmp_path / "tiny.gguf", "llama")
    code = main(["generate", "-m", str(model), "-p", "hi", "-n", "2", "--device", "cuda"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip().splitlines() == ["error: --device cuda: no NVIDIA driver found"], err
