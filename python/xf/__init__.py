"""xf: translate with Transformer models in the .xfm format (CPU; CUDA where built with it).

    import xf
    translator = xf.Translator("models/enfr.xfm")
    results = translator.translate_batch(["Hello.", "How are you?"])
    results[0].hypotheses[0]        # 'Bonjour.'

Names follow CTranslate2's Translator where the meaning is the same.
"""
import concurrent.futures
import itertools
import math
import os
import threading
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Union

from ._xf import Error, TranslateOptions
from ._xf import Translator as _Translator

__all__ = ["Error", "ScoringResult", "StreamStep", "Translator", "TranslationResult"]
__version__ = "0.1.0"

Source = Union[str, Sequence[str]]

_UINT64_MAX = 2**64 - 1
_INT_MAX = 2**31 - 1


# Every option is checked here, so that a bad one raises TypeError or ValueError naming it
# (never the binding's "incompatible function arguments").
def _int(name: str, value: Any, minimum: int, maximum: int = _INT_MAX) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if not minimum <= value <= maximum:
        raise ValueError(f"{name} must be from {minimum} to {maximum}, got {value}")
    return value


def _shortlist_path(value: Any) -> str:
    if value is None:
        return ""  # the model's own
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"shortlist must be None, \"none\" or a path, got {type(value).__name__}")
    path = os.fspath(value)
    if path == "":
        raise ValueError("shortlist must be None, \"none\" or a path, got an empty string")
    return path


def _float(name: str, value: Any, minimum: float = -math.inf, maximum: float = math.inf,
           above_minimum: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    value = float(value)
    if not math.isfinite(value) or value < minimum or value > maximum or (above_minimum and value == minimum):
        bound = "above" if above_minimum else "at least"
        described = f"a finite number {bound} {minimum:g}" if minimum > -math.inf else "a finite number"
        if maximum < math.inf:
            described += f" and at most {maximum:g}"
        raise ValueError(f"{name} must be {described}, got {value!r}")
    return value


def _bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")
    return value


def _choice(name: str, value: Any, choices: Sequence[str]) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__}")
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(repr(c) for c in choices)}, got {value!r}")
    return value


@dataclass
class TranslationResult:
    """The n-best translations of one source, best first.

    hypotheses: text (str) for a text source; pieces (list of str) for a source given as pieces,
    as CTranslate2 returns them. pieces and ids are there in both cases. scores (the log-probability
    over the length penalty of length_normalization) and log_probs are filled when return_scores is true.
    """

    hypotheses: List[Union[str, List[str]]]
    pieces: List[List[str]]
    ids: List[List[int]]
    scores: List[float] = field(default_factory=list)
    log_probs: List[float] = field(default_factory=list)

    def __repr__(self) -> str:
        return f"TranslationResult(hypotheses={self.hypotheses!r}, scores={self.scores!r})"


@dataclass
class StreamStep:
    """One streamed token (translate_batch's callback), or the end of a sentence's output.

    index: the source in the call; sentence: the sentence of that source (sentence splitting);
    token_id and token (the piece) of the next output token, or -1 and None with is_last, when
    the output is complete: length is then its token count (the loop guard may have cut the
    end of what greedy search streamed).
    """

    index: int
    sentence: int
    token_id: int
    token: Optional[str]
    is_last: bool
    length: int


@dataclass
class ScoringResult:
    """A given translation scored by the model (CTranslate2's ScoringResult).

    tokens: the target pieces, then "</s>"; ids: their ids; log_probs: each token's
    log-probability given the source and the tokens before it (teacher forcing).
    """

    tokens: List[str]
    ids: List[int]
    log_probs: List[float]

    def __repr__(self) -> str:
        return f"ScoringResult(tokens={self.tokens!r}, log_probs={self.log_probs!r})"


class Translator:
    """A model and the memory plan for the largest request: every working buffer is taken here.

    model_path: a .xfm file. device: "cpu" or "cuda" (device_index 0: xf runs on one device).
    max_batch: sentences decoded together. max_beam: the widest beam_size a call may ask for
    (None: the model's decoding.beam, else 4). threads, or CTranslate2's intra_threads: CPU
    threads (0: every core); inter_threads must be 1 (for parallel translation, one Translator
    per thread). max_source_len: source tokens with EOS. weight_dtype: None (as stored), "f32",
    "int8" (CPU) or "f16" (CUDA); compute_type takes CTranslate2's names for the same
    ("default", "float32", "int8", "float16"). max_len_a, max_len_b: the longest output is
    max_len_a * source tokens + max_len_b (the plan's limit; per call too).
    shortlist: a lexical shortlist (Marian's): None (the model file's own, if it has one), "none",
    or a file, Marian's binary lex.*.s2t.bin or its text lex.s2t pruned to shortlist_best
    candidates per source piece, ids below shortlist_first always in, each with a probability
    above shortlist_threshold (Marian's --shortlist FILE FIRST BEST THRESHOLD). CPU only.
    Raises xf.Error with the runtime's message (missing or invalid file, bad option); TypeError
    or ValueError naming an option of the wrong type or out of range.
    """

    # CTranslate2's compute_type names for the weight dtypes xf has.
    _COMPUTE_TYPES = {"default": None, "auto": None, "float32": "f32", "float16": "f16", "int8": "int8",
                      "int8_float32": "int8"}

    def __init__(self, model_path: Union[str, "os.PathLike[str]"], device: str = "cpu", max_batch: int = 32,
                 max_beam: Optional[int] = None, threads: Optional[int] = None, max_source_len: int = 256,
                 weight_dtype: Optional[str] = None, max_len_a: float = 1.0, max_len_b: int = 50,
                 compute_type: str = "default", intra_threads: Optional[int] = None,
                 inter_threads: int = 1, device_index: int = 0,
                 shortlist: Union[None, str, "os.PathLike[str]"] = None, shortlist_first: int = 100,
                 shortlist_best: int = 100, shortlist_threshold: float = 0.0):
        if not isinstance(model_path, (str, os.PathLike)):  # str(None) would open "None"
            raise TypeError(f"model_path must be a str or os.PathLike, got {type(model_path).__name__}")
        if not isinstance(device, str):  # the name itself is checked by the runtime
            raise TypeError(f"device must be a str, got {type(device).__name__}")
        _choice("compute_type", compute_type, list(self._COMPUTE_TYPES))
        if weight_dtype is None:
            weight_dtype = self._COMPUTE_TYPES[compute_type]
        elif compute_type != "default":
            raise ValueError("give weight_dtype or compute_type, not both")
        else:
            _choice("weight_dtype", weight_dtype, ["f32", "f16", "int8"])
        if threads is not None and intra_threads is not None:
            raise ValueError("give threads or intra_threads, not both")
        threads = threads if threads is not None else intra_threads if intra_threads is not None else 0
        _int("threads" if intra_threads is None else "intra_threads", threads, 0, 1024)
        if _int("inter_threads", inter_threads, 1) != 1:
            raise ValueError("inter_threads must be 1: a Translator translates one call at a time "
                             "(create one Translator per thread for parallel translation)")
        if _int("device_index", device_index, 0) != 0:
            raise ValueError("device_index must be 0: xf runs on one device")
        self._async: Optional[concurrent.futures.ThreadPoolExecutor] = None
        self._executor_lock = threading.Lock()
        self._translator = _Translator(
            os.fspath(model_path), device, _int("max_batch", max_batch, 1),
            0 if max_beam is None else _int("max_beam", max_beam, 1, 1024), threads,
            _int("max_source_len", max_source_len, 1), weight_dtype,
            _float("max_len_a", max_len_a, 0.0), _int("max_len_b", max_len_b, 0),
            _shortlist_path(shortlist), _int("shortlist_first", shortlist_first, 0),
            _int("shortlist_best", shortlist_best, 1), _float("shortlist_threshold", shortlist_threshold))

    @property
    def device(self) -> str:
        return self._translator.device

    @property
    def threads(self) -> int:
        return self._translator.threads

    @property
    def max_beam(self) -> int:
        return self._translator.max_beam

    @property
    def decoding_defaults(self) -> Dict[str, float]:
        """The model's own decoding settings (its decoding.* metadata, else xf's defaults):
        beam_size, length_penalty, length_normalization, max_decoding_length, repetition_penalty,
        no_repeat_ngram_size (an option given to translate_batch wins), and allow_unk (False: the
        unknown token is never output, as Marian's models ask; a model setting, not an option)."""
        return dict(self._translator.decoding_defaults)

    def tokenize(self, text: str) -> List[str]:
        """The model's SentencePiece pieces of a source text (a source translate_batch accepts)."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        return self._translator.tokenize(text)

    def translate_batch(self, source: Sequence[Source], max_batch_size: int = 0,
                        batch_type: str = "examples", beam_size: Optional[int] = None,
                        num_hypotheses: int = 1, length_penalty: Optional[float] = None,
                        max_decoding_length: int = 0, min_decoding_length: int = 0,
                        return_scores: bool = False, sampling_topk: int = 1,
                        sampling_topp: float = 1.0, sampling_temperature: float = 1.0,
                        target_prefix: Optional[Sequence[Optional[Source]]] = None,
                        repetition_penalty: Optional[float] = None,
                        no_repeat_ngram_size: Optional[int] = None, disable_unk: bool = False,
                        max_input_length: int = 1024, seed: int = 0, max_len_a: float = 1.0,
                        max_len_b: int = 50,
                        length_normalization: Optional[str] = None,
                        disable_loop_guard: bool = False,
                        disable_sentence_splitting: bool = False,
                        callback: Optional[Callable[[StreamStep], Any]] = None,
                        asynchronous: bool = False) -> Any:
        """Translates a list of sources (str, or lists of SentencePiece pieces).

        The GIL is released while translating. Options as in CTranslate2; None (beam_size,
        length_penalty, repetition_penalty, no_repeat_ngram_size) takes the model's own setting
        (decoding_defaults). Differences: length_penalty is the alpha of length_normalization
        ("gnmt": score = log_prob / ((5 + length) / 6)^alpha; "power": log_prob / length^alpha, as
        Marian and transformers; None: the model's, else "gnmt"), max_decoding_length 0 takes the
        model's (else leaves the max_len_a/b rule alone), min_decoding_length defaults to 0, sampling needs
        beam_size 1 and is reproducible for a seed. max_input_length: a source longer than this
        many tokens is truncated to it, with a warning (0: never; a source longer than the
        translator's max_source_len - 1 tokens raises xf.Error). target_prefix: None, or one entry
        per source (str, pieces, or None/"" for none) that its translations start with.
        disable_loop_guard: no loop guard (an output longer than its source that repeats a
        4-token phrase a third time is otherwise cut before the second turn).
        disable_sentence_splitting: translate each text whole (by default a text is a paragraph:
        its sentences are translated in the same batch and joined with its own spacing; a
        hypothesis's ids and scores are then its sentences' concatenated and summed).
        callback: called with a StreamStep for each output token as soon as it is final (greedy
        search: as chosen; beam search: the best hypothesis once its search ended), then at each
        sentence's end, from the translating thread.
        asynchronous: return at once a concurrent.futures.Future of the results (the call runs
        on the Translator's own thread; calls still run one at a time, in order).
        """
        if _bool("asynchronous", asynchronous):
            arguments = dict(locals())
            del arguments["self"]
            arguments["asynchronous"] = False
            return self._executor().submit(lambda: self.translate_batch(**arguments))
        if callback is not None and not callable(callback):
            raise TypeError(f"callback must be callable, got {type(callback).__name__}")
        options = self._options(max_batch_size, batch_type)
        if beam_size is not None:
            options.beam = _int("beam_size", beam_size, 1, 1024)
        options.n_best = _int("num_hypotheses", num_hypotheses, 1, 1024)
        if length_penalty is not None:
            options.length_penalty = _float("length_penalty", length_penalty, 0.0)
        if length_normalization is not None:
            options.length_normalization = _choice("length_normalization", length_normalization, ["gnmt", "power"])
        options.max_len_a = _float("max_len_a", max_len_a, 0.0)
        options.max_len_b = _int("max_len_b", max_len_b, 0)
        options.max_decoding_length = _int("max_decoding_length", max_decoding_length, 0)
        options.min_decoding_length = _int("min_decoding_length", min_decoding_length, 0)
        options.disable_unk = _bool("disable_unk", disable_unk)
        options.disable_loop_guard = _bool("disable_loop_guard", disable_loop_guard)
        options.disable_sentence_splitting = _bool("disable_sentence_splitting", disable_sentence_splitting)
        options.sampling_topk = _int("sampling_topk", sampling_topk, 0)
        options.sampling_topp = _float("sampling_topp", sampling_topp, 0.0, 1.0, above_minimum=True)
        options.sampling_temperature = _float("sampling_temperature", sampling_temperature, 0.0,
                                              above_minimum=True)
        options.seed = _int("seed", seed, 0, _UINT64_MAX)
        if repetition_penalty is not None:
            options.repetition_penalty = _float("repetition_penalty", repetition_penalty, 0.0,
                                                above_minimum=True)
        if no_repeat_ngram_size is not None:
            options.no_repeat_ngram_size = _int("no_repeat_ngram_size", no_repeat_ngram_size, 0)
        return_scores = _bool("return_scores", return_scores)
        max_input_length = _int("max_input_length", max_input_length, 0)
        if target_prefix is not None and not isinstance(target_prefix, (str, bytes)):
            target_prefix = [[] if p is None else p for p in target_prefix]
        stream = None
        if callback is not None:
            def stream(index, sentence, token_id, token, length):
                callback(StreamStep(index, sentence, token_id, token, token_id < 0, length))
        results, truncated = self._translator.translate(source, target_prefix, options, max_input_length, stream)
        self._warn_truncated(truncated, max_input_length)
        return [TranslationResult(hypotheses=texts if is_text else pieces, pieces=pieces, ids=ids,
                                  scores=scores if return_scores else [],
                                  log_probs=log_probs if return_scores else [])
                for is_text, texts, pieces, ids, scores, log_probs in results]

    def translate_iterable(self, source: Iterable[Source],
                           target_prefix: Optional[Iterable[Optional[Source]]] = None,
                           max_batch_size: int = 32, batch_type: str = "examples",
                           **kwargs: Any) -> Iterator[TranslationResult]:
        """Translates an iterable of sources (a file's lines, a generator), yielding the results
        in order as they are done: it reads 16 batches ahead (16 * max_batch_size sources, or
        16 * the translator's max_batch with batch_type "tokens") and translates them with
        translate_batch (kwargs: its options), so memory does not grow with the iterable."""
        yield from self._stream(self.translate_batch, source, target_prefix, "target_prefix",
                                max_batch_size, batch_type, kwargs)

    def score_batch(self, source: Sequence[Source], target: Sequence[Source], max_batch_size: int = 0,
                    batch_type: str = "examples", max_input_length: int = 1024,
                    offset: int = 0) -> List[ScoringResult]:
        """The log-probabilities the model gives to each target (str or pieces) as the translation
        of its source: one ScoringResult per pair, its tokens ending with "</s>". offset: leave
        out the first offset target tokens from the result. max_input_length: as translate_batch
        (sources only; a target longer than the translator's longest output raises xf.Error).
        CPU only."""
        options = self._options(max_batch_size, batch_type)
        max_input_length = _int("max_input_length", max_input_length, 0)
        offset = _int("offset", offset, 0)
        results, truncated = self._translator.score(source, target, options, max_input_length)
        self._warn_truncated(truncated, max_input_length)
        return [ScoringResult(tokens=tokens[offset:], ids=ids[offset:], log_probs=log_probs[offset:])
                for tokens, ids, log_probs in results]

    def score_iterable(self, source: Iterable[Source], target: Iterable[Source], max_batch_size: int = 64,
                       batch_type: str = "examples", **kwargs: Any) -> Iterator[ScoringResult]:
        """score_batch over iterables, streamed as translate_iterable streams translations."""
        yield from self._stream(self.score_batch, source, target, "target", max_batch_size, batch_type, kwargs)

    def _executor(self) -> concurrent.futures.ThreadPoolExecutor:
        # One worker: asynchronous calls run in the order they were made.
        with self._executor_lock:
            if self._async is None:
                self._async = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="xf")
            return self._async

    def _options(self, max_batch_size: int, batch_type: str) -> TranslateOptions:
        options = TranslateOptions()
        options.max_batch_size = _int("max_batch_size", max_batch_size, 0)
        options.batch_type = _choice("batch_type", batch_type, ["examples", "tokens"])
        return options

    def _stream(self, run, source, second, second_name, max_batch_size, batch_type, kwargs):
        max_batch_size = _int("max_batch_size", max_batch_size, 0)
        _choice("batch_type", batch_type, ["examples", "tokens"])
        examples = max_batch_size if batch_type == "examples" and max_batch_size > 0 else self._translator.max_batch
        chunk = 16 * examples
        sources = iter(source)
        seconds = iter(second) if second is not None else None
        while True:
            batch = list(itertools.islice(sources, chunk))
            if not batch:
                if seconds is not None and next(seconds, None) is not None:
                    raise ValueError(f"{second_name} has more entries than source")
                return
            if seconds is None:
                results = run(batch, max_batch_size=max_batch_size, batch_type=batch_type, **kwargs)
            else:
                paired = list(itertools.islice(seconds, len(batch)))
                if len(paired) != len(batch):
                    raise ValueError(f"{second_name} has fewer entries than source")
                kwargs[second_name] = paired
                results = run(batch, max_batch_size=max_batch_size, batch_type=batch_type, **kwargs)
            yield from results

    @staticmethod
    def _warn_truncated(truncated: List[int], max_input_length: int) -> None:
        if truncated:
            shown = ", ".join(str(i) for i in truncated[:10]) + (", ..." if len(truncated) > 10 else "")
            warnings.warn(f"{len(truncated)} source(s) longer than max_input_length {max_input_length} tokens "
                          f"truncated (index {shown})", stacklevel=3)
