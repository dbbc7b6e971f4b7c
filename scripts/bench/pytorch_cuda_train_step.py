#!/usr/bin/env python3
"""Training-step speed of xf's Transformer in PyTorch on a GPU: the anchor of
xf_cuda_train_step_bench (issue 30).

    pytorch_cuda_train_step.py [--precision f16|bf16|f32] [--steps 10] [--warmup-steps 3]
                               [--batch 200] [--length 32] [--d-model 512] [--layers 6]
                               [--d-ff 2048] [--heads 8] [--vocab 8000] [--fused-adam 1]
    pytorch_cuda_train_step.py --flops SOURCE_TOKENS TARGET_TOKENS SOURCE_LEN TARGET_LEN [...]

The model is pytorch_train_speed.py's (torch.nn's Transformer layers arranged as xf's model,
post-norm, one embedding table tied to the output; checked there against xf's golden
reference), on the shapes of xf_cuda_train_step_bench (trainer/bench/step_bench.h): --batch
random pairs whose source and target lengths are drawn from [3/4 --length, --length - 1], random
ids, source + EOS and BOS + target, dropout 0.1, label smoothing 0.1. A step is what xf's is:
forward, loss (sum over non-PAD targets over their count), backward, Adam. f16 runs under
torch.autocast with a GradScaler (xf's mixed f16 keeps f32 master weights and scales the loss
too), bf16 under autocast without one, f32 with TF32 off (xf's f32 uses none); Adam is
torch.optim.Adam(fused=True) unless --fused-adam 0.

Prints one JSON line: seconds/step (mean of the timed steps, each ended by
torch.cuda.synchronize()), target and source+target tokens/s (EOS/BOS included, as xf's bench
counts), the model FLOPs of a step and the achieved TFLOP/s. Model FLOPs: 3 x the forward's
matrix products (2 per multiply-add: Q/K/V/output, FFN, cross-attention, output projection over
every real token; attention scores and values over the padded lengths), the same formula that
--flops applies to xf's batch so that both are counted alike.
"""
import argparse
import json
import os
import sys
import time
import types

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def step_flops(a, source_tokens, target_tokens, source_len, target_len, batch):
    d, ff, L, V = a.d_model, a.d_ff, a.layers, a.vocab
    enc = source_tokens * L * (2 * 4 * d * d + 2 * 2 * d * ff) + batch * L * 2 * 2 * source_len ** 2 * d
    dec = target_tokens * L * (2 * 4 * d * d + 2 * 2 * d * d + 2 * 2 * d * ff)  # self, cross q/out, FFN
    dec += source_tokens * L * 2 * 2 * d * d                                       # cross K|V
    dec += batch * L * 2 * 2 * (target_len ** 2 + target_len * source_len) * d    # attention
    logits = target_tokens * 2 * d * V
    return 3 * (enc + dec + logits)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--precision", choices=["f16", "bf16", "f32"], default="f16")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup-steps", type=int, default=3)
    p.add_argument("--batch", type=int, default=200)
    p.add_argument("--length", type=int, default=32)
    p.add_argument("--d-model", type=int, default=512)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--d-ff", type=int, default=2048)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--vocab", type=int, default=8000)
    p.add_argument("--fused-adam", type=int, default=1)
    p.add_argument("--device", default="cuda")
    p.add_argument("--flops", type=int, nargs=4, metavar=("S_TOKENS", "T_TOKENS", "S_LEN", "T_LEN"),
                   help="print the model FLOPs of a step of this batch (xf's) and exit")
    a = p.parse_args()
    if a.flops:
        print(step_flops(a, *a.flops, a.batch))
        return

    import torch
    from pytorch_train_speed import build_model
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(1)
    cuda = a.device.startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    args = types.SimpleNamespace(d_model=a.d_model, heads=a.heads, d_ff=a.d_ff, layers=a.layers,
                                 dropout=0.1, max_positions=1024, norm="post")
    model = build_model(torch, args, a.vocab).to(a.device)
    model.train()

    rng = np.random.default_rng(5)
    lengths = rng.integers(a.length * 3 // 4, a.length, size=(a.batch, 2))
    S, T = int(lengths[:, 0].max()) + 1, int(lengths[:, 1].max()) + 1
    source = np.zeros((a.batch, S), np.int64)
    target_in = np.zeros((a.batch, T), np.int64)
    target_out = np.zeros((a.batch, T), np.int64)
    for b, (ls, lt) in enumerate(lengths):
        source[b, :ls] = rng.integers(4, a.vocab, ls)
        source[b, ls] = 3
        tokens = rng.integers(4, a.vocab, lt)
        target_in[b, 0], target_in[b, 1:lt + 1] = 2, tokens
        target_out[b, :lt], target_out[b, lt] = tokens, 3
    source_tokens, target_tokens = int((lengths[:, 0] + 1).sum()), int((lengths[:, 1] + 1).sum())
    source, target_in, target_out = (torch.tensor(x, device=a.device)
                                     for x in (source, target_in, target_out))

    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9,
                                 fused=bool(a.fused_adam) and cuda)
    scaler = torch.amp.GradScaler("cuda", enabled=cuda and a.precision == "f16")
    autocast_dtype = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}[a.precision]

    def step():
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cuda" if cuda else "cpu", dtype=autocast_dtype,
                            enabled=a.precision != "f32"):
            logits = model(source, target_in)
        loss = torch.nn.functional.cross_entropy(
            logits.float().reshape(-1, a.vocab), target_out.reshape(-1), ignore_index=0,
            label_smoothing=0.1, reduction="sum") / target_tokens
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        return loss

    for _ in range(a.warmup_steps):
        step()
    sync()
    times = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        loss = step()
        sync()
        times.append(time.perf_counter() - t0)
    per_step = sum(times) / len(times)
    flops = step_flops(a, source_tokens, target_tokens, S, T, a.batch)
    print(json.dumps({
        "precision": a.precision, "seconds_per_step": per_step,
        "target_tokens_per_s": target_tokens / per_step,
        "tokens_per_s": (source_tokens + target_tokens) / per_step,
        "model_flops_per_step": flops, "tflops": flops / per_step / 1e12,
        "loss": float(loss.detach()), "source_tokens": source_tokens, "target_tokens": target_tokens,
        "source_len": S, "target_len": T, "parameters": sum(p.numel() for p in model.parameters()),
        "fused_adam": bool(a.fused_adam) and cuda, "torch": torch.__version__,
        "device": torch.cuda.get_device_name() if cuda else "cpu"}))


if __name__ == "__main__":
    main()
