#!/usr/bin/env python3
"""xf's Transformer decoding in PyTorch with a K/V cache: the anchor of xf-bench on a GPU (issue 30).

    pytorch_decode_speed.py --model M.xfm --ids SOURCES.ids [--device cuda]
                            [--runs f16:1:1:100,f16:32:4,f32:128:1] [--out-dir DIR]
    pytorch_decode_speed.py --model M.xfm --encode FILE > SOURCES.ids

The model file's weights (int8 widened to f32, then cast to --dtype) run the model of
tests/reference/README.md as a PyTorch user would write it for inference: embeddings times
sqrt(d_model) plus interleaved sinusoids, post- or pre-norm layers by the file's config, fused
QKV and K|V products, torch.nn.functional.scaled_dot_product_attention, a self-attention K/V
cache written in place per step, cross-attention K/V computed once per batch, logits in f32
(f16 products write f16 and are widened, as xf's f32 logits are made from f16 inputs). The
input is xf-bench's --ids file (space-separated source ids, EOS appended here as xf does).

Search: greedy as xf's (BOS first; a sentence ends at EOS or after max_len_a * source tokens
(with EOS) + max_len_b tokens, the defaults 1 and 50; finished rows keep decoding until the
batch is done, as in Hugging Face's generate). Beam: the usual batched beam search (2k
candidates, an EOS candidate among the first k finishes a hypothesis with the GNMT length
penalty, a sentence stops at k finished hypotheses or its length limit; the cache reordered by
index_select). Beam is for timing; greedy outputs are compared with xf's token by token.

Timed as xf-bench times: requests of --batch sentences in file order after one warm-up request,
torch.cuda.synchronize() before each clock read; tokens/s counts the best hypotheses' tokens
without EOS; the per-request latency and, per request, the latency over its decoder steps. One
JSON line a run; device memory both as torch.cuda.max_memory_allocated() (the peak of tensors) and
as cudaMemGetInfo's use after the run (context and allocator reserve included: xf-bench's basis).
--encode writes the source ids (SentencePiece of the model file, no EOS) of a text file's distinct
lines in order (first column of a .tsv).
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import xfm  # noqa: E402


def percentile(values, p):
    values = sorted(values)
    rank = p * (len(values) - 1)
    low = int(rank)
    high = min(low + 1, len(values) - 1)
    return values[low] + (values[high] - values[low]) * (rank - low)


def sinusoids(torch, positions, d):
    position = torch.arange(positions, dtype=torch.float64)[:, None]
    two_j = torch.arange(0, d, 2, dtype=torch.float64)[None, :]
    angle = position / torch.pow(torch.tensor(10000.0, dtype=torch.float64), two_j / d)
    pe = torch.zeros(positions, d, dtype=torch.float64)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(angle), torch.cos(angle)
    return pe


class Decoder:
    """The model of one .xfm file on one device and dtype, with greedy and beam search."""

    def __init__(self, torch, model, device, dtype):
        self.torch, self.F = torch, torch.nn.functional
        c = self.c = model.config
        self.device, self.dtype = device, dtype
        self.d, self.h = c["d_model"], c["num_heads"]
        self.dh = self.d // self.h
        self.pre_norm = c["norm_position"] == 1
        self.eps = c["layer_norm_epsilon"]
        self.w = {name: torch.from_numpy(np.ascontiguousarray(t.to_float32())).to(device, dtype)
                  for name, t in model.tensors.items()}
        self.source_embedding = self.w[xfm.source_embedding_name(c)]
        self.target_embedding = self.w[xfm.target_embedding_name(c)]
        self.output = self.w[xfm.output_projection_name(c)]
        self.output_bias = self.w.get("output.bias")
        self.pe = sinusoids(torch, c["max_positions"], self.d).to(device, dtype)
        self.scale = math.sqrt(self.d)

    # -- layers ------------------------------------------------------------------------------
    def linear(self, x, name):
        return self.F.linear(x, self.w[name + ".weight"], self.w[name + ".bias"])

    def norm(self, x, name):
        return self.F.layer_norm(x, (self.d,), self.w[name + ".gamma"], self.w[name + ".beta"],
                                 self.eps)

    def heads(self, x):  # [N, T, d] -> [N, h, T, dh]
        return x.view(x.shape[0], x.shape[1], self.h, self.dh).transpose(1, 2)

    def merge(self, x):  # [N, h, T, dh] -> [N, T, d]
        return x.transpose(1, 2).reshape(x.shape[0], x.shape[2], self.d)

    def sublayer(self, x, name, fn):
        if self.pre_norm:
            return x + fn(self.norm(x, name))
        return self.norm(x + fn(x), name)

    def ffn(self, x, p):
        return self.linear(self.F.relu(self.linear(x, p + "ffn.inner")), p + "ffn.outer")

    # -- encoder -----------------------------------------------------------------------------
    def encode(self, source, mask):
        """source [N, S] ids (PAD after EOS), mask [N, 1, 1, S] True where a key is real."""
        x = self.source_embedding[source] * self.scale + self.pe[:source.shape[1]]
        for i in range(self.c["encoder_layers"]):
            p = "encoder.layers.%d." % i

            def attention(y):
                q, k, v = self.linear(y, p + "self_attention.qkv").chunk(3, dim=-1)
                out = self.F.scaled_dot_product_attention(self.heads(q), self.heads(k),
                                                          self.heads(v), attn_mask=mask)
                return self.linear(self.merge(out), p + "self_attention.output")

            x = self.sublayer(x, p + "self_attention_norm", attention)
            x = self.sublayer(x, p + "ffn_norm", lambda y: self.ffn(y, p))
        if self.pre_norm:
            x = self.norm(x, "encoder.final_norm")
        return x

    def cross_keys_values(self, memory):
        kv = []
        for i in range(self.c["decoder_layers"]):
            k, v = self.linear(memory, "decoder.layers.%d.cross_attention.key_value" % i).chunk(2, -1)
            kv.append((self.heads(k), self.heads(v)))
        return kv

    # -- one decoder step with the cache -----------------------------------------------------
    def step(self, tokens, t, cache_k, cache_v, cross, mask):
        """tokens [N]; writes position t of the caches [layers, N, h, T, dh]; f32 logits [N, V]."""
        x = (self.target_embedding[tokens] * self.scale + self.pe[t])[:, None, :]
        for i in range(self.c["decoder_layers"]):
            p = "decoder.layers.%d." % i

            def self_attention(y):
                q, k, v = self.linear(y, p + "self_attention.qkv").chunk(3, dim=-1)
                cache_k[i][:, :, t:t + 1] = self.heads(k)
                cache_v[i][:, :, t:t + 1] = self.heads(v)
                out = self.F.scaled_dot_product_attention(
                    self.heads(q), cache_k[i][:, :, :t + 1], cache_v[i][:, :, :t + 1])
                return self.linear(self.merge(out), p + "self_attention.output")

            def cross_attention(y):
                q = self.heads(self.linear(y, p + "cross_attention.query"))
                out = self.F.scaled_dot_product_attention(q, cross[i][0], cross[i][1], attn_mask=mask)
                return self.linear(self.merge(out), p + "cross_attention.output")

            x = self.sublayer(x, p + "self_attention_norm", self_attention)
            x = self.sublayer(x, p + "cross_attention_norm", cross_attention)
            x = self.sublayer(x, p + "ffn_norm", lambda y: self.ffn(y, p))
        if self.pre_norm:
            x = self.norm(x, "decoder.final_norm")
        logits = self.F.linear(x[:, 0], self.output, self.output_bias)
        return logits.float()

    # -- search ------------------------------------------------------------------------------
    def prepare(self, sources):
        torch, c = self.torch, self.c
        with_eos = [s + [c["eos_id"]] for s in sources]
        width = max(len(s) for s in with_eos)
        source = torch.full((len(sources), width), c["pad_id"], dtype=torch.long)
        for b, s in enumerate(with_eos):
            source[b, :len(s)] = torch.tensor(s)
        lengths = torch.tensor([len(s) for s in with_eos])
        max_len = [max(1, min(int(math.floor(1.0 * len(s) + 50)), c["max_positions"]))
                   for s in with_eos]
        source = source.to(self.device)
        mask = (torch.arange(width)[None, :] < lengths[:, None]).to(self.device)[:, None, None, :]
        return source, mask, max_len

    def caches(self, rows, steps):
        shape = (self.c["decoder_layers"], rows, self.h, steps, self.dh)
        return (self.torch.empty(shape, device=self.device, dtype=self.dtype),
                self.torch.empty(shape, device=self.device, dtype=self.dtype))

    def greedy(self, sources):
        torch, c = self.torch, self.c
        source, mask, max_len = self.prepare(sources)
        n = len(sources)
        cross = self.cross_keys_values(self.encode(source, mask))
        steps = max(max_len)
        cache_k, cache_v = self.caches(n, steps)
        limit = torch.tensor(max_len, device=self.device)
        tokens = torch.full((n,), c["bos_id"], dtype=torch.long, device=self.device)
        done = torch.zeros(n, dtype=torch.bool, device=self.device)
        out = torch.full((n, steps), c["eos_id"], dtype=torch.long, device=self.device)
        for t in range(steps):
            logits = self.step(tokens, t, cache_k, cache_v, cross, mask)
            tokens = torch.where(done, c["eos_id"], logits.argmax(-1))
            out[:, t] = tokens
            done = done | (tokens == c["eos_id"]) | (t + 1 >= limit)
            if bool(done.all()):  # one synchronisation a step, as generate() does
                break
        result = []
        for row, limit_s in zip(out.tolist(), max_len):
            ids = row[:limit_s]
            result.append(ids[:ids.index(c["eos_id"])] if c["eos_id"] in ids else ids)
        return result

    def beam(self, sources, k, length_penalty=0.6):
        torch, F, c = self.torch, self.F, self.c
        source, mask, max_len = self.prepare(sources)
        n = len(sources)
        memory = self.encode(source, mask).repeat_interleave(k, dim=0)
        mask = mask.repeat_interleave(k, dim=0)
        cross = self.cross_keys_values(memory)
        steps = max(max_len)
        cache_k, cache_v = self.caches(n * k, steps)
        tokens = torch.full((n * k,), c["bos_id"], dtype=torch.long, device=self.device)
        scores = torch.zeros(n, k, device=self.device)
        scores[:, 1:] = -math.inf  # the first step expands one hypothesis per sentence
        history = torch.zeros(n * k, 0, dtype=torch.long, device=self.device)
        finished = [[] for _ in range(n)]  # (penalised score, ids)
        active = [True] * n
        base = (torch.arange(n, device=self.device) * k)[:, None]
        for t in range(steps):
            logits = self.step(tokens, t, cache_k, cache_v, cross, mask)
            vocab = logits.shape[-1]
            total = (scores[:, :, None] + F.log_softmax(logits, -1).view(n, k, vocab)).view(n, -1)
            best, index = total.topk(2 * k, dim=-1)
            parent, token = index // vocab, index % vocab
            best_l, parent_l, token_l = best.tolist(), parent.tolist(), token.tolist()
            hist = history.tolist()
            keep_parent, keep_token, keep_score = [], [], []
            for s in range(n):
                chosen = []
                for j in range(2 * k):
                    if len(chosen) == k:
                        break
                    if not active[s] or best_l[s][j] == -math.inf:
                        continue
                    row = s * k + parent_l[s][j]
                    if token_l[s][j] == c["eos_id"] or t + 1 >= max_len[s]:
                        ids = hist[row] + ([] if token_l[s][j] == c["eos_id"] else [token_l[s][j]])
                        if j < k:
                            finished[s].append((best_l[s][j] / ((5 + len(ids) + 1) / 6) ** length_penalty, ids))
                        continue
                    chosen.append(j)
                if active[s] and (len(finished[s]) >= k or t + 1 >= max_len[s] or not chosen):
                    active[s] = False
                while len(chosen) < k:  # inactive sentences and short beams: padding rows
                    chosen.append(chosen[-1] if chosen else 0)
                keep_parent.append([parent_l[s][j] for j in chosen])
                keep_token.append([token_l[s][j] for j in chosen])
                keep_score.append([best_l[s][j] if active[s] else -math.inf for j in chosen])
            if not any(active):
                break
            rows = (base + torch.tensor(keep_parent, device=self.device)).view(-1)
            tokens = torch.tensor(keep_token, device=self.device).view(-1)
            scores = torch.tensor(keep_score, device=self.device)
            cache_k[:, :, :, :t + 1] = cache_k[:, rows, :, :t + 1]
            cache_v[:, :, :, :t + 1] = cache_v[:, rows, :, :t + 1]
            history = torch.cat([history[rows], tokens[:, None]], dim=1)
        return [max(f)[1] if f else [] for f in finished]


def device_used_mb(torch):
    """Device memory in use as cudaMemGetInfo says (the CUDA context and the caching allocator's
    reserve included): the basis of xf-bench's device figure."""
    free, total = torch.cuda.mem_get_info()
    return (total - free) / 2**20


def timed_requests(torch, requests, translate, cuda):
    """Runs translate(request) for each request, after one warm-up request (kernels chosen, the
    caching allocator filled), the device synchronized before each clock read, as xf-bench times
    itself; returns ([(result, seconds) per request], total seconds)."""
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    timed = []
    with torch.inference_mode():
        translate(requests[0])
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        sync()
        start = time.perf_counter()
        for request in requests:
            t0 = time.perf_counter()
            result = translate(request)
            sync()
            timed.append((result, time.perf_counter() - t0))
        return timed, time.perf_counter() - start


def run(torch, decoder, sources, batch, beam, cuda):
    """Times one configuration as xf-bench does; returns (report, outputs)."""
    translate = (lambda b: decoder.greedy(b)) if beam == 1 else (lambda b: decoder.beam(b, beam))
    requests = [sources[i:i + batch] for i in range(0, len(sources), batch)]
    timed, seconds = timed_requests(torch, requests, translate, cuda)
    outputs, latencies, per_step = [], [], []
    for result, request_seconds in timed:
        latencies.append(request_seconds * 1e3)
        steps = max(len(r) for r in result) + 1  # the request's decoder steps, EOS included
        per_step.append(request_seconds * 1e3 / steps)
        outputs.extend(result)
    tokens = sum(len(o) for o in outputs)
    report = {
        "tokens_per_s": tokens / seconds, "sentences_per_s": len(sources) / seconds,
        "latency_p50_ms": percentile(latencies, 0.5), "latency_p90_ms": percentile(latencies, 0.9),
        "ms_per_step_p50": percentile(per_step, 0.5), "ms_per_step_p90": percentile(per_step, 0.9),
        "device_peak_mb": torch.cuda.max_memory_allocated() / 2**20 if cuda else 0.0,
        "device_used_mb": device_used_mb(torch) if cuda else 0.0,
        "sentences": len(sources), "tokens": tokens, "seconds": seconds, "batch": batch,
        "beam": beam}
    return report, outputs


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--ids", help="xf-bench --ids input: space-separated source ids a line")
    p.add_argument("--encode", help="write the source ids of this text file (or .tsv) and exit")
    p.add_argument("--device", default="cuda")
    p.add_argument("--runs", default="f16:1:1",
                   help="comma-separated DTYPE:BATCH:BEAM[:SENTENCES] (f16 or f32; SENTENCES: "
                        "the first N of --ids, default all), each timed in this process")
    p.add_argument("--sdpa", choices=["default", "no-cudnn"], default="default",
                   help="no-cudnn: torch.backends.cuda.enable_cudnn_sdp(False); PyTorch 2.11 picks "
                        "cuDNN's attention for f16 by default, which plans anew for every length "
                        "of the cache (18 ms a step at batch 1 on an H200, 2026-11-26)")
    p.add_argument("--out-dir", help="write each run's best hypotheses (ids, a line a sentence) "
                                     "to DTYPE_bBATCH_kBEAM.ids here")
    args = p.parse_args()

    model = xfm.read_xfm(args.model)
    if args.encode:
        import sentencepiece as spm
        sp = spm.SentencePieceProcessor(model_proto=model.source_tokenizer)
        with open(args.encode, encoding="utf-8") as f:
            lines = [line.rstrip("\n").split("\t")[0] for line in f]
        distinct = list(dict.fromkeys(lines))  # test.tsv repeats a source per reference
        for line in distinct:
            print(" ".join(map(str, sp.encode(line))))
        return

    import torch
    torch.backends.cuda.matmul.allow_tf32 = False  # xf's f32 products use no TF32
    torch.backends.cudnn.allow_tf32 = False
    cuda = args.device.startswith("cuda")
    if args.sdpa == "no-cudnn" and cuda:
        torch.backends.cuda.enable_cudnn_sdp(False)
    with open(args.ids) as f:
        sources = [[int(x) for x in line.split()] for line in f if line.strip()]
    decoders = {}
    for spec in args.runs.split(","):
        fields = spec.split(":")
        dtype, batch, beam = fields[0], int(fields[1]), int(fields[2])
        count = int(fields[3]) if len(fields) > 3 else len(sources)
        if dtype not in decoders:
            decoders.clear()  # one model on the device at a time
            decoders[dtype] = Decoder(torch, model, args.device,
                                      {"f16": torch.float16, "f32": torch.float32}[dtype])
        report, outputs = run(torch, decoders[dtype], sources[:count], batch, beam, cuda)
        report.update({"dtype": dtype, "sdpa": args.sdpa, "torch": torch.__version__,
                       "device": torch.cuda.get_device_name() if cuda else "cpu"})
        if args.out_dir:
            with open(os.path.join(args.out_dir, "%s_b%d_k%d.ids" % (dtype, batch, beam)), "w") as f:
                for o in outputs:
                    f.write(" ".join(map(str, o)) + "\n")
        print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
