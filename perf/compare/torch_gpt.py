#!/usr/bin/python3
"""torch_gpt.py: hetcomm-train's model and training step in PyTorch (CPU, fp32), for perf/compare/run-train.sh.

The same GPT-2-style decoder as trainer/model.cc: token embedding wte [V,C] + learned positions wpe [T,C];
n_layer pre-LayerNorm blocks  x += attn.proj(causal_mha(ln_1(x)))  (one fused qkv Linear(C,3C), bias) and
x += mlp.proj(gelu_tanh(mlp.fc(ln_2(x))))  (Linear(C,4C), Linear(4C,C)); ln_f (eps 1e-5); LM head tied to wte
(logits = x @ wte^T, no bias); cross-entropy, mean over the B*T positions. GPT-2's initialisation (N(0, 0.02),
the residual projections N(0, 0.02/sqrt(2L)), biases 0, LayerNorm scales 1).

One optimizer step per micro-batch (no accumulation): forward, backward, clip by global norm 1.0, AdamW
(lr 6e-4, betas (0.9, 0.95), eps 1e-8, weight decay 0.1 on the 2-D weights: matrices and embeddings), and
zero_grad -- what hetcomm-train's step does for global_batch = micro_batch on one rank.

Data: byte-level tokens of the fortunes corpus as hetcomm-train reads it (the regular files of
/usr/share/games/fortunes, no .dat, no .u8, no symlinks, sorted, joined with '\\n'), its train split (the first
90%), random windows of seq_len+1 tokens. Every batch is drawn before the timed loop; only the step is timed.

Prints per-phase medians and one machine-readable line:
  RESULT torch tokens_per_s=... tokens_per_s_mean=... step_ms=... compute_ms=... opt_ms=... threads=K
         attention=sdpa|explicit torch=VERSION
tokens_per_s is the median over the timed steps of B*T / step time; compute_ms = forward + backward (hetcomm's
compute_ms), opt_ms = clip + AdamW + zero_grad.
"""
import argparse
import math
import os
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

FORTUNES = "/usr/share/games/fortunes"
HAVE_SDPA = hasattr(F, "scaled_dot_product_attention")


def corpus_tokens(directory=FORTUNES, val_fraction=0.1):
    files = []
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if os.path.islink(path) or not os.path.isfile(path) or name.endswith((".dat", ".u8")):
            continue
        files.append(path)
    if not files:
        sys.exit(f"torch_gpt: no text files in {directory} (apt-get install fortunes)")
    data = b"\n".join(open(p, "rb").read() for p in files)
    train = len(data) - int(len(data) * val_fraction)
    return torch.frombuffer(bytearray(data[:train]), dtype=torch.uint8).long(), len(files)


class Block(nn.Module):
    def __init__(self, C, n_head, T, attention):
        super().__init__()
        self.n_head, self.attention = n_head, attention
        self.ln_1 = nn.LayerNorm(C, eps=1e-5)
        self.qkv = nn.Linear(C, 3 * C)
        self.attn_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C, eps=1e-5)
        self.fc = nn.Linear(C, 4 * C)
        self.mlp_proj = nn.Linear(4 * C, C)
        if attention == "explicit":
            self.register_buffer("mask", torch.tril(torch.ones(T, T, dtype=torch.bool)).view(1, 1, T, T),
                                 persistent=False)

    def attn(self, x):
        B, T, C = x.shape
        hs = C // self.n_head
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, hs).transpose(1, 2) for t in (q, k, v))  # [B, NH, T, hs]
        if self.attention == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
            att = att.masked_fill(~self.mask[:, :, :T, :T], float("-inf"))
            y = F.softmax(att, dim=-1) @ v
        return self.attn_proj(y.transpose(1, 2).contiguous().view(B, T, C))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp_proj(F.gelu(self.fc(self.ln_2(x)), approximate="tanh"))


class Gpt(nn.Module):
    def __init__(self, V, T, C, n_layer, n_head, attention):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(T, C)
        self.h = nn.ModuleList(Block(C, n_head, T, attention) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(C, eps=1e-5)
        proj_std = 0.02 / math.sqrt(2 * n_layer)
        for name, p in self.named_parameters():
            if p.dim() == 1:
                nn.init.ones_(p) if name.endswith("weight") else nn.init.zeros_(p)  # LayerNorm scale / any bias
            else:
                nn.init.normal_(p, 0.0, proj_std if name.endswith("proj.weight") else 0.02)

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for block in self.h:
            x = block(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)  # tied head, no bias
        return F.cross_entropy(logits.view(B * T, -1), targets.view(B * T))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n-layer", type=int, default=4)
    ap.add_argument("--n-head", type=int, default=4)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--micro-batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=30, help="timed steps")
    ap.add_argument("--warmup-steps", type=int, default=3, help="untimed steps first")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--attention", choices=["auto", "sdpa", "explicit"], default="auto",
                    help="auto: F.scaled_dot_product_attention when this torch has it (2.0+), else explicit")
    ap.add_argument("--foreach", choices=["on", "off"], default="on",
                    help="AdamW's multi-tensor (foreach) implementation; on is the faster one on the CPU here")
    ap.add_argument("--seed", type=int, default=1337)
    a = ap.parse_args()
    if a.d_model % a.n_head:
        sys.exit("torch_gpt: d_model must be a multiple of n_head")
    attention = ("sdpa" if HAVE_SDPA else "explicit") if a.attention == "auto" else a.attention
    if attention == "sdpa" and not HAVE_SDPA:
        sys.exit(f"torch_gpt: torch {torch.__version__} has no F.scaled_dot_product_attention")

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    tokens, nfiles = corpus_tokens()
    B, T = a.micro_batch, a.seq_len
    model = Gpt(a.vocab, T, a.d_model, a.n_layer, a.n_head, attention)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95), eps=1e-8, foreach=a.foreach == "on")
    params = list(model.parameters())

    # Every batch before the clock starts: random windows of T+1 tokens.
    total = a.warmup_steps + a.steps
    gen = torch.Generator().manual_seed(a.seed)
    starts = torch.randint(0, len(tokens) - T - 1, (total, B), generator=gen)
    offsets = torch.arange(T + 1)
    windows = tokens[starts.unsqueeze(-1) + offsets]  # [steps, B, T+1]
    batches = [(w[:, :-1].contiguous(), w[:, 1:].contiguous()) for w in windows]

    step_s, compute_s, opt_s, losses = [], [], [], []
    for i, (x, y) in enumerate(batches):
        t0 = time.perf_counter()
        loss = model(x, y)
        loss.backward()
        t1 = time.perf_counter()
        norm = torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        t2 = time.perf_counter()
        losses.append(loss.item())
        if i >= a.warmup_steps:
            step_s.append(t2 - t0), compute_s.append(t1 - t0), opt_s.append(t2 - t1)
    del norm

    tps = [B * T / s for s in step_s]
    med = statistics.median
    n_params = sum(p.numel() for p in params)
    C, L, V = a.d_model, a.n_layer, a.vocab
    flops_per_token = 6 * (L * 12 * C * C + V * C) + 6 * L * 2 * T * C  # hetcomm-train's Gpt::flopsPerToken
    print(f"torch {torch.__version__}: {L} layers, {a.n_head} heads, d_model {C}, seq_len {T}, vocab {V}, "
          f"{n_params} parameters; batch {B}x{T}; {a.threads} thread(s) (torch.get_num_threads() = "
          f"{torch.get_num_threads()}, OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', '')}, "
          f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '')}, "
          f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '')}); attention {attention}; "
          f"AdamW foreach {a.foreach}; corpus {nfiles} files, {len(tokens)} train tokens")
    print(f"loss: first {losses[0]:.4f}, last {losses[-1]:.4f} after {total} steps ({a.warmup_steps} untimed)")
    print(f"median step {med(step_s) * 1e3:.1f} ms = forward+backward {med(compute_s) * 1e3:.1f} ms + "
          f"clip+AdamW+zero_grad {med(opt_s) * 1e3:.1f} ms; {med(tps):.1f} tok/s, "
          f"{flops_per_token * med(tps) / 1e9:.1f} GFLOP/s (hetcomm's FLOP count)")
    print(f"RESULT torch tokens_per_s={med(tps):.1f} tokens_per_s_mean={B * T * len(step_s) / sum(step_s):.1f} "
          f"step_ms={med(step_s) * 1e3:.2f} compute_ms={med(compute_s) * 1e3:.2f} opt_ms={med(opt_s) * 1e3:.2f} "
          f"threads={a.threads} attention={attention} torch={torch.__version__}")


if __name__ == "__main__":
    main()
