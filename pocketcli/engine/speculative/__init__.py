"""Speculative decoding: drafters propose tokens, the SpeculativeDecoder verifies them in one target forward."""
from __future__ import annotations

from ...models.dflash import DFlashCheckpointError, DFlashModel, load_dflash_checkpoint
from .dflash_drafter import DFlashDrafter
from .dflash_gguf import is_dflash_gguf, load_dflash_gguf
from .draft_model_drafter import DraftModelDrafter, VocabularyMismatchError, check_same_vocabulary
from .drafter import Draft, Drafter
from .ngram_drafter import NgramDrafter
from .spec_stats import SpecStats
from .speculative_decoder import SpeculativeDecoder


class SpeculationUnavailableError(ValueError):
    """The requested speculative-decoding method cannot run with this model."""


MTP_TENSOR_MARKERS = (".nextn.", "mtp.", "mtp_layers.")


def make_speculative_decoder(engine, draft_engine=None) -> SpeculativeDecoder:
    """The engine step's speculative stage; a drafter may read the engine's parts while it is built (the
    target model, its KV layout), the stage itself keeps only the block manager and the limits. draft_engine:
    the draft model's engine for --spec draft, built by the engine factory (EngineConfig.draft_config)."""
    config = engine.config
    return SpeculativeDecoder(make_drafter(engine, config.spec, draft_engine), config.spec_k, engine.block_manager,
                              engine.max_model_len, engine.scheduler.config.max_num_batched_tokens)


def make_drafter(engine, method: str, draft_engine=None) -> Drafter:
    if method == "ngram":
        return NgramDrafter()
    if method == "draft":
        return make_draft_model_drafter(engine, draft_engine)
    if method == "mtp":
        return make_mtp_drafter(engine)
    if method == "dflash":
        return make_dflash_drafter(engine)
    raise SpeculationUnavailableError(f"unknown speculative method {method!r}")


def make_mtp_drafter(engine) -> Drafter:
    """The model's own MTP block (architectures that load one expose `mtp_layers` and `mtp_forward`)."""
    if not getattr(engine.model, "mtp_layers", None):
        raise SpeculationUnavailableError(mtp_unavailable_reason(engine))
    on_device = engine.model.ops.is_device_array(engine.kv_cache.keys[0])  # where the target computes
    if on_device and not getattr(engine.model, "mtp_on_device", False):
        raise SpeculationUnavailableError(f"--spec mtp for {engine.hparams.arch} runs on the cpu backend only "
                                          f"(its MTP step is not ported to {engine.config.backend}; use --device cpu)")
    from .mtp_drafter import MTPDrafter

    engine.block_manager.enable_prefix_caching = False  # the MTP needs the target hidden state of every position
    return MTPDrafter(engine)


def mtp_unavailable_reason(engine) -> str:
    names = engine.model_file.tensor_infos.keys()
    if any(marker in name for name in names for marker in MTP_TENSOR_MARKERS):
        return (f"--spec mtp is not available for this model yet: {engine.model_file.path} has MTP weights, but "
                f"its architecture ({engine.hparams.arch}) does not load them")
    return (f"--spec mtp is not available for this model: {engine.model_file.path} has no multi-token-prediction "
            f"(MTP / nextn) weights")


def make_dflash_drafter(engine) -> DFlashDrafter:
    path = engine.config.draft_model_path
    config, weights = load_dflash_gguf(path) if is_dflash_gguf(path) else load_dflash_checkpoint(path)
    engine.block_manager.enable_prefix_caching = False  # DFlash needs the target features of every position
    return DFlashDrafter(DFlashModel(config, weights, engine.model))


def make_draft_model_drafter(engine, draft_engine) -> DraftModelDrafter:
    """draft_engine: an engine of the draft model (the same engine parts as the target's)."""
    check_same_vocabulary(engine, draft_engine, engine.config.draft_model_path)
    return DraftModelDrafter(draft_engine)


__all__ = ["DFlashCheckpointError", "DFlashDrafter", "Draft", "Drafter", "DraftModelDrafter", "NgramDrafter",
           "SpecStats", "SpeculativeDecoder", "SpeculationUnavailableError", "VocabularyMismatchError",
           "make_speculative_decoder"]
