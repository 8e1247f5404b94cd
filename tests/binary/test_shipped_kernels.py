"""The kernels shipped in the binary, without building one: their install into the user's cache dir
(build/frozen/pocket_kernel_cache.py) and the build step's tiers and sources digest (build/kernel_cache.py)."""
import importlib
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from kernels_numba.cpu_tier import best_tier, host_features, tier_named
from tests.models.tiny_gguf import write_tiny_model

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def shipped(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "build" / "frozen"))
    monkeypatch.setitem(sys.modules, "pocket_build_stamp", SimpleNamespace(KERNEL_SOURCES_DIGEST="build-1"))
    return importlib.import_module("pocket_kernel_cache")


@pytest.fixture
def kernel_cache(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "build"))
    return importlib.import_module("kernel_cache")


def use_tier(monkeypatch, name: str) -> None:
    tier = tier_named(name)
    monkeypatch.setenv("NUMBA_CPU_NAME", tier.cpu_name)
    monkeypatch.setenv("NUMBA_CPU_FEATURES", tier.features)


def make_bundle(root: Path, tiers: tuple[str, ...]) -> Path:
    for tier in tiers:
        kernels = root / "pocket_kernel_cache" / tier / "bundle" / "kernels_numba" / "cpu"
        kernels.mkdir(parents=True)
        (kernels / "norm-12.py311.nbi").write_text(f"index for {tier}")
    return root


def test_install_copies_the_cpus_tier_once_per_build(shipped, tmp_path, monkeypatch):
    bundle, cache_dir = make_bundle(tmp_path / "bundle", ("avx2", "avx512")), tmp_path / "cache"
    index = cache_dir / "bundle" / "kernels_numba" / "cpu" / "norm-12.py311.nbi"
    use_tier(monkeypatch, "avx2")
    assert shipped.install_shipped_kernels(str(bundle), str(cache_dir))
    assert index.read_text() == "index for avx2"
    assert (cache_dir / shipped.INSTALLED_NAME).read_text() == "build-1 avx2\n"
    index.write_text("index with the user's own compiles")
    assert not shipped.install_shipped_kernels(str(bundle), str(cache_dir))  # this build's copy is there
    assert index.read_text() == "index with the user's own compiles"
    use_tier(monkeypatch, "avx512")  # POCKET_CPU_TIER changed the tier
    assert shipped.install_shipped_kernels(str(bundle), str(cache_dir))
    assert index.read_text() == "index for avx512"
    monkeypatch.setitem(sys.modules, "pocket_build_stamp", SimpleNamespace(KERNEL_SOURCES_DIGEST="build-2"))
    assert shipped.install_shipped_kernels(str(bundle), str(cache_dir))  # a new binary
    assert not list(cache_dir.rglob("*.tmp"))


def test_no_shipped_cache_for_the_tier_leaves_the_cache_dir_alone(shipped, tmp_path, monkeypatch):
    bundle, cache_dir = make_bundle(tmp_path / "bundle", ("avx512",)), tmp_path / "cache"
    use_tier(monkeypatch, "generic")
    assert not shipped.install_shipped_kernels(str(bundle), str(cache_dir))
    assert not cache_dir.exists()


def test_kernel_tiers_option(kernel_cache):
    assert kernel_cache.parse_tiers("none") == ()
    assert kernel_cache.parse_tiers("amx, avx2,amx") == ("amx", "avx2")
    with pytest.raises(ValueError, match="--kernel-tiers takes 'none' or some of avx2,avxvnni,avx512,amx"):
        kernel_cache.parse_tiers("avx2,generic")


def test_sources_digest_follows_every_kernel_source(kernel_cache, tmp_path):
    kernels = tmp_path / "kernels_numba" / "cpu"
    kernels.mkdir(parents=True)
    (kernels / "norm.py").write_text("x = 1\n")
    before = kernel_cache.kernel_sources_digest(tmp_path)
    (kernels / "__pycache__").mkdir()
    (kernels / "__pycache__" / "stale.py").write_text("")
    assert kernel_cache.kernel_sources_digest(tmp_path) == before
    (kernels / "norm.py").write_text("x = 2\n")
    assert kernel_cache.kernel_sources_digest(tmp_path) != before


# a fresh `pocket generate` as the binary would run it (the bundle's cache locator at the source root), printing
# last how many kernels numba compiled
GENERATE_AS_BUNDLE = """
import os, sys
sys.path[:0] = [os.path.join(sys.argv[1], "build"), os.path.join(sys.argv[1], "build", "frozen")]
from pocket_kernel_cache import LOCATOR_CLASSES
os.environ["NUMBA_CACHE_LOCATOR_CLASSES"] = ",".join(LOCATOR_CLASSES)
from kernel_signatures import ROOT, pretend_bundle
pretend_bundle(ROOT)
from numba.core import event
recorder = event.RecordingListener()
event.register("numba:compile", recorder)
from pocketcli.cli import main
code = main(["generate", "-m", sys.argv[2], "-p", "hello world", "-n", "4", "--temperature", "0"])
print(f"compiles: {sum(1 for _, ev in recorder.buffer if ev.is_end)}")
sys.exit(code)
"""


@pytest.mark.slow
def test_tier_compiled_from_recorded_signatures_runs_without_compiling(kernel_cache, tmp_path):
    """How the build makes the tiers it cannot run, on a tiny model: record under this CPU's tier, compile avx2
    from that recording without running it; then a run under avx2 on that cache compiles nothing (~1.5 min)."""
    host_tier = best_tier(host_features()).name
    if host_tier == "generic":
        pytest.skip("the tiers are x86-64 with AVX2 at least")
    model = str(write_tiny_model(tmp_path / "tiny.gguf", "llama", seed=3, quant="Q8_0"))
    staging, generated = tmp_path / "staging", tmp_path / "generated"
    kernel_cache.write_stamp_module(generated)
    recorded = kernel_cache.signatures_path(staging, host_tier)
    staging.mkdir()
    # the recording run uses the suite's own cache (this tier's kernels for a tiny llama are there, or will be for
    # later tests): what it records is the signatures, not a cache; only the avx2 compile needs an empty one
    record_env = kernel_cache.child_env(host_tier, staging, generated)
    record_env.pop("NUMBA_CACHE_DIR")
    if "NUMBA_CACHE_DIR" in os.environ:
        record_env["NUMBA_CACHE_DIR"] = os.environ["NUMBA_CACHE_DIR"]
    subprocess.run([sys.executable, str(ROOT / "build" / "kernel_signatures.py"), "record", model, str(recorded)],
                   cwd=ROOT, env=record_env, check=True, timeout=600)
    kernel_cache.run_child("avx2", staging, generated, ["compile", model, str(recorded)])
    completed = subprocess.run([sys.executable, "-c", GENERATE_AS_BUNDLE, str(ROOT), model], capture_output=True,
                               text=True, cwd=ROOT, env=kernel_cache.child_env("avx2", staging, generated),
                               timeout=600)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert completed.stdout.splitlines()[-1] == "compiles: 0"
