"""xf: translate with Transformer models in the .xfm format (CPU; CUDA where built with it).

    import xf
    translator = xf.Translator("models/enfr.xfm")
    results = translator.translate_batch(["Hello.", "How are you?"])
    results[0].hypotheses[0]        # 'Bonjour.'

Names follow CTranslate2's Translator where the meaning is the same.
"""
from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Union

from ._xf import Error, TranslateOptions
from ._xf import Translator as _Translator

__all__ = ["Error", "Translator", "TranslationResult"]
__version__ = "0.1.0"

Source = Union[str, Sequence[str]]


@dataclass
class TranslationResult:
    """The n-best translations of one source, best first.

    hypotheses: text (str) for a text source; pieces (list of str) for a source given as pieces,
    as CTranslate2 returns them. pieces and ids are there in both cases. scores (the log-probability
    over the GNMT length penalty) and log_probs are filled when return_scores is true.
    """

    hypotheses: List[Union[str, List[str]]]
    pieces: List[List[str]]
    ids: List[List[int]]
    scores: List[float] = field(default_factory=list)
    log_probs: List[float] = field(default_factory=list)

    def __repr__(self) -> str:
        return f"TranslationResult(hypotheses={self.hypotheses!r}, scores={self.scores!r})"


class Translator:
    """A model and the memory plan for the largest request: every working buffer is taken here.

    model_path: a .xfm file. device: "cpu" or "cuda". max_batch: sentences decoded together.
    max_beam: the widest beam_size a call may ask for. threads: CPU threads (0: every core).
    max_source_len: source tokens with EOS. weight_dtype: None (as stored), "f32", "int8"
    (CPU) or "f16" (CUDA); compute_type takes CTranslate2's names for the same ("default",
    "float32", "int8", "float16"). max_len_a, max_len_b: the longest output is
    max_len_a * source tokens + max_len_b (the plan's limit; per call too).
    Raises xf.Error with the runtime's message (missing or invalid file, bad option).
    """

    # CTranslate2's compute_type names for the weight dtypes xf has.
    _COMPUTE_TYPES = {"default": None, "auto": None, "float32": "f32", "float16": "f16", "int8": "int8",
                      "int8_float32": "int8"}

    def __init__(self, model_path: str, device: str = "cpu", max_batch: int = 32, max_beam: int = 4,
                 threads: int = 0, max_source_len: int = 256, weight_dtype: Optional[str] = None,
                 max_len_a: float = 1.0, max_len_b: int = 50, compute_type: str = "default"):
        if compute_type not in self._COMPUTE_TYPES:
            raise ValueError(f"compute_type {compute_type!r} is not one of {sorted(self._COMPUTE_TYPES)}")
        if weight_dtype is None:
            weight_dtype = self._COMPUTE_TYPES[compute_type]
        elif compute_type != "default":
            raise ValueError("give weight_dtype or compute_type, not both")
        self._translator = _Translator(str(model_path), device, max_batch, max_beam, threads,
                                       max_source_len, weight_dtype, max_len_a, max_len_b)

    @property
    def device(self) -> str:
        return self._translator.device

    @property
    def threads(self) -> int:
        return self._translator.threads

    def tokenize(self, text: str) -> List[str]:
        """The model's SentencePiece pieces of a source text (a source translate_batch accepts)."""
        return self._translator.tokenize(text)

    def translate_batch(self, source: Sequence[Source], max_batch_size: int = 0,
                        batch_type: str = "examples", beam_size: int = 4, num_hypotheses: int = 1,
                        length_penalty: float = 0.6, max_decoding_length: int = 0,
                        return_scores: bool = False, sampling_topk: int = 1,
                        sampling_topp: float = 1.0, sampling_temperature: float = 1.0,
                        target_prefix: Optional[Sequence[Optional[Source]]] = None,
                        repetition_penalty: float = 1.0, no_repeat_ngram_size: int = 0,
                        seed: int = 0, max_len_a: float = 1.0,
                        max_len_b: int = 50) -> List[TranslationResult]:
        """Translates a list of sources (str, or lists of SentencePiece pieces).

        The GIL is released while translating. Options as in CTranslate2; differences:
        length_penalty is GNMT's alpha, max_decoding_length 0 leaves the max_len_a/b rule alone,
        sampling needs beam_size 1 and is reproducible for a seed. target_prefix: None, or one
        entry per source (str, pieces, or None/"" for none) that its translations start with.
        """
        options = TranslateOptions()
        options.beam = beam_size
        options.n_best = num_hypotheses
        options.length_penalty = length_penalty
        options.max_len_a = max_len_a
        options.max_len_b = max_len_b
        options.max_decoding_length = max_decoding_length
        options.max_batch_size = max_batch_size
        options.batch_type = batch_type
        options.sampling_topk = sampling_topk
        options.sampling_topp = sampling_topp
        options.sampling_temperature = sampling_temperature
        options.seed = seed
        options.repetition_penalty = repetition_penalty
        options.no_repeat_ngram_size = no_repeat_ngram_size
        if target_prefix is not None and not isinstance(target_prefix, (str, bytes)):
            target_prefix = [[] if p is None else p for p in target_prefix]
        results = []
        for is_text, texts, pieces, ids, scores, log_probs in self._translator.translate(
                source, target_prefix, options):
            results.append(TranslationResult(
                hypotheses=texts if is_text else pieces, pieces=pieces, ids=ids,
                scores=scores if return_scores else [],
                log_probs=log_probs if return_scores else []))
        return results
