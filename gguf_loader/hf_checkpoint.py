"""A Hugging Face model directory (config.json + safetensors) behind the same interface as GGUFFile.

Large weights stay zero-copy views of the mapped shards (BF16/F16/F32, FP8 E4M3 at 1 byte per weight with its
scales); only 1-D tensors are copied to float32 (norms, biases), where HF conventions differ from GGUF's
(gemma3 stores norm weights as w and applies 1 + w).
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGMLQuantizationType as QT

from .errors import ModelFileError
from .fp8_layout import FP8_STORAGE_TYPE, dequantize_fp8, make_fp8_scales
from .hf_config import hf_metadata, llama3_freq_factors, rope_metadata
from .hf_name_map import (HYBRID_ARCHS, MOE_ARCHS, MTP_ARCHS, deepseek_gguf_name, expert_slot, fused_expert_slots,
                          gguf_name, is_norm, is_unit_offset_norm, mimo_gguf_name, moe_gguf_name)
from .reader import TensorInfo
from .safetensors_reader import SafetensorInfo, open_safetensors_dir
from .sampling_keys import generation_config_metadata
from .weight_tensor import WeightTensor, make_weight_tensor

GGML_TYPE_OF_DTYPE = {"F32": QT.F32, "F16": QT.F16, "BF16": QT.BF16, "F8_E4M3": FP8_STORAGE_TYPE}
FLOAT_DTYPES = ("F32", "F16", "BF16")
COPIED = -1  # TensorInfo.offset of tensors built in memory (float32 copies, synthetic rope factors)


def read_json(path: Path, required: bool = False) -> dict:
    if not path.exists():
        if required:
            raise ModelFileError(f"{path.parent}: not a Hugging Face model directory (no {path.name})")
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelFileError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ModelFileError(f"{path}: expected a JSON object")
    return data


def to_float32(raw: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "F32":
        return raw.view(np.float32).copy()
    if dtype == "F16":
        return raw.view(np.float16).astype(np.float32)
    if dtype == "BF16":
        return (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    raise ModelFileError(f"cannot convert {dtype} to float32")


class HFCheckpoint:
    """`metadata` (GGUF keys), `tensor_infos` / `tensor(name)` / `has_tensor(name)` under our tensor names."""

    format = "safetensors"
    version = 0  # GGUFFile compatibility: no GGUF version

    def __init__(self, path: str | os.PathLike):
        self.dir = Path(path)
        self.path = str(path)
        self.config = read_json(self.dir / "config.json", required=True)
        self.metadata: dict[str, Any] = hf_metadata(self.config, self.path)
        self.metadata["general.name"] = self.dir.name
        self.quantization_config: dict = self.config.get("quantization_config") or {}
        hf_infos, self._files = open_safetensors_dir(self.dir)
        self.file_size = sum(f.file_size for f in self._files)
        self._hf_infos = hf_infos
        self._names = {ours: info for name, info in hf_infos.items()
                       if (ours := self._our_name(name))}
        self._experts = self._expert_groups(hf_infos)  # stacked name -> each expert's tensor, in order
        self._fused_experts = self._fused_expert_parts(hf_infos)  # stacked name -> (fused tensor, half or None)
        self._add_mtp_metadata()
        self._copies: dict[str, np.ndarray] = {}  # our name -> float32 array (1-D tensors, rope factors)
        self._stacked_cache: dict[str, WeightTensor] = {}  # stacked experts, built on first use
        self._add_rope_factors()
        self.tensor_infos = {name: self._tensor_info(name) for name in self._all_names()}
        self.metadata.update(tokenizer_metadata(self.dir))
        self.metadata.update(generation_config_metadata(read_json(self.dir / "generation_config.json")))

    @property
    def architecture(self) -> str:
        return self.metadata["general.architecture"]

    # --- the GGUFFile interface ------------------------------------------------------------------------------
    def has_tensor(self, name: str) -> bool:
        return name in self.tensor_infos

    def tensor(self, name: str) -> WeightTensor:
        if name in self._experts:
            return self._stacked_experts(name)
        if name in self._fused_experts:
            return self._unfused_experts(name)
        if name in self._copies or len(self._names[name].shape) == 1:
            values = self._float_copy(name)
            return make_weight_tensor(name, QT.F32, values.shape, values.view(np.uint8))
        info = self._names[name]
        raw = info.file.raw(info)
        if info.dtype == "F8_E4M3":
            return self._fp8_tensor(name, info, raw)
        return make_weight_tensor(name, GGML_TYPE_OF_DTYPE[info.dtype], info.shape, raw)

    def type_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for info in self._hf_infos.values():
            counts[info.dtype] = counts.get(info.dtype, 0) + 1
        return counts

    # --- building tensors -----------------------------------------------------------------------------------
    def _all_names(self) -> list[str]:
        return sorted(set(self._names) | set(self._copies) | set(self._experts) | set(self._fused_experts))

    # --- MoE / hybrid checkpoints: stacked experts, MTP layers ------------------------------------------------
    def _our_name(self, hf_name: str) -> str | None:
        arch = self.architecture
        if arch in MOE_ARCHS or arch in HYBRID_ARCHS:
            return moe_gguf_name(hf_name, arch, int(self.metadata[f"{arch}.block_count"]))
        if arch == "mimo":
            return mimo_gguf_name(hf_name, int(self.metadata["mimo.block_count"]))
        if arch == "deepseek2":
            return deepseek_gguf_name(hf_name)
        return gguf_name(hf_name, arch)

    def _expert_groups(self, hf_infos: dict[str, SafetensorInfo]) -> dict[str, list[SafetensorInfo]]:
        if self.architecture not in MOE_ARCHS and self.architecture != "deepseek2":
            return {}
        slots: dict[str, dict[int, SafetensorInfo]] = {}
        for hf_name, info in hf_infos.items():
            slot = expert_slot(hf_name)
            if slot:
                slots.setdefault(slot[0], {})[slot[1]] = info
        num_experts = int(self.metadata.get(f"{self.architecture}.expert_count", 0))
        groups = {}
        for name, by_expert in slots.items():
            if sorted(by_expert) != list(range(num_experts)):
                raise ModelFileError(f"{self.path}: {name} has experts {sorted(by_expert)}, expected {num_experts}")
            groups[name] = [by_expert[e] for e in range(num_experts)]
        return groups

    def _fused_expert_parts(self, hf_infos: dict[str, SafetensorInfo]) -> dict[str, tuple[SafetensorInfo, int | None]]:
        """transformers 5's fused layout (hf_name_map.fused_expert_slots): our stacked names -> (the fused
        tensor, which half of its rows: 0 gate, 1 up, None the whole down_proj)."""
        if self.architecture not in MOE_ARCHS and self.architecture != "deepseek2":
            return {}
        parts = {}
        num_experts = int(self.metadata.get(f"{self.architecture}.expert_count", 0))
        for hf_name, info in hf_infos.items():
            for name, half in fused_expert_slots(hf_name):
                if len(info.shape) != 3 or info.shape[0] != num_experts or info.dtype not in FLOAT_DTYPES:
                    raise ModelFileError(f"{self.path}: {hf_name} is {info.dtype} {list(info.shape)}, expected a "
                                         f"float tensor [{num_experts} experts, rows, cols]")
                if name in self._experts:
                    raise ModelFileError(f"{self.path}: {name} is stored both per expert and fused ({hf_name})")
                parts[name] = (info, half)
        return parts

    def _unfused_experts(self, name: str) -> WeightTensor:
        """down_proj as it lies in the file (zero-copy); gate or up as a contiguous copy of its half of each
        expert's gate_up_proj rows (made once)."""
        info, half = self._fused_experts[name]
        ggml_type = GGML_TYPE_OF_DTYPE[info.dtype]
        raw = info.file.raw(info)
        if half is None:
            return make_weight_tensor(name, ggml_type, info.shape, raw)
        if name not in self._stacked_cache:
            num_experts, rows, cols = info.shape
            by_row = np.asarray(raw).reshape(num_experts, rows, -1)
            part = np.ascontiguousarray(by_row[:, half * (rows // 2):(half + 1) * (rows // 2)])
            part.flags.writeable = False
            self._stacked_cache[name] = make_weight_tensor(name, ggml_type, (num_experts, rows // 2, cols), part)
        return self._stacked_cache[name]

    def _stacked_experts(self, name: str) -> WeightTensor:
        """One (num_experts, rows, cols) tensor from the per-expert HF tensors (a copy, made once)."""
        if name not in self._stacked_cache:
            infos = self._experts[name]
            if any(info.dtype not in FLOAT_DTYPES or info.shape != infos[0].shape for info in infos):
                raise ModelFileError(f"{self.path}: experts of {name} must share one float dtype and shape")
            raw = np.concatenate([np.asarray(info.file.raw(info)) for info in infos])
            raw.flags.writeable = False
            shape = (len(infos), *infos[0].shape)
            self._stacked_cache[name] = make_weight_tensor(name, GGML_TYPE_OF_DTYPE[infos[0].dtype], shape, raw)
        return self._stacked_cache[name]

    def _add_mtp_metadata(self) -> None:
        """MTP weights (mtp.*, MiMo's model.mtp_layers.*) become block num_hidden_layers on, counted in
        block_count as llama.cpp writes it."""
        arch = self.architecture
        if arch not in MTP_ARCHS:
            return
        num_main = int(self.metadata[f"{arch}.block_count"])
        if f"blk.{num_main}.nextn.eh_proj.weight" in self._names:
            num_mtp = 1 + max(int(n.split(".")[1]) for n in self._names if n.startswith("blk.")) - num_main
            self.metadata[f"{arch}.nextn_predict_layers"] = num_mtp
            self.metadata[f"{arch}.block_count"] = num_main + num_mtp

    def _tensor_info(self, name: str) -> TensorInfo:
        if name in self._experts:
            info = self._experts[name][0]
            return TensorInfo(name, int(GGML_TYPE_OF_DTYPE[info.dtype]), (len(self._experts[name]), *info.shape),
                              COPIED)
        if name in self._fused_experts:
            info, half = self._fused_experts[name]
            shape = info.shape if half is None else (info.shape[0], info.shape[1] // 2, info.shape[2])
            return TensorInfo(name, int(GGML_TYPE_OF_DTYPE[info.dtype]), shape, info.begin if half is None else COPIED)
        if name in self._copies:
            return TensorInfo(name, int(QT.F32), self._copies[name].shape, COPIED)
        info = self._names[name]
        ggml_type = QT.F32 if len(info.shape) == 1 else GGML_TYPE_OF_DTYPE[info.dtype]
        return TensorInfo(name, int(ggml_type), info.shape, COPIED if len(info.shape) == 1 else info.begin)

    def _float_copy(self, name: str) -> np.ndarray:
        """A 1-D tensor as float32 (copied once), with gemma3's 1 + w norms."""
        if name not in self._copies:
            info = self._names[name]
            values = to_float32(info.file.raw(info), info.dtype)
            if is_unit_offset_norm(name, self.architecture):  # GGUF's convention: w + 1
                values = values + np.float32(1.0)
            if self.architecture in HYBRID_ARCHS and name.endswith("ssm_a"):  # A_log -> GGUF's -exp(A_log)
                values = -np.exp(values)
            if self.architecture == "gemma3" and is_norm(name):
                values = values + np.float32(1.0)
                if name.endswith("attn_q_norm.weight"):
                    values *= np.float32(self._gemma3_query_scale_fix())
            self._copies[name] = values
        return self._copies[name]

    def _gemma3_query_scale_fix(self) -> float:
        """Gemma3Model scales scores by 1/sqrt(head_dim) (27B: hidden/heads); config's query_pre_attn_scalar
        may differ, so the q norm carries the ratio (rope and the dot product are linear in q)."""
        m = self.metadata
        head_dim = m["gemma3.attention.key_length"]
        if m["gemma3.block_count"] == 62:
            head_dim = m["gemma3.embedding_length"] / m["gemma3.attention.head_count"]
        scalar = float(self.config.get("query_pre_attn_scalar") or head_dim)
        return math.sqrt(head_dim / scalar)

    def _add_rope_factors(self) -> None:
        _, params = rope_metadata(self.architecture, self.config, self.path)
        factors = llama3_freq_factors(params, self.metadata[f"{self.architecture}.attention.key_length"])
        if factors is not None:
            self._copies["rope_freqs.weight"] = factors

    def _fp8_tensor(self, name: str, info: SafetensorInfo, raw: np.ndarray) -> WeightTensor:
        if len(info.shape) != 2:
            raise ModelFileError(f"{self.path}: FP8 tensor {info.name} is not a matrix")
        scale_info = self._scale_info(info.name)
        scales = to_float32(scale_info.file.raw(scale_info), scale_info.dtype).reshape(scale_info.shape)
        block = self.quantization_config.get("weight_block_size")
        fp8 = make_fp8_scales(info.name, scales, info.shape, tuple(block) if block else None,
                              self._input_scale(info.name))
        tensor = make_weight_tensor(name, FP8_STORAGE_TYPE, info.shape, raw)
        return WeightTensor(tensor.name, tensor.ggml_type, tensor.shape, tensor.data, fp8=fp8)

    def _input_scale(self, weight_name: str) -> float | None:
        """The static activation scale next to an FP8 weight (`input_scale`, FineGrainedFP8's `activation_scale`)."""
        prefix = weight_name.removesuffix("weight")
        for candidate in (prefix + "input_scale", prefix + "activation_scale"):
            if candidate in self._hf_infos:
                info = self._hf_infos[candidate]
                values = to_float32(info.file.raw(info), info.dtype)
                if values.size != 1:
                    raise ModelFileError(f"{self.path}: {candidate} has {values.size} values, expected one")
                return float(values[0])
        return None

    def _scale_info(self, weight_name: str) -> SafetensorInfo:
        for candidate in (weight_name + "_scale_inv", weight_name + "_scale"):
            if candidate in self._hf_infos:
                return self._hf_infos[candidate]
        raise ModelFileError(f"{self.path}: FP8 tensor {weight_name} has no weight_scale_inv or weight_scale")

    def dequantized(self, name: str) -> np.ndarray:
        """float32 copy of any tensor (tests and tools; the engine never calls this)."""
        w = self.tensor(name)
        if w.fp8 is not None:
            return dequantize_fp8(w.data, w.fp8)
        return to_float32(np.ascontiguousarray(w.data).reshape(-1), w.ggml_type.name).reshape(w.shape)


def tokenizer_metadata(model_dir: Path) -> dict[str, Any]:
    """GGUF tokenizer keys the chat template and `pocket info` read: tokens, BOS/EOS ids, chat template."""
    tok_config = read_json(model_dir / "tokenizer_config.json")
    out: dict[str, Any] = {"tokenizer.ggml.model": "huggingface"}
    template = tok_config.get("chat_template")
    jinja_path = model_dir / "chat_template.jinja"
    if not template and jinja_path.exists():
        template = jinja_path.read_text(encoding="utf-8")
    if isinstance(template, list):  # named templates: take the default one
        template = next((t["template"] for t in template if t.get("name") == "default"), None)
    if template:
        out["tokenizer.chat_template"] = template
    tokens = _vocab_tokens(model_dir / "tokenizer.json")
    if tokens:
        out["tokenizer.ggml.tokens"] = tokens
        ids = {text: i for i, text in enumerate(tokens)}
        for key in ("bos", "eos"):
            text = special_text(tok_config.get(f"{key}_token"))
            if text in ids:
                out[f"tokenizer.ggml.{key}_token_id"] = ids[text]
    return out


def special_text(value) -> str | None:
    """tokenizer_config.json writes special tokens as a string or as {"content": ...}."""
    if isinstance(value, dict):
        return value.get("content")
    return value if isinstance(value, str) else None


def _vocab_tokens(path: Path) -> list[str]:
    data = read_json(path)
    if not data:
        return []
    vocab = (data.get("model") or {}).get("vocab") or {}
    pairs = list(vocab.items()) if isinstance(vocab, dict) else [(p[0], i) for i, p in enumerate(vocab)]
    pairs += [(t["content"], t["id"]) for t in data.get("added_tokens") or []]
    if not pairs:
        return []
    tokens = [""] * (max(i for _, i in pairs) + 1)
    for text, i in pairs:
        tokens[i] = text
    return tokens


def open_hf_checkpoint(path: str | os.PathLike) -> HFCheckpoint:
    return HFCheckpoint(path)
