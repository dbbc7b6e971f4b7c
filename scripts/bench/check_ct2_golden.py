#!/usr/bin/env python3
"""Checks xfm_to_ctranslate2.py against the independent reference in tests/reference/golden/.

    check_ct2_golden.py [--work-dir DIR]

For every golden case (post-norm shared/tied, pre-norm separate/untied with an output bias) it
writes the case's weights to an f32 .xfm with xfm.py, converts that to CTranslate2 (float32), and
compares CTranslate2's
  - per-token log-probabilities of the golden targets (score_batch, teacher forcing) with
    log_softmax of the golden decoder logits: within 1e-4;
  - greedy outputs with the golden greedy ids: exactly;
  - beam-4 1-best with the golden one: reported only, because CTranslate2's length penalty is
    log_prob / length^alpha where xf's is log_prob / ((5 + length) / 6)^alpha.
Exits non-zero when a required comparison fails.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import xfm  # noqa: E402

GOLDEN_DIR = os.path.join(xfm.REPO_ROOT, "tests", "reference", "golden")
LOGPROB_TOLERANCE = 1e-4


def load_golden(path):
    """name -> numpy array (float64 or int64) with its shape; format in tests/reference/README.md."""
    with open(path) as f:
        tokens = f.read().split()
    if tokens[:2] != ["xf-golden", "1"]:
        raise SystemExit("%s: not an xf golden file (version 1)" % path)
    pos, out = 2, {}
    while pos < len(tokens):
        name, dtype, rank = tokens[pos], tokens[pos + 1], int(tokens[pos + 2])
        shape = [int(x) for x in tokens[pos + 3:pos + 3 + rank]]
        pos += 3 + rank
        count = int(np.prod(shape)) if shape else 1
        values = np.array([float(x) for x in tokens[pos:pos + count]], dtype=np.float64)
        pos += count
        out[name] = (values.astype(np.int64) if dtype == "i64" else values).reshape(shape)
    return out


def rows(g, ids_name, lengths_name):
    ids, lengths = g[ids_name], g[lengths_name]
    return [list(ids[b, :lengths[b]]) for b in range(len(lengths))]


def check_case(name, work_dir):
    import ctranslate2

    g = load_golden(os.path.join(GOLDEN_DIR, name + ".txt"))
    config = {field: g["config." + field].item() for field, _, _ in xfm.CONFIG_FIELDS}
    for flag in ("shared_embeddings", "tied_output", "output_bias"):
        config[flag] = bool(config[flag])
    tensors = {pname: ("f32", g["param." + pname].astype(np.float32))
               for pname, _ in xfm.transformer_parameters(config)}
    model_path = os.path.join(work_dir, name + ".xfm")
    ct2_dir = os.path.join(work_dir, name + "_ct2")
    xfm.write_xfm(model_path, config, tensors)
    subprocess.run([sys.executable, os.path.join(HERE, "xfm_to_ctranslate2.py"), model_path,
                    ct2_dir, "--quantization", "float32", "--force"], check=True)

    # The token strings xfm_to_ctranslate2.py gives a model without a tokenizer.
    special = {config["pad_id"]: "<pad>", config["unk_id"]: "<unk>",
               config["bos_id"]: "<s>", config["eos_id"]: "</s>"}
    token = lambda i: special.get(int(i), "t%d" % i)
    target_ids = {token(i): i for i in range(config["target_vocab_size"])}
    ids_of = lambda tokens: [target_ids[t] for t in tokens]

    sources = [[token(i) for i in r[:-1]] for r in rows(g, "source.ids", "source.lengths")]
    targets = [[token(i) for i in r] for r in rows(g, "target_out.ids", "target.lengths")]
    targets = [t[:-1] for t in targets]  # score_batch appends EOS itself

    translator = ctranslate2.Translator(ct2_dir, device="cpu", intra_threads=1)
    failures = []

    # Teacher-forced log-probabilities against log_softmax(golden logits).
    logits = g["decoder.logits"]
    target_out = g["target_out.ids"]
    worst = 0.0
    for b, result in enumerate(translator.score_batch(sources, targets)):
        steps = len(targets[b]) + 1
        z = logits[b, :steps]
        log_softmax = z - z.max(-1, keepdims=True)
        log_softmax -= np.log(np.exp(log_softmax).sum(-1, keepdims=True))
        expected = log_softmax[np.arange(steps), target_out[b, :steps]]
        got = np.array(result.log_probs)
        if got.shape != expected.shape:
            failures.append("sentence %d: %d log-probs, expected %d" % (b, got.size, expected.size))
            continue
        worst = max(worst, float(np.abs(got - expected).max()))
    if worst > LOGPROB_TOLERANCE:
        failures.append("log-prob difference %.3g > %g" % (worst, LOGPROB_TOLERANCE))

    max_length = int(g["decode.max_length"].max())
    greedy = translator.translate_batch(sources, beam_size=1, max_decoding_length=max_length,
                                        min_decoding_length=0, length_penalty=0.6)
    greedy_ids = [ids_of(r.hypotheses[0]) for r in greedy]
    expected_greedy = [[int(x) for x in r] for r in rows(g, "greedy.ids", "greedy.lengths")]
    if greedy_ids != expected_greedy:
        failures.append("greedy %s, golden %s" % (greedy_ids, expected_greedy))

    beam = translator.translate_batch(sources, beam_size=4, max_decoding_length=max_length,
                                      min_decoding_length=0, length_penalty=0.6)
    beam_ids = [ids_of(r.hypotheses[0]) for r in beam]
    nbest = g["beam4.nbest.ids"]
    nbest_lengths = g["beam4.nbest.lengths"]
    expected_beam = [[int(x) for x in nbest[b, 0, :nbest_lengths[b, 0]]] for b in range(len(sources))]
    same_beam = sum(a == e for a, e in zip(beam_ids, expected_beam))

    print("%s: log-prob max |diff| %.2e; greedy %s; beam-4 1-best equal for %d of %d sentences "
          "(not required)" % (name, worst, "equal" if greedy_ids == expected_greedy else "DIFFERENT",
                              same_beam, len(sources)))
    return failures


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--work-dir", help="keep the converted models here (default: a temp dir)")
    args = p.parse_args()
    work_dir = args.work_dir or tempfile.mkdtemp(prefix="xf-ct2-golden-")
    os.makedirs(work_dir, exist_ok=True)
    cases = sorted(f[:-4] for f in os.listdir(GOLDEN_DIR) if f.endswith(".txt"))
    failed = False
    for name in cases:
        for failure in check_case(name, work_dir):
            print("FAIL %s: %s" % (name, failure))
            failed = True
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
