"""
Several sequences at once: plain and speculative sampling for a batch of B prompts of different lengths.

speculative.py is the readable B = 1 Algorithm 2; this file runs the same algorithm on B rows together. Per
round every unfinished row drafts K tokens (one draft forward per step, all rows in it), the target scores every
row's K+1 positions in ONE forward, and each row keeps or replaces its own drafts with its own coins. Rows accept
different numbers of drafts, so they drift apart: each row has its own length in the KV cache (model.GPT's
per-row cache: its new tokens go to its own slots, behind its own causal mask; a rollback moves its length
only), its own position t, and its own context window x[s(t):t] (speculative.context_start), which therefore
slides at different times in different rows.

    outputs, stats = speculative_generate_batch(target, draft, [ids_a, ids_b], 200, k=4)
    outputs, stats = autoregressive_generate_batch(target, [ids_a, ids_b], 200)

Design choices, each kept simple:
  - One K per round for the whole batch (an int, or "auto": choose_k.AutoK, from earlier rounds only). Row b
    uses K_b = min(K, the tokens it has left, what its window allows): a row near its end or its window's
    change keeps fewer drafts; the drafts it does not use are computed with the others and thrown away.
  - The per-round work stays on the device: drafts, coins and the replacement draws are tensors, and a round
    reads the host once (each row's kept count, its new tokens and a did-anything-go-wrong flag). Draws use
    sample_rows (an exponential race: exact, and no host read) and kept_counts.
  - A row whose window slid, and every prompt, is re-read by a separate forward of just those rows (rare).
  - A finished row rides along (its results ignored) until half the batch has finished; then the finished rows
    leave (the others' cache rows are copied once), so they stop costing work without a copy at every finish.

Exactness: given the past, each row's round is an ordinary Algorithm 2 round with K_b drafts, and the rows' draws
are independent, so every row is distributed as plain sampling from the target and the rows are independent
(tests/test_batched.py enumerates every branch of a B = 2 batch on table models and gets the exact joint).
What it leaves out: the other verifiers (verifiers/), trees, and per-row K.
"""

import time
from dataclasses import dataclass, field

import torch

from choose_k import AutoK
from speculative import (SamplingError, Stats, check_inputs, check_stop, context_start, sampling_probs, stop_end,
                         why_not_a_distribution, window_end)


@dataclass
class BatchStats(Stats):
    """Stats of a batched call. new_tokens, drafted and accepted count all rows; rounds holds (row, t, K_b, kept)
    of every row's round; target_times and draft_times hold the decoding forwards (all rows, one step or one
    round), fill_times the forwards that read prompts and slid windows."""
    rows: int = 0
    host_reads: int = 0  # times the host waited for the device's results (one per round or step)
    fill_times: list = field(default_factory=list)  # (so tokens_per_target_call counts decoding forwards only)
    drafts: list = field(default_factory=list)  # the K_b ids each round of `rounds` drafted, in the same order


# ---- the draws: one per row, all on the device --------------------------------------------------------------

def sample_rows(probs, generator=None):  # (B, V) -> (B,): one token per row, x_b ~ probs[b]
    """An exponential race: with E_x ~ Exp(1) independent, argmax_x p(x) / E_x is distributed as p, exactly. Unlike
    torch.multinomial it needs no host read on a GPU. Tokens with p(x) = 0 never win."""
    e = torch.empty_like(probs).exponential_(generator=generator)  # (B, V)
    return torch.where(probs > 0, probs / e, -1.0).argmax(-1)


def kept_counts(accept, limits, generator=None):  # (B, K) probabilities, (B,) ints -> (B,) drafts kept per row
    """Row b keeps its drafts left to right while their coins come up, coin i with probability accept[b, i]:
    -> the first i < limits[b] whose coin fails, or limits[b] when none does. [[1., 0.3]], [2] -> 1 (w.p. 0.7)."""
    B, K = accept.shape
    u = torch.rand(B, K, generator=generator, device=accept.device)
    stop = ~(u < accept) | (torch.arange(K, device=accept.device) >= limits[:, None])  # NaN: stop. (B, K)
    stop = torch.cat([stop, torch.ones(B, 1, dtype=torch.bool, device=accept.device)], 1)  # (B, K+1)
    return stop.int().argmax(-1)  # the first stop (argmax returns the first maximum)


def residual_rows(p, q):  # (B, V), (B, V) -> (B, V)
    """norm(max(0, p - q)) per row; p itself where no mass is left (p == q: a rejection has probability 0)."""
    r = torch.clamp(p - q, min=0.0)
    total = r.sum(-1, keepdim=True)
    return torch.where(total > 0, r / total, p)


def not_distributions(probs):  # (..., V) -> (...) bool: sampling_probs turned bad logits into NaN
    return ~((probs.sum(-1) - 1.0).abs() < 1e-3)


# ---- the per-row KV cache, with each row's window ------------------------------------------------------------

class RowCachedModel:
    """A model with a per-row cache (model.GPT.reset_row_cache): row b holds x_b[start[b] : start[b] + length[b]].
    The lengths are kept here (host) and in the model (device); forward() feeds, fill() re-reads."""

    def __init__(self, model, B, room, device):
        self.model, self.W, self.device = model, model.config.block_size, device
        model.reset_row_cache(B, room)
        self.start, self.length = [0] * B, [0] * B
        self.times, self.fill_times = [], []

    def need(self, b, t):  # -> position of the first token row b's cache lacks before scoring position t
        s = context_start(t, self.W)
        if s != self.start[b]:  # subtle: the window slid, every cached key sits at a wrong position: re-fill
            self.start[b], self.length[b] = s, 0
        return self.start[b] + self.length[b]

    def fill(self, rows, tokens, upto):
        """Read rows' tokens tokens[b][need:upto[b]] in one forward of just those rows (prompts, slid windows)."""
        if not rows:
            return
        every = len(rows) == len(self.length)  # all rows (the prompts): no gathering of rows
        ids = [tokens[b][self.start[b] + self.length[b]:upto[b]] for b in rows]
        width = max(len(i) for i in ids)
        padded = torch.tensor([i + [0] * (width - len(i)) for i in ids], device=self.device)  # (R, width)
        self.model.crop_rows(self.length)
        self.timed(self.fill_times, padded, None if every else rows)
        for b, i in zip(rows, ids):
            self.length[b] += len(i)  # the padding is forgotten: the next forward or fill crops to these lengths

    def forward(self, ids, fed):  # (B, T) ids, fed[b] of them real -> logits (B, T, V)
        self.model.crop_rows(self.length)
        logits = self.timed(self.times, ids)
        self.length = [n + f for n, f in zip(self.length, fed)]
        return logits

    def timed(self, times, ids, rows=None):  # rows: None (all) or a list of rows
        tic = time.perf_counter()
        fed = range(len(self.length)) if rows is None else rows
        span = max(self.length[b] for b in fed) + ids.size(1)  # no row sees past this: fewer keys (row_forward)
        rows = None if rows is None else torch.tensor(rows, device=self.device)
        logits, _ = self.model(ids, use_cache=True, rows=rows, span=span)
        if self.device.type == "cuda":
            torch.cuda.synchronize()  # honest timings: wait for the GPU
        times.append(time.perf_counter() - tic)
        return logits

    def rollback(self, b, t):  # row b forgets its cached tokens from position t on
        self.length[b] = max(0, min(self.length[b], t - self.start[b]))

    def keep(self, rows):  # only these rows stay in the batch, in this order
        self.model.keep_rows(torch.tensor(rows, device=self.device))
        self.start, self.length = [self.start[b] for b in rows], [self.length[b] for b in rows]


# ---- plain sampling, B rows ------------------------------------------------------------------------------------

@torch.no_grad()
def autoregressive_generate_batch(model, prompts, max_new_tokens, temperature=1.0, top_k=None, top_p=None,
                                  generator=None, stream=None, stats=None, stop=None):
    """prompts: B prompts (1-D LongTensors or lists of ints, lengths may differ) -> (B 1-D LongTensors, each its
    prompt and max_new_tokens new tokens; BatchStats). One target forward per step for all rows.
    stream(b, ids), if given, receives row b's new ids as they are produced; stats, a BatchStats filled as it goes
    (so a caller interrupted mid-call keeps every row's text and the statistics so far). stop=[[ids], ...]: a row
    ends right after its first stop sequence among its new tokens (speculative.stop_end), so rows differ in length."""
    tokens, device = check_batch(model, None, prompts, max_new_tokens, 1, temperature, top_k, top_p, stop)
    B, tic = len(tokens), time.perf_counter()
    first_new, final = [len(row) for row in tokens], [None] * B  # final[b]: row b's output once it hit a stop
    stats = BatchStats() if stats is None else stats
    stats.rows = B
    target = RowCachedModel(model, B, 0, device)
    for _ in range(max_new_tokens):
        ts = [len(row) for row in tokens]
        target.fill([b for b in range(B) if target.need(b, ts[b]) < ts[b] - 1], tokens, [t - 1 for t in ts])
        logits = target.forward(torch.tensor([[row[-1]] for row in tokens], device=device), [1] * B)[:, 0]  # (B, V)
        p = sampling_probs(logits, temperature, top_k, top_p)  # (B, V)
        x, bad = sample_rows(p, generator), not_distributions(p)
        read = torch.stack([x, bad.long()], 1).tolist()  # the step's one host read
        stats.host_reads += 1
        for b, (x_b, bad_b) in enumerate(read):
            if final[b] is not None:  # stopped: it rides along, its draws unused
                continue
            if bad_b:
                raise row_error(b, "target", ts[b], logits[b], tokens)
            tokens[b].append(x_b)
            if stream:
                stream(b, [x_b])
            if stop and stop_end(tokens[b], first_new[b], stop, ts[b]):
                final[b] = list(tokens[b])
        if stop and all(f is not None for f in final):
            break
    return finish(tokens, final, first_new, stats, tic, device, target.times, target.fill_times)


def finish(tokens, final, first_new, stats, tic, device, target_times, fill_times, draft_times=()):
    """-> (each row's output as a 1-D LongTensor: its tokens up to its stop, if it hit one; stats, completed)."""
    outputs = [f if f is not None else row for f, row in zip(final, tokens)]
    stats.new_tokens = sum(len(out) - n for out, n in zip(outputs, first_new))
    stats.target_times, stats.draft_times, stats.fill_times = target_times, list(draft_times), fill_times
    stats.total_time = time.perf_counter() - tic
    return [torch.tensor(row, dtype=torch.long, device=device) for row in outputs], stats


# ---- speculative sampling, B rows ------------------------------------------------------------------------------

@torch.no_grad()
def speculative_generate_batch(target, draft, prompts, max_new_tokens, k=4, temperature=1.0, top_k=None, top_p=None,
                               generator=None, stream=None, stats=None, stop=None):
    """prompts: B prompts (1-D LongTensors or lists of ints, lengths may differ) -> (B 1-D LongTensors, each its
    prompt and max_new_tokens new tokens; BatchStats). Each row is distributed exactly as
    autoregressive_generate(target) of that prompt alone. k: drafts per round (all rows), an int or "auto".
    stream, stats and stop as in autoregressive_generate_batch: a row's new ids after each round; filled round by
    round; a row ends after its first stop sequence (what its round kept past it is dropped)."""
    tokens, device = check_batch(target, draft, prompts, max_new_tokens, k, temperature, top_k, top_p, stop)
    B, tic = len(tokens), time.perf_counter()
    setting = ("tokenwise", (), temperature, top_k, top_p)  # as speculative_generate keys the acceptance
    auto = AutoK.remembered(target, draft, device, setting, batch=B) if k == "auto" else (  # from earlier calls
        k if isinstance(k, AutoK) else None)
    room = (auto.k_max if auto else k) + 2  # slots for the drafts a row at its window's end computes and discards
    tgt, drf = RowCachedModel(target, B, room, device), RowCachedModel(draft, B, room, device)
    probs = lambda logits: sampling_probs(logits, temperature, top_k, top_p)
    ends = [len(row) + max_new_tokens for row in tokens]
    first_new, final = [len(row) for row in tokens], [None] * B  # final[b]: row b's output once it hit a stop
    batch = list(range(B))  # batch[i]: the prompt of batch row i
    stats = BatchStats() if stats is None else stats
    stats.rows = B
    while max_new_tokens and any(len(tokens[b]) < ends[b] for b in batch):
        rows = [tokens[b] for b in batch]
        ts = [len(row) for row in rows]
        done = [t == ends[b] for b, t in zip(batch, ts)]  # finished rows ride along, K_b = 0, results ignored
        # subtle: row b's round may emit K_b+1 tokens at t..t+K_b; it must stop at max_new_tokens and not cross a
        # change of the target's s(t) (one forward scores them all). Other rows go on with the batch's K.
        limits = [max(0, min(ends[b] - 1 - t, window_end(t, tgt.W) - t)) for b, t in zip(batch, ts)]
        limit = max(lim for lim, d in zip(limits, done) if not d)
        K = auto.choose(limit) if auto else min(k, limit)  # from earlier rounds only: still exact
        Ks = [0 if d else min(K, lim) for lim, d in zip(limits, done)]
        n_tgt, n_drf = len(tgt.times), len(drf.times)
        kept, new, drafted = speculative_round_batch(tgt, drf, rows, ts, K, Ks, probs, generator, device, batch, tokens,
                                                     done)
        stats.host_reads += 1
        running = [i for i, d in enumerate(done) if not d]
        if auto:  # what this round measured: acceptance per row, (tokens fed, seconds) of its forwards
            auto.observe([Ks[i] for i in running], [kept[i] for i in running])
            auto.observe_forwards(K, [(1, s) for s in drf.times[n_drf:]], [(K + 1, s) for s in tgt.times[n_tgt:]])
        for i in running:
            b = batch[i]
            stats.rounds.append((b, ts[i], Ks[i], kept[i]))
            stats.drafts.append(drafted[i])  # (show.py colours the rejected one)
            tokens[b] = rows[i] + new[i]
            end_at = stop_end(tokens[b], first_new[b], stop, ts[i]) if stop else None
            if end_at:  # subtle: the row's round may have kept drafts past its stop; its cache keeps them, so the
                final[b], ends[b] = tokens[b][:end_at], len(tokens[b])  # row ends here and rides along, unused
            if stream:
                stream(b, (final[b] or tokens[b])[ts[i]:])
        stats.drafted += sum(Ks)
        stats.accepted += sum(kept[i] for i in running)
        still = [i for i, b in enumerate(batch) if len(tokens[b]) < ends[b]]
        if still and len(still) <= len(batch) // 2:  # half the rows finished: they leave the batch (copying the
            batch = [batch[i] for i in still]  # caches of the others costs a forward or so, so not at every finish)
            tgt.keep(still)
            drf.keep(still)
    return finish(tokens, final, first_new, stats, tic, device, tgt.times, tgt.fill_times + drf.fill_times, drf.times)


def speculative_round_batch(target, draft, rows, ts, K, Ks, probs, generator, device, names, everything, done):
    """One round of Algorithm 2 for every row at once. rows[b]: row b's tokens (not changed here); ts[b] = its
    length; row b uses K_b = Ks[b] <= K of the K drafts. -> (kept per row, new tokens per row, drafts per row).
    Reads the host once, at the end. For errors: names[b] is row b's prompt index, everything every prompt's row;
    rows that are done[b] (finished, riding along) are not checked."""
    B = len(rows)
    limits = torch.tensor(Ks, device=device)  # (B,)
    # 1. the draft proposes K tokens per row, one forward per step for all rows: x_i ~ q_i
    xs, qs, q_logits = [], [], []
    for i in range(K):
        if i == 0:  # each row feeds what its draft cache lacks: 1 token, or 2 after a round that kept every draft
            draft.fill([b for b in range(B) if draft.need(b, ts[b]) < ts[b] - 2], rows, [t - 2 for t in ts])
            fed = [ts[b] - draft.need(b, ts[b]) for b in range(B)]
            width = max(fed)
            ids = torch.tensor([row[t - n:t] + [0] * (width - n) for row, t, n in zip(rows, ts, fed)], device=device)
            logits = draft.forward(ids, fed)  # (B, width, V)
            logits = logits[torch.arange(B, device=device), torch.tensor(fed, device=device) - 1]  # (B, V)
        else:  # each row feeds its last draft; a row past its K_b feeds it too, and forgets it (fed 0)
            slid = [b for b in range(B) if i < Ks[b] and draft.need(b, ts[b] + i) < ts[b] + i - 1]
            if slid:  # subtle: the draft's window slid inside the round: re-read it, this round's drafts too
                so_far = torch.stack(xs, 1).tolist()  # (rare: once per W/2 tokens of a row)
                draft.fill(slid, [rows[b] + so_far[b] for b in range(B)], [ts[b] + i - 1 for b in range(B)])
            logits = draft.forward(xs[-1][:, None], [int(i < K_b) for K_b in Ks])[:, 0]  # (B, V)
        q_logits.append(logits)
        qs.append(probs(logits))
        xs.append(sample_rows(qs[-1], generator))
    # 2. the target scores every row's K+1 positions in ONE forward: p_0 .. p_K
    target.fill([b for b in range(B) if target.need(b, ts[b]) < ts[b] - 1], rows, [t - 1 for t in ts])
    last = torch.tensor([[row[-1]] for row in rows], device=device)  # (B, 1): x_{t-1}
    p_logits = target.forward(torch.cat([last] + [x[:, None] for x in xs], 1), [K + 1] * B)  # (B, K+1, V)
    p = probs(p_logits)  # (B, K+1, V)
    # 3. row by row and left to right: keep x_i with probability min(1, p_i(x_i) / q_i(x_i)) ...
    if K:
        x = torch.stack(xs, 1)  # (B, K)
        q = torch.stack(qs, 1)  # (B, K, V)
        p_x = p[:, :K].gather(-1, x[..., None])[..., 0]  # (B, K)
        q_x = q.gather(-1, x[..., None])[..., 0]  # (B, K): > 0, x was drawn from q
        kept = kept_counts(torch.clamp(p_x / q_x, max=1.0), limits, generator)  # (B,)
    else:
        x, kept = torch.zeros(B, 0, dtype=torch.long, device=device), torch.zeros(B, dtype=torch.long, device=device)
    # ... at row b's first rejection, resample from norm(max(0, p_i - q_i)); with all K_b kept, the bonus from p_K_b
    at = torch.arange(B, device=device)
    p_next = p[at, kept]  # (B, V)
    if K:
        q_next = q[at, kept.clamp(max=K - 1)]  # (B, V); unused where all were kept
        p_next = torch.where((kept < limits)[:, None], residual_rows(p_next, q_next), p_next)
    y = sample_rows(p_next, generator)  # (B,)
    # 4. the round's one host read: kept counts, the new token, the drafts, and whether anything was not a distribution
    bad_q = not_distributions(q) if K else torch.zeros(B, 0, dtype=torch.bool, device=device)  # (B, K)
    bad_p = not_distributions(p)  # (B, K+1)
    read = torch.cat([kept[:, None], y[:, None], x, bad_q.long(), bad_p.long()], 1).tolist()
    kept_rows, new, drafted = [], [], []
    for b, r in enumerate(read):
        n, y_b, x_b, bq, bp = r[0], r[1], r[2:2 + K], r[2 + K:2 + 2 * K], r[2 + 2 * K:]
        if done[b]:  # its tokens are final: nothing of this round is kept or checked
            n, bq, bp = 0, [0] * K, [0] * (K + 1)
        # the B = 1 round checks q_i before drawing x_i (i < K_b), and p_i where it uses it (i <= kept)
        first_q = next((i for i in range(Ks[b]) if bq[i]), None)
        first_p = next((i for i in range(n + 1) if bp[i]), None)
        if first_q is not None and (first_p is None or first_q <= first_p):
            raise row_error(names[b], "draft", ts[b] + first_q, q_logits[first_q][b], everything)
        if first_p is not None:
            raise row_error(names[b], "target", ts[b] + first_p, p_logits[b, first_p], everything)
        kept_rows.append(n)
        new.append([] if done[b] else x_b[:n] + [y_b])
        drafted.append([] if done[b] else x_b[:Ks[b]])
        target.rollback(b, ts[b] + n)  # forget the rejected (and unused) drafts in both caches
        draft.rollback(b, ts[b] + n)
    return kept_rows, new, drafted


def row_error(b, model, position, logits, rows):
    """The SamplingError of the B = 1 samplers, naming the row; .tokens holds every row's tokens so far."""
    err = SamplingError(f"row {b}: cannot sample the token at position {position} from the {model}: "
                        f"{why_not_a_distribution(logits)}. Every row's tokens so far (prompts included) are in "
                        "this error's .tokens, a list with one list per row", [list(row) for row in rows], model,
                        position)
    err.row = b
    return err


# ---- argument checks ----------------------------------------------------------------------------------------

def check_batch(target, draft, prompts, max_new_tokens, k, temperature, top_k, top_p, stop=None):
    """speculative.check_inputs for every prompt, with its index in the message. -> (list of B lists of ids, device)"""
    if isinstance(prompts, torch.Tensor) or not isinstance(prompts, (list, tuple)) or not prompts:
        raise ValueError("prompts must be a non-empty list of prompts, each a 1-D LongTensor or a list of ints, "
                         "e.g. [torch.tensor([1, 2]), [3]]; for a (B, T) tensor pass list(idx)")
    for name, model in [("target", target)] + ([("draft", draft)] if draft is not None else []):
        if not hasattr(model, "reset_row_cache"):
            raise ValueError(f"the {name} ({type(model).__name__}) has no per-row KV cache: batched.py runs model.GPT "
                             "(and table or n-gram models); for fast.py's FastGPT pass the GPT it wraps (.model)")
    param = next(target.parameters(), None)
    device = param.device if param is not None else torch.device("cpu")
    tokens = []
    for i, prompt in enumerate(prompts):
        try:
            if torch.is_tensor(prompt):
                if prompt.dim() != 1 or prompt.dtype != torch.long:
                    raise ValueError(f"a prompt tensor must be a 1-D LongTensor, got shape {tuple(prompt.shape)} "
                                     f"and dtype {prompt.dtype}")
                idx = prompt[None]
            elif isinstance(prompt, (list, tuple)) and all(isinstance(x, int) for x in prompt):
                idx = torch.tensor([list(prompt)], dtype=torch.long, device=device)
            else:
                raise ValueError("each prompt must be a 1-D LongTensor or a list of ints")
            tokens.append(check_inputs(target, draft, idx, max_new_tokens, k, temperature, top_k, top_p))
        except ValueError as e:
            raise ValueError(f"prompts[{i}]: {e}") from None
    check_stop(stop, target.config.vocab_size)
    return tokens, device
