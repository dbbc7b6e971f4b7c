#!/usr/bin/python3
"""PyTorch baseline for xf_train_step_bench: the same model, batch shape and thread count.

Post-norm Transformer (torch.nn.Transformer), shared embeddings tied to the output projection,
dropout 0.1, label smoothing 0.1, Adam (0.9, 0.98, 1e-9). Random batches drawn like the C++
benchmark (lengths between 3/4 of --length and --length - 1, plus EOS/BOS).
Run by hand with Debian's Python: /usr/bin/python3 trainer/bench/torch_train_step.py --threads 2
"""
import argparse
import math
import time

import torch


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--length", type=int, default=32)
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--d-ff", type=int, default=1024)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--vocab", type=int, default=8000)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(5)
    d = a.d_model
    embedding = torch.nn.Embedding(a.vocab, d)
    transformer = torch.nn.Transformer(d, a.heads, a.layers, a.layers, a.d_ff, 0.1,
                                       batch_first=True)
    params = list(embedding.parameters()) + list(transformer.parameters())
    adam = torch.optim.Adam(params, lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    dropout = torch.nn.Dropout(0.1)

    def positions(length):
        pos = torch.arange(length, dtype=torch.float32)[:, None]
        i = torch.arange(0, d, 2, dtype=torch.float32)
        angle = pos / torch.pow(10000.0, i / d)
        pe = torch.zeros(length, d)
        pe[:, 0::2] = torch.sin(angle)
        pe[:, 1::2] = torch.cos(angle)
        return pe

    lengths_src = torch.randint(a.length * 3 // 4, a.length, (a.batch,)) + 1
    lengths_tgt = torch.randint(a.length * 3 // 4, a.length, (a.batch,)) + 1
    S, T = int(lengths_src.max()), int(lengths_tgt.max())
    src = torch.randint(4, a.vocab, (a.batch, S))
    tgt_in = torch.randint(4, a.vocab, (a.batch, T))
    tgt_out = torch.randint(4, a.vocab, (a.batch, T))
    src_pad = torch.arange(S)[None, :] >= lengths_src[:, None]
    tgt_pad = torch.arange(T)[None, :] >= lengths_tgt[:, None]
    tgt_out[tgt_pad] = 0
    causal = transformer.generate_square_subsequent_mask(T)
    pe_s, pe_t = positions(S), positions(T)
    tokens = int(lengths_tgt.sum())
    print(f"batch {a.batch} x ({S}, {T}), {int(lengths_src.sum())} source + {tokens} target "
          f"tokens; {a.threads} threads")
    total = total_cpu = 0.0
    for step in range(a.steps + 1):
        start = time.perf_counter()
        cpu_start = time.process_time()
        adam.zero_grad()
        x = dropout(embedding(src) * math.sqrt(d) + pe_s)
        y = dropout(embedding(tgt_in) * math.sqrt(d) + pe_t)
        h = transformer(x, y, tgt_mask=causal, src_key_padding_mask=src_pad,
                        tgt_key_padding_mask=tgt_pad, memory_key_padding_mask=src_pad)
        logits = h @ embedding.weight.t()
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, a.vocab), tgt_out.reshape(-1),
                                                 ignore_index=0, label_smoothing=0.1,
                                                 reduction="sum")
        (loss / tokens).backward()
        adam.step()
        seconds = time.perf_counter() - start
        cpu_seconds = time.process_time() - cpu_start
        if step > 0:
            total += seconds
            total_cpu += cpu_seconds
        print(f"step {step}: {seconds:.3f} s (cpu {cpu_seconds:.3f} s), "
              f"loss {loss.item() / tokens:.4f}")
    per_step = total / a.steps
    print(f"seconds/step {per_step:.4f}  target tokens/s {tokens / per_step:.0f}  "
          f"cpu seconds/step {total_cpu / a.steps:.4f}")


if __name__ == "__main__":
    main()
