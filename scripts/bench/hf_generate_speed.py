#!/usr/bin/env python3
"""Hugging Face transformers' MarianMTModel.generate beside xf-bench on the same weights (issue 43).

    hf_generate_speed.py --make-vocab --data DATA --vocab-dir DIR [--vocab 32000]
    hf_generate_speed.py --vocab-dir DIR --work DIR [--device cuda] [--xf-bin build/bin]
                         [--runs f16:32:4,f32:32:4,f16:1:1,f32:1:1] [--sentences 256]
                         [--length 24] [--shape 512,8,2048,6,6]

--make-vocab, once on a machine with the data (the GPU machine has none): SentencePiece models of
the source and target sides of DATA/train.tsv (unigram, --vocab pieces each) and the joint
vocab.json of an OPUS-MT directory, into DIR (about 2 MB: small enough to pack).

The run: a MarianMTModel of --shape (d_model, heads, d_ff, encoder and decoder layers; the
default is the paper's base, as OPUS-MT's) with random weights (seed 43) in OPUS-MT's layout
(shared embeddings scaled by sqrt(d_model), sinusoid positions, swish, a final logits bias),
saved to WORK/hf with DIR's vocabulary and imported by `xf-convert --from hf` (WORK/base.xfm):
the same weights in both engines. Sources: --sentences lines of random source ids, 8 to 20 each
(seed 43; xf-bench --ids reads them, EOS appended as by the HF tokenizer). Both engines make
exactly --length tokens a sentence (HF: min_new_tokens = max_new_tokens; xf:
--min-decoding-length and --max-decoding-length, loop guard off), so each does the same work
whatever random weights choose. Each run (dtype:batch:beam) is timed as xf-bench times itself:
requests of `batch` sentences in order after one warm-up request, the device synchronized before
each clock read, tokens/s over the generated tokens. Prints one JSON line per engine and run,
then a table of tokens/s and xf / transformers.
"""
import argparse
import json
import os
import random
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_decode_speed import device_used_mb, percentile, timed_requests  # noqa: E402


def make_vocab(data, out, size):
    import sentencepiece as spm

    os.makedirs(out, exist_ok=True)
    sides = {"source": [], "target": []}
    with open(os.path.join(data, "train.tsv"), encoding="utf-8") as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) >= 2 and parts[0] and parts[1]:
                sides["source"].append(parts[0])
                sides["target"].append(parts[1])
    pieces = ["</s>", "<unk>"]
    for side, lines in sides.items():
        text = os.path.join(out, side + ".txt")
        with open(text, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
        spm.SentencePieceTrainer.train(
            input=text, model_prefix=os.path.join(out, side), vocab_size=size, model_type="unigram",
            character_coverage=1.0, pad_id=-1, bos_id=-1, eos_id=0, unk_id=1, eos_piece="</s>",
            unk_piece="<unk>", num_threads=2, minloglevel=2)
        os.remove(text)
        os.remove(os.path.join(out, side + ".vocab"))
        os.replace(os.path.join(out, side + ".model"), os.path.join(out, side + ".spm"))
        sp = spm.SentencePieceProcessor(model_file=os.path.join(out, side + ".spm"))
        seen = set(pieces)
        for i in range(sp.get_piece_size()):
            piece = sp.id_to_piece(i)
            if piece not in seen:
                seen.add(piece)
                pieces.append(piece)
    pieces.append("<pad>")  # OPUS-MT's pad is the last id
    with open(os.path.join(out, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump({piece: i for i, piece in enumerate(pieces)}, f, ensure_ascii=False)
    print("%s: %d pieces" % (out, len(pieces)), file=sys.stderr)


def make_model(vocab_dir, work, shape):
    import shutil

    import torch
    from transformers import MarianConfig, MarianMTModel

    d, heads, d_ff, enc, dec = shape
    with open(os.path.join(vocab_dir, "vocab.json"), encoding="utf-8") as f:
        vocab = json.load(f)
    pad = vocab["<pad>"]
    hf = os.path.join(work, "hf")
    os.makedirs(hf, exist_ok=True)
    config = MarianConfig(
        vocab_size=len(vocab), d_model=d, encoder_layers=enc, decoder_layers=dec,
        encoder_attention_heads=heads, decoder_attention_heads=heads, encoder_ffn_dim=d_ff,
        decoder_ffn_dim=d_ff, activation_function="swish", max_position_embeddings=512,
        pad_token_id=pad, eos_token_id=0, decoder_start_token_id=pad, forced_eos_token_id=None,
        scale_embedding=True, share_encoder_decoder_embeddings=True, dropout=0.0,
        attention_dropout=0.0, activation_dropout=0.0)
    torch.manual_seed(43)
    model = MarianMTModel(config).eval()
    with torch.no_grad():
        model.final_logits_bias.copy_(torch.randn(1, len(vocab)) * 0.1)
    model.save_pretrained(hf, safe_serialization=True)
    for name in ("vocab.json", "source.spm", "target.spm"):
        shutil.copy(os.path.join(vocab_dir, name), os.path.join(hf, name))
    return model, pad


def sources(count, vocab_size, pad):
    rng = random.Random(43)
    return [[rng.randrange(2, pad) for _ in range(rng.randint(8, 20))] for _ in range(count)]


def time_hf(torch, model, lines, dtype, batch, beam, length, pad, cuda):
    """transformers' generate, timed as xf-bench times itself."""
    model = model.to(dtype=torch.float16 if dtype == "f16" else torch.float32)
    device = next(model.parameters()).device
    requests = [lines[i:i + batch] for i in range(0, len(lines), batch)]

    def generate(request):
        width = max(len(s) for s in request) + 1
        ids = torch.full((len(request), width), pad, dtype=torch.long)
        mask = torch.zeros((len(request), width), dtype=torch.long)
        for i, s in enumerate(request):
            ids[i, :len(s) + 1] = torch.tensor(s + [0])  # EOS (id 0) ends each source
            mask[i, :len(s) + 1] = 1
        out = model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), num_beams=beam,
                             do_sample=False, min_new_tokens=length, max_new_tokens=length,
                             bad_words_ids=[[pad]], num_return_sequences=1)
        return out

    timed, seconds = timed_requests(torch, requests, generate, cuda)
    latencies = [request_seconds * 1e3 for _, request_seconds in timed]
    tokens = sum(int(((out != pad) & (out != 0)).sum()) for out, _ in timed)
    return {"tokens_per_s": tokens / seconds, "sentences_per_s": len(lines) / seconds,
            "latency_p50_ms": percentile(latencies, 0.5), "latency_p90_ms": percentile(latencies, 0.9),
            "device_peak_mb": torch.cuda.max_memory_allocated() / 2**20 if cuda else 0.0,
            "device_used_mb": device_used_mb(torch) if cuda else 0.0,
            "tokens": tokens, "seconds": seconds, "sentences": len(lines)}


def time_xf(xf_bin, model_file, ids_file, device, dtype, batch, beam, length):
    command = [os.path.join(xf_bin, "xf-bench"), "--model", model_file, "--input", ids_file, "--ids",
               "--device", device, "--dtype", dtype, "--max-batch", str(batch), "--beam", str(beam),
               "--min-decoding-length", str(length), "--max-decoding-length", str(length),
               "--disable-loop-guard", "--json"]
    done = subprocess.run(command, check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--make-vocab", action="store_true")
    p.add_argument("--data", help="folder with train.tsv (--make-vocab)")
    p.add_argument("--vocab", type=int, default=32000, help="pieces of each side's SentencePiece model")
    p.add_argument("--vocab-dir", required=True)
    p.add_argument("--work", help="run folder (the HF model, base.xfm, the ids)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--xf-bin", default=os.path.join(os.path.dirname(__file__), "..", "..", "build", "bin"))
    p.add_argument("--runs", default="f16:32:4,f32:32:4,f16:1:1,f32:1:1", help="dtype:batch:beam,...")
    p.add_argument("--sentences", type=int, default=256)
    p.add_argument("--length", type=int, default=24, help="tokens generated per sentence")
    p.add_argument("--shape", default="512,8,2048,6,6", help="d_model,heads,d_ff,encoder,decoder layers")
    a = p.parse_args()
    if a.make_vocab:
        if not a.data:
            p.error("--make-vocab needs --data")
        return make_vocab(a.data, a.vocab_dir, a.vocab)
    if not a.work:
        p.error("--work is required")
    import torch

    cuda = a.device == "cuda"
    os.makedirs(a.work, exist_ok=True)
    model, pad = make_model(a.vocab_dir, a.work, [int(v) for v in a.shape.split(",")])
    model_file = os.path.join(a.work, "base.xfm")
    subprocess.run([os.path.join(a.xf_bin, "xf-convert"), "--from", "hf", os.path.join(a.work, "hf"), "-o",
                    model_file], check=True, stdout=subprocess.DEVNULL)
    lines = sources(a.sentences, model.config.vocab_size, pad)
    ids_file = os.path.join(a.work, "sources.ids")
    with open(ids_file, "w") as f:
        f.writelines(" ".join(map(str, s)) + "\n" for s in lines)
    if cuda:
        model = model.to("cuda")
    rows = []
    for run in a.runs.split(","):
        dtype, batch, beam = run.split(":")
        batch, beam = int(batch), int(beam)
        hf = time_hf(torch, model, lines, dtype, batch, beam, a.length, pad, cuda)
        xf = time_xf(a.xf_bin, model_file, ids_file, a.device, dtype, batch, beam, a.length)
        for tool, report in (("transformers", hf), ("xf", xf)):
            print(json.dumps({**report, "tool": tool, "dtype": dtype, "batch": batch, "beam": beam}), flush=True)
        rows.append((dtype, batch, beam, xf["tokens_per_s"], hf["tokens_per_s"]))
    print("| dtype | batch | beam | xf tokens/s | transformers tokens/s | xf / transformers |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for dtype, batch, beam, xf_rate, hf_rate in rows:
        print("| %s | %d | %d | %.0f | %.0f | %.2f |" % (dtype, batch, beam, xf_rate, hf_rate, xf_rate / hf_rate))


if __name__ == "__main__":
    main()
