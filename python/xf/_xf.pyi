# Types of the extension module xf._xf (python/src/xf_python.cc); use the xf package, whose
# Translator checks every option before it reaches these.
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

_Source = Union[str, Sequence[str]]

class Error(RuntimeError): ...

class TranslateOptions:
    def __init__(self) -> None: ...
    beam: int
    n_best: int
    length_penalty: Optional[float]
    length_normalization: Optional[str]
    max_len_a: float
    max_len_b: int
    max_decoding_length: int
    min_decoding_length: int
    disable_unk: bool
    disable_loop_guard: bool
    disable_sentence_splitting: bool
    max_batch_size: int
    batch_type: str
    sampling_topk: int
    sampling_topp: float
    sampling_temperature: float
    seed: int
    repetition_penalty: Optional[float]
    no_repeat_ngram_size: Optional[int]

class Translator:
    def __init__(self, model_path: str, device: str, max_batch: int, max_beam: int, threads: int,
                 max_source_len: int, weight_dtype: Optional[str], max_len_a: float,
                 max_len_b: int, shortlist: str, shortlist_first: int, shortlist_best: int,
                 shortlist_threshold: float) -> None: ...
    # ([(is_text, texts, pieces, ids, scores, log_probs) per source], indices truncated)
    # callback(index, sentence, token_id, piece or None at the end, length)
    def translate(self, source: Sequence[_Source], target_prefix: Optional[Sequence[_Source]],
                  options: TranslateOptions, max_input_length: int,
                  callback: Optional[Callable[[int, int, int, Optional[str], int], None]]
                  ) -> Tuple[List[Tuple[bool, List[str], List[List[str]], List[List[int]], List[float], List[float]]],
                             List[int]]: ...
    # ([(tokens, ids, log_probs) per pair], indices truncated)
    def score(self, source: Sequence[_Source], target: Sequence[_Source], options: TranslateOptions,
              max_input_length: int) -> Tuple[List[Tuple[List[str], List[int], List[float]]], List[int]]: ...
    def tokenize(self, text: str) -> List[str]: ...
    @property
    def decoding_defaults(self) -> Dict[str, Any]: ...
    @property
    def threads(self) -> int: ...
    @property
    def max_batch(self) -> int: ...
    @property
    def max_beam(self) -> int: ...
    @property
    def max_source_len(self) -> int: ...
    @property
    def device(self) -> str: ...
