"""Tests of the xf package on the bundled English-French model (models/enfr.xfm).

XF_RUN names the xf-run executable the translations are compared with (scripts/test.sh sets it;
default: build/bin/xf-run of this checkout).
"""
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

import xf

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "models" / "enfr.xfm"
SENTENCES = [line for line in (ROOT / "examples" / "sentences.en").read_text().splitlines() if line]

pytestmark = pytest.mark.skipif(not MODEL.exists(), reason="no bundled model (models/enfr.xfm)")


# f32: the CPU's int8 products quantize their input per tensor, padding rows included, so an
# int8 translation may depend on what earlier calls left in the buffers (seen on the bundled model).
@pytest.fixture(scope="module")
def translator():
    return xf.Translator(MODEL, max_batch=8, threads=1, weight_dtype="f32")


def xf_run(*args, input_lines):
    executable = os.environ.get("XF_RUN", str(ROOT / "build" / "bin" / "xf-run"))
    if not Path(executable).exists():
        pytest.fail(f"xf-run not found at {executable} (build it, or set XF_RUN)")
    done = subprocess.run([executable, "--model", str(MODEL), "--threads", "1", "--dtype", "f32", *args],
                          input="\n".join(input_lines) + "\n", capture_output=True, text=True, check=True)
    return done.stdout.splitlines()


def has_repeated_ngram(tokens, n):
    seen = set()
    for i in range(len(tokens) - n + 1):
        gram = tuple(tokens[i:i + n])
        if gram in seen:
            return True
        seen.add(gram)
    return False


@pytest.mark.parametrize("beam", [1, 4])
def test_agrees_with_xf_run(translator, beam):
    expected = xf_run("--beam", str(beam), input_lines=SENTENCES)
    results = translator.translate_batch(SENTENCES, beam_size=beam)
    assert [r.hypotheses[0] for r in results] == expected
    assert any(expected), "xf-run printed only empty lines: the comparison would prove little"


def test_n_best_scores_agree_with_xf_run(translator):
    lines = xf_run("--beam", "4", "--n-best", "3", input_lines=SENTENCES[:3])
    results = translator.translate_batch(SENTENCES[:3], beam_size=4, num_hypotheses=3, return_scores=True)
    expected = [line.split(" ||| ") for line in lines]
    got = [(str(i), h, s) for i, r in enumerate(results) for h, s in zip(r.hypotheses, r.scores)]
    assert [(i, h) for i, h, _ in got] == [(i, h) for i, h, _ in expected]
    for (_, _, score), (_, _, text) in zip(got, expected):
        assert score == pytest.approx(float(text), abs=1e-4)


def test_results_carry_pieces_ids_and_scores(translator):
    [plain] = translator.translate_batch(["I like cats."])
    assert plain.scores == [] and plain.log_probs == []
    [result] = translator.translate_batch(["I like cats."], num_hypotheses=2, return_scores=True)
    assert len(result.hypotheses) == len(result.pieces) == len(result.ids) == len(result.scores) == 2
    assert result.hypotheses[0] == plain.hypotheses[0]
    assert "".join(result.pieces[0]).replace("\u2581", " ").strip() == result.hypotheses[0]
    assert result.scores[0] >= result.scores[1]
    assert all(lp <= 0 for lp in result.log_probs)
    assert "TranslationResult(hypotheses=" in repr(result)


def test_pieces_in_pieces_out(translator):
    pieces = translator.tokenize("I like cats.")
    assert len(pieces) > 2 and all(isinstance(p, str) for p in pieces)
    [as_text] = translator.translate_batch(["I like cats."])
    [as_pieces] = translator.translate_batch([pieces])
    assert as_pieces.hypotheses == as_text.pieces  # pieces out when pieces came in (CTranslate2)
    assert as_pieces.ids == as_text.ids


def test_target_prefix_is_honoured(translator):
    prefixes = ["Moi, ", None, "Nous"]
    results = translator.translate_batch(SENTENCES[:3], target_prefix=prefixes)
    plain = translator.translate_batch(SENTENCES[:3])
    assert results[0].hypotheses[0].startswith("Moi,")
    assert results[1].hypotheses == plain[1].hypotheses
    assert results[2].hypotheses[0].startswith("Nous")
    [as_pieces] = translator.translate_batch([SENTENCES[0]], target_prefix=[["\u2581Moi", ","]])
    assert as_pieces.pieces[0][:2] == ["\u2581Moi", ","]


def test_sampling_is_reproducible_and_seeded(translator):
    sources = SENTENCES * 2
    options = dict(beam_size=1, sampling_topk=0, sampling_temperature=1.5)
    first = [r.ids for r in translator.translate_batch(sources, seed=3, **options)]
    assert [r.ids for r in translator.translate_batch(sources, seed=3, **options)] == first
    assert [r.ids for r in translator.translate_batch(sources, seed=4, **options)] != first
    greedy = [r.ids for r in translator.translate_batch(sources, beam_size=1)]
    assert [r.ids for r in translator.translate_batch(sources, beam_size=1, sampling_topk=1, seed=9)] == greedy


def test_no_repeat_ngram_and_length_cap(translator):
    sources = ["very " * 20 + "good", "the the the the the the the cat"]
    for n in (1, 2):
        for result in translator.translate_batch(sources, no_repeat_ngram_size=n, num_hypotheses=2):
            for ids in result.ids:
                assert not has_repeated_ngram(ids, n)
    for result in translator.translate_batch(SENTENCES, max_decoding_length=3):
        assert len(result.ids[0]) <= 3
    penalized = translator.translate_batch(sources, repetition_penalty=2.0)
    assert [r.ids for r in penalized] != [r.ids for r in translator.translate_batch(sources)]


def test_token_batches_give_the_same_translations(translator):
    by_examples = translator.translate_batch(SENTENCES, max_batch_size=2)
    by_tokens = translator.translate_batch(SENTENCES, max_batch_size=24, batch_type="tokens")
    assert [r.ids for r in by_tokens] == [r.ids for r in by_examples]


def test_bad_input_raises_with_the_runtime_message(translator):
    with pytest.raises(TypeError, match=r"source\[1\] must be a str or a list of str pieces, got int"):
        translator.translate_batch(["ok", 3])
    with pytest.raises(TypeError, match="source must be a list"):
        translator.translate_batch("a bare string")
    with pytest.raises(TypeError, match="found a bytes"):
        translator.translate_batch([["\u2581I", b"x"]])
    with pytest.raises(xf.Error, match="max_source_len 256"):
        translator.translate_batch(["word " * 400])
    with pytest.raises(xf.Error, match="sentence 1: piece 'no-such-piece' is not in the source vocabulary"):
        translator.translate_batch([["no-such-piece"]])
    with pytest.raises(xf.Error, match="beam 9 is outside the translator's 1..4"):
        translator.translate_batch(["ok"], beam_size=9)
    with pytest.raises(xf.Error, match="needs greedy search"):
        translator.translate_batch(["ok"], sampling_topk=5)
    with pytest.raises(xf.Error, match="unknown batch type 'words'"):
        translator.translate_batch(["ok"], batch_type="words")
    with pytest.raises(xf.Error, match="target_prefix has 1 entries for 2 sources"):
        translator.translate_batch(["a", "b"], target_prefix=["c"])
    with pytest.raises(ValueError, match=r"source\[0\] is not valid Unicode text \(invalid UTF-8"):
        translator.translate_batch(["caf\udce9"])  # a lone surrogate cannot be encoded
    assert translator.translate_batch([""])[0].hypotheses == [""]
    assert translator.translate_batch([]) == []


def test_missing_or_invalid_model_file(tmp_path):
    with pytest.raises(xf.Error, match="nope.xfm"):
        xf.Translator(tmp_path / "nope.xfm")
    bad = tmp_path / "bad.xfm"
    bad.write_bytes(b"not a model")
    with pytest.raises(xf.Error, match="bad.xfm"):
        xf.Translator(bad)
    with pytest.raises(xf.Error, match="unknown device 'tpu'"):
        xf.Translator(MODEL, device="tpu")
    with pytest.raises(xf.Error, match="threads must be 0"):
        xf.Translator(MODEL, threads=-2)


def test_compute_type_takes_ctranslate2_names(translator):
    as_f32 = xf.Translator(MODEL, max_batch=8, threads=1, compute_type="float32")
    assert [r.ids for r in as_f32.translate_batch(SENTENCES)] == [r.ids for r in translator.translate_batch(SENTENCES)]
    with pytest.raises(ValueError, match="compute_type 'bfloat16' is not one of"):
        xf.Translator(MODEL, compute_type="bfloat16")
    with pytest.raises(ValueError, match="not both"):
        xf.Translator(MODEL, compute_type="int8", weight_dtype="f32")
    with pytest.raises(xf.Error, match="f16"):
        xf.Translator(MODEL, compute_type="float16")  # CPU: f16 compute is refused


def test_threads_zero_means_every_core():
    assert xf.Translator(MODEL, max_batch=1, threads=0).threads == (os.cpu_count() or 1)


def test_gil_is_released_while_translating(translator):
    sources = SENTENCES * 8
    worker_result = {}
    worker = threading.Thread(target=lambda: worker_result.update(r=translator.translate_batch(sources)))
    start = time.monotonic()
    worker.start()
    ticks = [start]
    while worker.is_alive():
        time.sleep(0.005)
        ticks.append(time.monotonic())
    worker.join()
    duration = ticks[-1] - start
    assert duration > 0.2, "the batch should take long enough to tell"
    longest_gap = max(b - a for a, b in zip(ticks, ticks[1:]))
    assert longest_gap < duration / 2, f"the main thread waited {longest_gap:.2f} s of {duration:.2f} s"
    assert len(worker_result["r"]) == len(sources)


def test_concurrent_calls_on_one_translator(translator):
    expected = [r.ids for r in translator.translate_batch(SENTENCES)]
    outputs = [None] * 4

    def run(i):
        outputs[i] = [r.ids for r in translator.translate_batch(SENTENCES)]

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert outputs == [expected] * 4
