#!/usr/bin/python3
"""Golden vectors for xf's Transformer from an independent PyTorch implementation.

Run by hand (never by ctest) with Debian's Python, which has python3-torch:

    /usr/bin/python3 tests/reference/make_golden.py            # writes tests/reference/golden/*.txt
    /usr/bin/python3 tests/reference/make_golden.py --check    # recomputes, compares with the files

Everything is float64. The math, the beam search and the loss are defined in README.md next to
this file; this script is the executable form of that text and uses no torch.nn module, so that
the layout (weights [out, in], fused q/k/v, head split) is the one format/parameters.h writes down.
"""
import argparse
import math
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts", "bench"))
import xfm  # noqa: E402

torch.set_default_dtype(torch.float64)
GOLDEN_DIR = os.path.join(HERE, "golden")
FORMAT_VERSION = 1  # of the golden text files, see README.md

LENGTH_PENALTY_ALPHA = 0.6
BEAM_SIZE = 4
N_BEST = 2
SHORT_MAX_LENGTH = 3  # the extra beam run that hits the max length rule
# The runtime computes in float32: every decision golden outputs depend on (top-k boundaries,
# argmax, final n-best order) must be separated by more than this in log-probability, or the
# case's seed is rejected.
DECISION_MARGIN = 1e-3


def f32(x):
    """Rounds to the nearest float32 so the f32 model file holds exactly these values."""
    return float(np.float32(x))


LABEL_SMOOTHING = f32(0.1)  # float32-rounded, like the trainer's option (exact comparisons)


# ----------------------------------------------------------------------------------------------
# The cases. Field names are ModelConfig's (format/include/xf/format/config.h).

def base_config(**overrides):
    config = dict(
        source_vocab_size=32, target_vocab_size=32, d_model=16, num_heads=4, d_ff=32,
        encoder_layers=2, decoder_layers=2, max_positions=128, norm_position="post",
        shared_embeddings=True, tied_output=True, output_bias=False,
        layer_norm_epsilon=f32(1e-6), pad_id=0, unk_id=1, bos_id=2, eos_id=3)
    config.update(overrides)
    return config


CASES = {
    # The paper's model: post-norm, one embedding shared by source, target and output projection.
    "post_shared": dict(
        config=base_config(),
        sources=[[5, 9, 17, 4, 28, 11], [30, 7, 12], [6, 21, 14, 9]],
        targets=[[8, 19, 5, 26, 13], [15, 4, 29, 10, 22, 7, 31], [12, 6]],
        # Found by --search: weights whose decoding outputs are non-degenerate (see accept()).
        seed=1011, sharpness=1.5, eos_step=6, eos_slope=5.0),
    # Every option flipped: pre-norm with final norms, separate vocabularies and embeddings,
    # untied output projection with a bias, 2 heads, another LayerNorm epsilon.
    "pre_separate": dict(
        config=base_config(source_vocab_size=28, target_vocab_size=36, num_heads=2,
                           norm_position="pre", shared_embeddings=False, tied_output=False,
                           output_bias=True, layer_norm_epsilon=f32(1e-5)),
        sources=[[4, 15, 22, 8], [27, 5, 11, 19, 6, 13, 20], [9, 24]],
        targets=[[33, 7, 18], [5, 12, 35, 26, 9, 14], [21, 30, 4, 17, 11]],
        seed=2002, sharpness=1.0, eos_step=5, eos_slope=2.0),
}


# ----------------------------------------------------------------------------------------------
# Parameters: names, shapes and order of xf::transformer_parameters(), from the .xfm reader and
# writer of scripts/bench (written once there; it takes norm_position as the file's 0/1).

def parameter_specs(c):
    return xfm.transformer_parameters(dict(c, norm_position=int(c["norm_position"] == "pre")))


source_embedding_name = xfm.source_embedding_name
target_embedding_name = xfm.target_embedding_name
output_projection_name = xfm.output_projection_name


def final_norm_name(c):
    """The LayerNorm whose output the output projection reads."""
    if c["norm_position"] == "pre":
        return "decoder.final_norm"
    return "decoder.layers.%d.ffn_norm" % (c["decoder_layers"] - 1)


def random_parameters(c, seed, sharpness, eos_step, eos_slope):
    """Random weights, rounded to float32. Biases and norm parameters are far from their usual
    0/1 starting values so that a wrong use of any of them changes the outputs."""
    gen = torch.Generator().manual_seed(seed)

    def uniform(shape, low, high):
        return low + (high - low) * torch.rand(shape, generator=gen)

    params = {}
    for name, shape in parameter_specs(c):
        if name.startswith("embedding.") or name == "output.weight":
            # Scaled by sqrt(d_model) on input, so entries of about unit size after scaling.
            value = torch.randn(shape, generator=gen) / math.sqrt(c["d_model"])
        elif name.endswith(".weight"):
            bound = math.sqrt(6.0 / (shape[0] + shape[1]))  # Xavier uniform
            value = uniform(shape, -bound, bound)
        elif name.endswith(".gamma"):
            value = uniform(shape, 0.7, 1.3)
        elif name == "output.bias":
            value = uniform(shape, -0.5, 0.5)
        else:  # linear biases, norm betas
            value = uniform(shape, -0.2, 0.2)
        params[name] = value
    # A trained model is confident; a random one is not, and its beam search then prefers the
    # empty output (one EOS) under the length penalty. Sharpen the output distribution by
    # scaling the last LayerNorm's gain and bias (the logits scale with them).
    final_norm = final_norm_name(c)
    params[final_norm + ".gamma"] *= sharpness
    params[final_norm + ".beta"] *= sharpness
    install_length_clock(params, c, gen, eos_step, eos_slope)
    return {name: value.float().double() for name, value in params.items()}


def install_length_clock(params, c, gen, eos_step, slope):
    """Random weights make EOS about as likely as any token at every step, so outputs either stop
    at once or run to the max length. Give the EOS logit a term that grows with the decoding step:
    fit, by ridge regression on the final hidden states of random prefixes, a direction u with
    h_t . u ~ t - eos_step (t = 1 for the first generated token), and add slope * u to the output
    projection's EOS row. The fit is loose, so outputs end near eos_step, at varying lengths."""
    V, d = c["target_vocab_size"], c["d_model"]
    first, rows, steps = 4, 64, 2 * eos_step
    source = torch.randint(first, c["source_vocab_size"], (rows, 6), generator=gen)
    source[:, -1] = c["eos_id"]
    target_in = torch.randint(first, V, (rows, steps), generator=gen)
    target_in[:, 0] = c["bos_id"]
    with torch.no_grad():
        hidden = decoder_hidden(target_in, encode(source, params, c), source, params, c)
    x = hidden.reshape(-1, d)  # [rows * steps, d]
    t = torch.arange(1, steps + 1, dtype=torch.float64).repeat(rows) - eos_step
    u = torch.linalg.solve(x.T @ x + 1e-3 * torch.eye(d), x.T @ t)
    params[output_projection_name(c)][c["eos_id"]] += slope * u


# ----------------------------------------------------------------------------------------------
# The model.

def sinusoid_positions(length, d):
    """[length, d]: PE(p, 2j) = sin(p / 10000^(2j/d)), PE(p, 2j+1) = cos(same), p from 0."""
    position = torch.arange(length, dtype=torch.float64)[:, None]
    two_j = torch.arange(0, d, 2, dtype=torch.float64)[None, :]
    angle = position / torch.pow(torch.tensor(10000.0), two_j / d)
    pe = torch.zeros(length, d)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle)
    return pe


def layer_norm(x, P, prefix, c):
    mean = x.mean(-1, keepdim=True)
    variance = ((x - mean) ** 2).mean(-1, keepdim=True)  # biased
    return (x - mean) / torch.sqrt(variance + c["layer_norm_epsilon"]) * P[prefix + ".gamma"] \
        + P[prefix + ".beta"]


def linear(x, P, prefix):
    return x @ P[prefix + ".weight"].T + P[prefix + ".bias"]


def attention(q, k, v, allowed, c):
    """q [B, Tq, d], k and v [B, Tk, d], allowed [B, Tq, Tk] bool -> [B, Tq, d].
    Head h uses features h*head_dim .. (h+1)*head_dim-1 of q, k and v."""
    B, Tq, d = q.shape
    Tk = k.shape[1]
    heads = c["num_heads"]
    hd = d // heads
    qh = q.reshape(B, Tq, heads, hd).transpose(1, 2)  # [B, heads, Tq, hd]
    kh = k.reshape(B, Tk, heads, hd).transpose(1, 2)  # [B, heads, Tk, hd]
    vh = v.reshape(B, Tk, heads, hd).transpose(1, 2)
    scores = qh @ kh.transpose(-1, -2) / math.sqrt(hd)  # [B, heads, Tq, Tk]
    scores = scores.masked_fill(~allowed[:, None], float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return (weights @ vh).transpose(1, 2).reshape(B, Tq, d)


def self_attention(x, P, prefix, allowed, c):
    d = c["d_model"]
    qkv = linear(x, P, prefix + "self_attention.qkv")  # [B, T, 3d]: q, k, v
    out = attention(qkv[..., :d], qkv[..., d:2 * d], qkv[..., 2 * d:], allowed, c)
    return linear(out, P, prefix + "self_attention.output")


def cross_attention(x, memory, P, prefix, allowed, c):
    d = c["d_model"]
    q = linear(x, P, prefix + "cross_attention.query")
    kv = linear(memory, P, prefix + "cross_attention.key_value")  # [B, S, 2d]: k, v
    out = attention(q, kv[..., :d], kv[..., d:], allowed, c)
    return linear(out, P, prefix + "cross_attention.output")


def feed_forward(x, P, prefix):
    return linear(torch.relu(linear(x, P, prefix + "ffn.inner")), P, prefix + "ffn.outer")


def sublayer(x, fn, P, norm_prefix, c):
    if c["norm_position"] == "post":
        return layer_norm(x + fn(x), P, norm_prefix, c)
    return x + fn(layer_norm(x, P, norm_prefix, c))


def embed(ids, table, c):
    return table[ids] * math.sqrt(c["d_model"]) + sinusoid_positions(ids.shape[1], c["d_model"])


def encode(source, P, c):
    """source [B, S] ids padded with pad_id -> memory [B, S, d]."""
    x = embed(source, P[source_embedding_name(c)], c)
    key_ok = source != c["pad_id"]  # [B, S]
    allowed = key_ok[:, None, :].expand(-1, source.shape[1], -1)
    for i in range(c["encoder_layers"]):
        p = "encoder.layers.%d." % i
        x = sublayer(x, lambda h: self_attention(h, P, p, allowed, c), P,
                     p + "self_attention_norm", c)
        x = sublayer(x, lambda h: feed_forward(h, P, p), P, p + "ffn_norm", c)
    if c["norm_position"] == "pre":
        x = layer_norm(x, P, "encoder.final_norm", c)
    return x


def decode(target_in, memory, source, P, c):
    """target_in [B, T] (BOS + tokens, padded), memory [B, S, d] -> logits [B, T, V]."""
    logits = decoder_hidden(target_in, memory, source, P, c) @ P[output_projection_name(c)].T
    if c["output_bias"]:
        logits = logits + P["output.bias"]
    return logits


def decoder_hidden(target_in, memory, source, P, c):
    """The decoder stack's output, before the output projection: [B, T, d]."""
    T = target_in.shape[1]
    y = embed(target_in, P[target_embedding_name(c)], c)
    causal = torch.ones(T, T, dtype=torch.bool).tril()[None].expand(target_in.shape[0], -1, -1)
    source_ok = (source != c["pad_id"])[:, None, :].expand(-1, T, -1)  # [B, T, S]
    for i in range(c["decoder_layers"]):
        p = "decoder.layers.%d." % i
        y = sublayer(y, lambda h: self_attention(h, P, p, causal, c), P,
                     p + "self_attention_norm", c)
        y = sublayer(y, lambda h: cross_attention(h, memory, P, p, source_ok, c), P,
                     p + "cross_attention_norm", c)
        y = sublayer(y, lambda h: feed_forward(h, P, p), P, p + "ffn_norm", c)
    if c["norm_position"] == "pre":
        y = layer_norm(y, P, "decoder.final_norm", c)
    return y


# ----------------------------------------------------------------------------------------------
# Loss: label-smoothed cross-entropy, README.md "Loss".

def smoothed_cross_entropy(logits, target_out, c, eps):
    """Sum over non-pad positions of -sum_v q(v) log p(v), q = (1-eps) onehot(gold) + eps/V."""
    V = logits.shape[-1]
    log_probs = torch.log_softmax(logits, dim=-1)
    q = torch.full_like(log_probs, eps / V)
    q.scatter_add_(-1, target_out[..., None], torch.full_like(log_probs[..., :1], 1.0 - eps))
    per_token = -(q * log_probs).sum(-1)  # [B, T]
    mask = target_out != c["pad_id"]
    return (per_token * mask).sum(), int(mask.sum())


# ----------------------------------------------------------------------------------------------
# Decoding: README.md "Beam search". Runs one sentence at a time and recomputes the decoder over
# the whole prefix at every step, so it shares no cache logic with an incremental runtime.

def length_penalty(length):
    return ((5.0 + length) / 6.0) ** LENGTH_PENALTY_ALPHA


class Margins:
    """The smallest log-probability gap at a decision point, to reject fragile seeds."""

    def __init__(self):
        self.smallest = float("inf")

    def boundary(self, ordered_scores, count):
        # The last kept candidate against the first dropped one.
        if count < len(ordered_scores):
            self.smallest = min(self.smallest, ordered_scores[count - 1] - ordered_scores[count])

    def ranking(self, scores):
        for a, b in zip(scores, scores[1:]):
            self.smallest = min(self.smallest, abs(a - b))


def beam_search(source_row, P, c, beam, max_length, n_best, margins):
    """source_row: ids without padding. Returns n_best (tokens, score) best first; tokens exclude
    EOS; score = sum of log-probs (EOS included) / length_penalty(steps)."""
    source = torch.tensor([source_row])
    memory = encode(source, P, c)
    live = [([], 0.0)]  # (tokens, cumulative log-prob), best first
    finished = []  # (tokens, normalized score, raw log-prob, steps) in finishing order
    for step in range(1, max_length + 1):
        target_in = torch.tensor([[c["bos_id"]] + tokens for tokens, _ in live])
        logits = decode(target_in, memory.expand(len(live), -1, -1),
                        source.expand(len(live), -1), P, c)[:, -1]  # [live, V]
        log_probs = torch.log_softmax(logits, dim=-1)
        cumulative = torch.tensor([s for _, s in live])[:, None] + log_probs  # [live, V]
        flat = cumulative.flatten()
        # Stable sort: equal scores keep flat order (live rank, then token id).
        order = torch.sort(flat, descending=True, stable=True).indices.tolist()
        width = beam - len(finished)
        margins.boundary(flat[order].tolist(), width)
        V = log_probs.shape[1]
        next_live = []
        for index in order[:width]:
            h, token = divmod(index, V)
            tokens, score = live[h][0] + [token], float(flat[index])
            if token == c["eos_id"] or step == max_length:
                if token == c["eos_id"]:
                    tokens = tokens[:-1]
                finished.append((tokens, score / length_penalty(step), score, step))
            else:
                next_live.append((tokens, score))
        live = next_live
        if not live:
            break
    assert not live and len(finished) == beam
    ranked = sorted(finished, key=lambda f: -f[1])  # stable: ties keep finishing order
    margins.ranking([f[1] for f in ranked[:n_best + 1]])
    return [(f[0], f[1]) for f in ranked[:n_best]]


# ----------------------------------------------------------------------------------------------
# Batches.

def pad_rows(rows, value):
    width = max(len(r) for r in rows)
    return torch.tensor([r + [value] * (width - len(r)) for r in rows], dtype=torch.long)


def batch_tensors(case):
    c = case["config"]
    source_rows = [s + [c["eos_id"]] for s in case["sources"]]
    target_in_rows = [[c["bos_id"]] + t for t in case["targets"]]
    target_out_rows = [t + [c["eos_id"]] for t in case["targets"]]
    return dict(
        source=pad_rows(source_rows, c["pad_id"]),
        source_lengths=[len(r) for r in source_rows],
        target_in=pad_rows(target_in_rows, c["pad_id"]),
        target_out=pad_rows(target_out_rows, c["pad_id"]),
        target_lengths=[len(r) for r in target_in_rows],
        source_rows=source_rows)


def run_case(case, seed, sharpness, eos_step, eos_slope):
    c = case["config"]
    P = random_parameters(c, seed, sharpness, eos_step, eos_slope)
    b = batch_tensors(case)
    out = dict(params=P, batch=b)

    memory = encode(b["source"], P, c)
    logits = decode(b["target_in"], memory, b["source"], P, c)
    # Rows at padding positions are meaningless: zero them so nobody compares them.
    out["encoder_output"] = memory * (b["source"] != c["pad_id"])[..., None]
    out["decoder_logits"] = logits * (b["target_in"] != c["pad_id"])[..., None]

    margins = Margins()
    max_lengths = [n + 50 for n in b["source_lengths"]]
    out["max_lengths"] = max_lengths
    out["greedy"] = [beam_search(s, P, c, 1, m, 1, margins)[0]
                     for s, m in zip(b["source_rows"], max_lengths)]
    out["beam"] = [beam_search(s, P, c, BEAM_SIZE, m, N_BEST, margins)
                   for s, m in zip(b["source_rows"], max_lengths)]
    out["beam_short"] = [beam_search(s, P, c, BEAM_SIZE, SHORT_MAX_LENGTH, N_BEST, margins)
                         for s in b["source_rows"]]
    out["margin"] = margins.smallest
    return out


def accept(out, c):
    """Non-degenerate decoding: every greedy and beam output ends with EOS well before the max
    length, lengths vary, beam search changes at least one result, and no output holds pad."""
    greedy_lengths = [len(t) for t, _ in out["greedy"]]
    beam_lengths = [len(t) for nbest in out["beam"] for t, _ in nbest]
    best_lengths = greedy_lengths + [len(nbest[0][0]) for nbest in out["beam"]]
    if min(best_lengths) < 2 or min(beam_lengths) < 1 or max(beam_lengths + greedy_lengths) > 12:
        return False
    if len(set(greedy_lengths)) < 2 or len(set(beam_lengths)) < 2:
        return False
    if all(g[0] == nbest[0][0] for g, nbest in zip(out["greedy"], out["beam"])):
        return False
    tokens = [x for t, _ in out["greedy"] for x in t] + \
        [x for nbest in out["beam"] for t, _ in nbest for x in t]
    if c["pad_id"] in tokens or c["bos_id"] in tokens:
        return False
    return out["margin"] > DECISION_MARGIN


def gradients(case, P):
    c = case["config"]
    b = batch_tensors(case)
    leaves = {k: v.clone().requires_grad_(True) for k, v in P.items()}
    memory = encode(b["source"], leaves, c)
    logits = decode(b["target_in"], memory, b["source"], leaves, c)
    loss, tokens = smoothed_cross_entropy(logits, b["target_out"], c, LABEL_SMOOTHING)
    loss.backward()
    # Independent check of the loss definition against torch's own label smoothing.
    V = logits.shape[-1]
    torch_loss = torch.nn.functional.cross_entropy(
        logits.detach().reshape(-1, V), b["target_out"].reshape(-1), ignore_index=c["pad_id"],
        reduction="sum", label_smoothing=LABEL_SMOOTHING)
    assert abs(torch_loss.item() - loss.item()) < 1e-10 * abs(loss.item())
    return loss.item(), tokens, {k: v.grad.detach() for k, v in leaves.items()}


def finite_difference_check(case, P, grads, count=6):
    """Central differences on a few entries of a few parameters, to check autograd and the
    loss wiring in this script itself."""
    c = case["config"]
    b = batch_tensors(case)
    gen = torch.Generator().manual_seed(7)

    def loss_of(params):
        memory = encode(b["source"], params, c)
        logits = decode(b["target_in"], memory, b["source"], params, c)
        return smoothed_cross_entropy(logits, b["target_out"], c, LABEL_SMOOTHING)[0].item()

    names = sorted(P)
    worst = 0.0
    for _ in range(count):
        name = names[int(torch.randint(len(names), (1,), generator=gen))]
        index = int(torch.randint(P[name].numel(), (1,), generator=gen))
        h = 1e-6
        plus = {k: v.clone() for k, v in P.items()}
        minus = {k: v.clone() for k, v in P.items()}
        plus[name].view(-1)[index] += h
        minus[name].view(-1)[index] -= h
        numeric = (loss_of(plus) - loss_of(minus)) / (2 * h)
        analytic = grads[name].view(-1)[index].item()
        error = abs(numeric - analytic) / max(1.0, abs(analytic))
        worst = max(worst, error)
        assert error < 1e-6, (name, index, numeric, analytic)
    return worst


# ----------------------------------------------------------------------------------------------
# The golden text format, README.md "File format".

class GoldenWriter:
    def __init__(self):
        self.lines = ["xf-golden %d" % FORMAT_VERSION]

    def add(self, name, dtype, shape, values):
        values = list(values)
        assert len(values) == (math.prod(shape) if shape else 1), name
        assert " " not in name
        self.lines.append(" ".join([name, dtype, str(len(shape))] + [str(s) for s in shape]))
        if dtype == "i64":
            text = [str(int(v)) for v in values]
        elif dtype == "f32":
            # The shortest decimal that reads back (as float32) to exactly the value.
            text = [str(np.float32(v)) for v in values]
            for v, t in zip(values, text):
                assert float(np.float32(t)) == v, (name, v, t)
        else:
            text = ["%.17g" % float(v) for v in values]
        for start in range(0, len(text), 8):
            self.lines.append(" ".join(text[start:start + 8]))
        if not text:
            self.lines.append("")

    def tensor(self, name, t, dtype=None):
        t = t.detach()
        dtype = dtype or ("i64" if t.dtype == torch.long else "f64")
        self.add(name, dtype, list(t.shape), t.flatten().tolist())

    def text(self):
        return "\n".join(self.lines) + "\n"


def ragged(rows, filler=-1):
    """Token lists -> ([len(rows), max_len] padded with -1, lengths)."""
    width = max(1, max(len(r) for r in rows))
    return [r + [filler] * (width - len(r)) for r in rows], [len(r) for r in rows]


def write_case(name, case, seed, out, loss, tokens, grads):
    c = case["config"]
    w = GoldenWriter()
    w.add("seed", "i64", [], [seed])
    for key, value in c.items():
        if key == "norm_position":
            value = 0 if value == "post" else 1
        if isinstance(value, float):
            w.add("config." + key, "f64", [], [value])
        else:
            w.add("config." + key, "i64", [], [int(value)])
    for pname, shape in parameter_specs(c):
        w.tensor("param." + pname, out["params"][pname], "f32")
    b = out["batch"]
    w.tensor("source.ids", b["source"])
    w.add("source.lengths", "i64", [len(b["source_lengths"])], b["source_lengths"])
    w.tensor("encoder.output", out["encoder_output"])
    w.tensor("target_in.ids", b["target_in"])
    w.tensor("target_out.ids", b["target_out"])
    w.add("target.lengths", "i64", [len(b["target_lengths"])], b["target_lengths"])
    w.tensor("decoder.logits", out["decoder_logits"])

    B = len(b["source_lengths"])
    w.add("decode.length_penalty_alpha", "f64", [], [LENGTH_PENALTY_ALPHA])
    w.add("decode.max_length", "i64", [B], out["max_lengths"])
    ids, lengths = ragged([t for t, _ in out["greedy"]])
    w.add("greedy.ids", "i64", [B, len(ids[0])], [x for r in ids for x in r])
    w.add("greedy.lengths", "i64", [B], lengths)
    w.add("greedy.scores", "f64", [B], [s for _, s in out["greedy"]])
    for key, max_length in (("beam", None), ("beam_short", SHORT_MAX_LENGTH)):
        results = out[key]
        prefix = "beam%d%s." % (BEAM_SIZE, "" if max_length is None else "_max%d" % max_length)
        w.add(prefix + "beam_size", "i64", [], [BEAM_SIZE])
        if max_length is not None:
            w.add(prefix + "max_length", "i64", [], [max_length])
        rows = [t for nbest in results for t, _ in nbest]
        ids, lengths = ragged(rows)
        w.add(prefix + "nbest.ids", "i64", [B, N_BEST, len(ids[0])],
              [x for r in ids for x in r])
        w.add(prefix + "nbest.lengths", "i64", [B, N_BEST], lengths)
        w.add(prefix + "nbest.scores", "f64", [B, N_BEST],
              [s for nbest in results for _, s in nbest])

    w.add("loss.label_smoothing", "f64", [], [LABEL_SMOOTHING])
    w.add("loss.sum", "f64", [], [loss])
    w.add("loss.tokens", "i64", [], [tokens])
    w.add("loss.mean", "f64", [], [loss / tokens])
    for pname, _ in parameter_specs(c):
        w.tensor("grad." + pname, grads[pname])
    return w.text()


def summarize(name, seed, out, loss, tokens, fd_error):
    print("%s: seed %d, smallest decision margin %.3g, loss %.6f over %d tokens (mean %.6f), "
          "finite-difference check rel. error %.2g" %
          (name, seed, out["margin"], loss, tokens, loss / tokens, fd_error))
    for i, src in enumerate(out["batch"]["source_rows"]):
        print("  source %s" % src)
        print("    greedy  %s  score %.4f" % out["greedy"][i])
        for rank, (t, s) in enumerate(out["beam"][i]):
            print("    beam%d#%d %s  score %.4f" % (BEAM_SIZE, rank, t, s))
        for rank, (t, s) in enumerate(out["beam_short"][i]):
            print("    max%d #%d %s  score %.4f" % (SHORT_MAX_LENGTH, rank, t, s))


def tuning(case):
    return case["seed"], case["sharpness"], case["eos_step"], case["eos_slope"]


def check_against_torch_modules(case):
    """This file's attention and LayerNorm against torch's own (same layout: fused in_proj
    [3d, d] in q, k, v order, heads split along features), on random data."""
    c = case["config"]
    P = random_parameters(c, 99, 1.0, 5, 0.0)
    gen = torch.Generator().manual_seed(5)
    B, T, d = 2, 5, c["d_model"]
    x = torch.randn(B, T, d, generator=gen)
    key_ok = torch.ones(B, T, dtype=torch.bool)
    key_ok[1, 3:] = False
    p = "encoder.layers.0."
    ours = self_attention(x, P, p, key_ok[:, None, :].expand(-1, T, -1), c)
    theirs, _ = torch.nn.functional.multi_head_attention_forward(
        x.transpose(0, 1), x.transpose(0, 1), x.transpose(0, 1), d, c["num_heads"],
        P[p + "self_attention.qkv.weight"], P[p + "self_attention.qkv.bias"], None, None, False,
        0.0, P[p + "self_attention.output.weight"], P[p + "self_attention.output.bias"],
        training=False, key_padding_mask=~key_ok, need_weights=False)
    assert torch.allclose(ours, theirs.transpose(0, 1), rtol=0, atol=1e-12)
    ours = layer_norm(x, P, p + "ffn_norm", c)
    theirs = torch.nn.functional.layer_norm(x, (d,), P[p + "ffn_norm.gamma"],
                                            P[p + "ffn_norm.beta"], c["layer_norm_epsilon"])
    assert torch.allclose(ours, theirs, rtol=0, atol=1e-12)


def generate(name, case):
    c = case["config"]
    check_against_torch_modules(case)
    out = run_case(case, *tuning(case))
    if not accept(out, c):
        summarize(name, case["seed"], out, float("nan"), 1, float("nan"))
        sys.exit("%s: degenerate decoding outputs; pick other weights with --search" % name)
    loss, tokens, grads = gradients(case, out["params"])
    fd_error = finite_difference_check(case, out["params"], grads)
    summarize(name, case["seed"], out, loss, tokens, fd_error)
    return write_case(name, case, case["seed"], out, loss, tokens, grads)


def search(name, case, seeds):
    """Prints the (seed, sharpness, eos_step, eos_slope) choices that accept() takes."""
    for seed in seeds:
        for sharpness in (1.0, 1.5, 2.0, 3.0, 5.0):
            for eos_step in (4, 5, 6, 7):
                for eos_slope in (1.0, 2.0, 3.0, 5.0):
                    out = run_case(case, seed, sharpness, eos_step, eos_slope)
                    if accept(out, case["config"]):
                        print("%s: seed=%d, sharpness=%g, eos_step=%d, eos_slope=%g: greedy "
                              "lengths %s, margin %.3g" %
                              (name, seed, sharpness, eos_step, eos_slope,
                               [len(t) for t, _ in out["greedy"]], out["margin"]), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="recompute and compare with the committed files, write nothing")
    parser.add_argument("--out", default=GOLDEN_DIR, help="output folder")
    parser.add_argument("--search", metavar="CASE",
                        help="list weight choices with non-degenerate outputs for CASE")
    parser.add_argument("--seeds", default="0:20", help="seed range for --search (A:B)")
    args = parser.parse_args()
    if args.search:
        first, last = (int(x) for x in args.seeds.split(":"))
        search(args.search, CASES[args.search], range(first, last))
        return 0
    os.makedirs(args.out, exist_ok=True)
    status = 0
    for name, case in CASES.items():
        text = generate(name, case)
        path = os.path.join(args.out, name + ".txt")
        if args.check:
            with open(path) as f:
                same = f.read() == text
            print("%s: %s" % (path, "identical" if same else "DIFFERS"))
            status |= not same
        else:
            with open(path, "w") as f:
                f.write(text)
            print("wrote %s (%d bytes)" % (path, len(text)))
    return status


if __name__ == "__main__":
    sys.exit(main())
