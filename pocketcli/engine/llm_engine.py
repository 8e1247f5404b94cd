"""The engine: owns the model, KV cache, scheduler and sampler; `step()` advances every running sequence through
one pipeline: schedule -> forward -> sample (or verify drafts) -> accept -> stream."""
from __future__ import annotations

import numba
import numpy as np

from gguf_loader import GGUFFile, UnsupportedModelError
from gguf_loader.hparams import ModelHParams, read_hparams
from kernels_numba import FreeCoreThreads, get_ops
from kernels_numba.kv_type import kv_type_named

from ..config import EngineConfig
from ..models import make_model, model_class_for
from ..sampling_params import SamplingParams
from ..model_source import make_tokenizer, open_model_file, vocab_size_of
from .block_manager import BlockManager
from .device_sampler import DeviceSampler
from .graphed_decode import GraphedDecode
from .kv_cache import make_kv_cache
from .kv_memory import check_kv_cache_fits, kv_bytes_per_token
from .model_runner import ModelRunner
from .recurrent_state import RecurrentBlockManager, make_recurrent_state
from .outputs import StepOutput, TokenLogprob
from .sampler import Sampler, apply_allowed_mask, log_softmax
from .scheduler import ScheduledBatch, ScheduledSeq, Scheduler, SchedulerConfig
from .sequence import Sequence
from .structured_output import StructuredOutputBackend


class PromptTooLongError(ValueError):
    """The prompt does not fit in the context window."""


def check_tensor_types(model_file: GGUFFile, supported_types) -> None:
    """Fail at load, naming the tensor and its type, rather than in the middle of a forward pass."""
    for info in model_file.tensor_infos.values():
        if info.ggml_type not in supported_types and model_file.tensor(info.name).fp8 is None:  # FP8: own kernels
            type_name = model_file.tensor(info.name).type_name
            raise UnsupportedModelError(f"{model_file.path}: tensor {info.name} has quant type {type_name}, "
                                        f"which PocketLLM does not support yet")


class LLMEngine:
    def __init__(self, config: EngineConfig, model_file: GGUFFile | None = None, rank_group_factory=None,
                 draft_engine_factory=None):
        """rank_group_factory(model_file, hparams, config, ops) starts the ranks of --tp N
        (pocketcli.parallel.make_rank_group): tensor parallelism comes from outside, the engine never imports it.
        draft_engine_factory(config) builds the draft model's engine of --spec draft. Both are passed by
        pocketcli.engine_factory.make_engine, the one way in for front ends."""
        self.config = config
        self.model_file = model_file or open_model_file(config.model_path)  # GGUF file or HF directory
        metadata = self.model_file.metadata
        model_class_for(self.model_file.architecture)  # fail early, before the tokenizer, on unknown archs
        self.tokenizer = make_tokenizer(self.model_file)
        self.hparams: ModelHParams = read_hparams(metadata, vocab_size_of(self.model_file))
        ops = get_ops(config.backend)
        check_tensor_types(self.model_file, ops.SUPPORTED_TYPES)
        self.rank_group = self._start_rank_group(ops, rank_group_factory)  # None unless --tp > 1
        # at most the thread count set now (pocket -t N); --tp ranks keep their fixed share of the cores
        self.free_core_threads = (FreeCoreThreads(numba.get_num_threads())
                                  if config.follow_free_cores and self.rank_group is None else None)
        self.model = self.rank_group.model if self.rank_group else make_model(self.model_file, self.hparams, ops)
        self.max_model_len = self._context_length()
        blocks_per_seq = -(-self.max_model_len // config.block_size)
        num_blocks = blocks_per_seq * config.max_num_seqs
        hp = self.model.hparams  # under tensor parallelism, this rank's KV heads
        kv_heads, key_dim, value_dim = self.model.kv_cache_layout()
        check_kv_cache_fits(num_blocks * config.block_size, kv_bytes_per_token(
            hp.num_layers, kv_heads, key_dim, value_dim, kv_type_named(config.kv_type)), config.kv_type,
            ops.free_memory_bytes())  # before allocating: host pages are mapped lazily, they would fail later
        self.kv_cache = make_kv_cache(hp.num_layers, num_blocks, config.block_size, kv_heads, key_dim,
                                      zeros=ops.zeros, value_dim=value_dim, kv_type=config.kv_type)
        self.block_manager = BlockManager(num_blocks, config.block_size, config.enable_prefix_caching)
        self.kv_cache.recurrent = make_recurrent_state(self.model, config.max_num_seqs + 1)  # +1: score()
        if self.kv_cache.recurrent is not None:  # hybrid model: a state slot per sequence, no prefix cache
            self.block_manager = RecurrentBlockManager(num_blocks, config.block_size, self.kv_cache.recurrent)
        scheduler_config = SchedulerConfig(config.max_num_seqs, config.max_num_batched_tokens, self.max_model_len)
        self.scheduler = Scheduler(scheduler_config, self.block_manager, set(self.tokenizer.stop_token_ids))
        # greedy / top-k rows drawn next to device logits; a tensor-parallel runner gathers logits on the host
        on_device = ops.is_device_array(self.kv_cache.keys[0]) if self.kv_cache.keys else False
        graphed = GraphedDecode(self.model, self.kv_cache, blocks_per_seq) if on_device and config.cuda_graph else None
        self.runner = (self.rank_group.make_runner(self.kv_cache) if self.rank_group
                       else ModelRunner(self.model, self.kv_cache, graphed))
        self.sampler = Sampler()
        self.device_sampler = DeviceSampler(ops, self.sampler) if on_device and not self.rank_group else None
        self.structured_output = StructuredOutputBackend(self.tokenizer, self.hparams.vocab_size)
        self.speculative = self._make_speculative_decoder(draft_engine_factory)

    def _start_rank_group(self, ops, rank_group_factory):
        if self.config.tp_size == 1:
            return None
        if rank_group_factory is None:
            raise ValueError(f"--tp {self.config.tp_size} needs LLMEngine(..., rank_group_factory="
                             "pocketcli.parallel.make_rank_group)")
        return rank_group_factory(self.model_file, self.hparams, self.config, ops)  # ranks 1..n-1; this is rank 0

    def close(self) -> None:
        """Stop the tensor-parallel rank processes (also done at exit); a plain engine has nothing to close."""
        if self.rank_group is not None:
            self.rank_group.close()

    def _make_speculative_decoder(self, draft_engine_factory):
        if not self.config.spec:
            return None
        from .speculative import make_speculative_decoder

        draft_engine = self._make_draft_engine(draft_engine_factory) if self.config.spec == "draft" else None
        speculative = make_speculative_decoder(self, draft_engine)
        self.model.tap_layer_ids = frozenset(self.model.tap_layer_ids | speculative.tap_layer_ids)
        return speculative

    def _make_draft_engine(self, draft_engine_factory):
        if draft_engine_factory is None:
            raise ValueError("--spec draft needs LLMEngine(..., draft_engine_factory="
                             "pocketcli.engine_factory.make_engine)")
        return draft_engine_factory(self.config.draft_config(self.max_model_len))

    def _context_length(self) -> int:
        trained = self.hparams.context_length
        return min(self.config.ctx_size, trained) if self.config.ctx_size else trained

    def add_request(self, prompt_token_ids: list[int], params: SamplingParams) -> Sequence:
        if not prompt_token_ids:
            raise ValueError("the prompt is empty")
        if len(prompt_token_ids) >= self.max_model_len:
            raise PromptTooLongError(
                f"prompt is {len(prompt_token_ids)} tokens but the context holds {self.max_model_len} "
                f"(raise --ctx-size or shorten the prompt)")
        bad = [t for t in prompt_token_ids if not 0 <= t < self.hparams.vocab_size]
        if bad:
            raise ValueError(f"token id {bad[0]} is outside the vocabulary (size {self.hparams.vocab_size})")
        seq = Sequence(prompt_token_ids, params, self.config.block_size)
        if params.structured_output is not None:
            seq.constraint = self.structured_output.make_constraint(params.structured_output)
        self.scheduler.add(seq)
        return seq

    def abort(self, seq: Sequence) -> None:
        self.finish(seq, "abort")

    def finish(self, seq: Sequence, reason: str) -> None:
        self.scheduler.finish(seq, reason)
        self.sampler.release(seq.seq_id)
        if self.speculative is not None:
            self.speculative.release(seq)

    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished()

    # --- the step: schedule -> forward -> sample (or verify drafts) -> accept -> stream ---------------------
    def step(self) -> list[StepOutput]:
        batch = self.scheduler.schedule()
        if not batch:
            return []
        if self.free_core_threads is not None:
            self.free_core_threads.adjust()
        if self.speculative is not None:
            self.speculative.propose(batch)  # drafts ride along in the batch: this step's forward verifies them
        items = [item for item in batch.items if item.samples_token]
        first_rows = np.cumsum([0] + [1 + item.num_draft_tokens for item in items])  # each item's logits rows
        logits = self._forward(batch, items)
        token_ids = self._sample(items, logits)
        appended = self.scheduler.postprocess_tokens(batch, token_ids)  # accept: append, stop checks
        return [self._stream(item, tokens, logits, int(first_row))
                for item, tokens, first_row in zip(items, appended, first_rows)]

    def _forward(self, batch: ScheduledBatch, items: list[ScheduledSeq]):
        """Logits of the sampling rows (and of every draft), left on the device when it can draw every row."""
        if self.device_sampler is not None and self.speculative is None and self.device_sampler.can_sample(items):
            return self.runner.run(batch, keep_logits_on_device=True)
        logits = self.runner.run(batch)
        if self.speculative is not None:
            self.speculative.observe(batch, self.model.tapped_hidden)
        return logits

    def _sample(self, items: list[ScheduledSeq], logits) -> list[list[int]]:
        """The tokens each sampling item emits: one, or its accepted drafts and one more (speculative)."""
        if self.speculative is not None:
            return self.speculative.verify(items, logits)
        if self.device_sampler is not None and self.model.ops.is_device_array(logits):
            return [[token_id] for token_id in self.device_sampler.sample(logits, items)]
        return [[token_id] for token_id in self._sample_on_host(logits, items)]

    def _stream(self, item: ScheduledSeq, tokens: list[int], logits, first_row: int) -> StepOutput:
        """The item's StepOutput; a finished sequence lets go of its sampler (and drafter) state."""
        seq = item.seq
        if seq.is_finished:
            self.sampler.release(seq.seq_id)
            if self.speculative is not None:
                self.speculative.release(seq)
        elif self.speculative is not None:
            self.speculative.settle(item, tokens)
        logprobs = self._token_logprobs(seq.params, tokens, logits, first_row)
        return StepOutput(seq.seq_id, tokens, seq.finish_reason, logprobs)

    def _token_logprobs(self, params: SamplingParams, tokens: list[int], logits, first_row: int) -> list | None:
        """Logprobs of each emitted token from its own logits row (a draft's row for an accepted draft)."""
        if params.logprobs is None:
            return None
        rows = logits[first_row:first_row + len(tokens)]
        return [lp for row, token_id in zip(rows, tokens) for lp in self._logprobs(row, params, token_id)]

    def _sample_on_host(self, logits: np.ndarray, sampling_items) -> list[int]:
        """A token id per sampling row, from host logits with the full sampler."""
        sample_logits = self._apply_constraints(logits, sampling_items)
        seqs = [item.seq for item in sampling_items]
        return self.sampler.sample_rows(sample_logits, [seq.params for seq in seqs], [seq.seq_id for seq in seqs],
                                        [seq.token_ids for seq in seqs], [seq.num_prompt_tokens for seq in seqs])

    def _apply_constraints(self, logits: np.ndarray, sampling_items) -> np.ndarray:
        """Grammar masks for the constrained rows, computed for the batch at once; logprobs keep the raw rows."""
        rows = [i for i, item in enumerate(sampling_items) if item.seq.constraint is not None]
        if not rows:
            return logits
        allowed = self.structured_output.fill_allowed([sampling_items[i].seq.constraint for i in rows])
        masked = logits.copy()
        masked[rows] = apply_allowed_mask(logits[rows], allowed)
        return masked

    @staticmethod
    def _logprobs(logits_row: np.ndarray, params: SamplingParams, token_id: int) -> list[TokenLogprob] | None:
        if params.logprobs is None:
            return None
        logprobs = log_softmax(logits_row)
        top_ids = np.argpartition(-logprobs, params.logprobs)[:params.logprobs] if params.logprobs else []
        top_ids = sorted(top_ids, key=lambda t: -logprobs[t])
        top = [(int(t), float(logprobs[t])) for t in top_ids]
        return [TokenLogprob(token_id, float(logprobs[token_id]), top)]

    def score(self, token_ids: list[int], first_position: int = 0) -> np.ndarray:
        """Logits [len(token_ids) - first_position, vocab] for each position from first_position on
        (teacher forcing), computed through the same paged path as generation."""
        seq = Sequence(token_ids, SamplingParams(temperature=0.0, max_tokens=1), self.config.block_size)
        if len(seq) > self.max_model_len or not self.block_manager.can_allocate(seq, len(seq)):
            raise PromptTooLongError(f"{len(seq)} tokens do not fit in the KV cache")
        self.block_manager.allocate(seq, len(seq))
        try:
            return self.runner.run(ScheduledBatch([ScheduledSeq(seq, len(seq))]), first_logit_token=first_position)
        finally:
            self.block_manager.deallocate(seq)
