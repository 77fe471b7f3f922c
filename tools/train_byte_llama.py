#!/usr/bin/env python3
"""Train a small byte-level Llama on the text of a Python installation (issue 28).

``tq eval`` needs a second pretrained causal LM besides SmolLM2, one small enough to
travel to and from the GPU machine. This script makes one from scratch:

- a transformers ``LlamaForCausalLM``: RoPE, grouped-query attention (8 query heads,
  2 key/value heads, head_dim 64), hidden size 512, 8 layers, about 13.4 M parameters;
- a byte-level tokenizer: token ``b`` is the byte ``b`` (0-255), token 256 is
  ``<|endoftext|>`` (separator between documents; never added to text automatically);
- trained on prose found on the machine it runs on: ``.md``/``.rst``/``.txt`` files,
  package descriptions (``METADATA``) and triple-quoted strings (docstrings) of ``.py``
  files under the Python installation and its site-packages. ``pydoc_data`` (the
  evaluation text of ``tq eval``) is left out, and so is any document sharing several
  long lines with it.

Subcommands:

``train --out DIR``
    collects the corpus, trains, saves the model (bf16 safetensors, shards of at most
    15 MB), the tokenizer and ``training_info.json`` (corpus, losses, bits per byte on
    ``pydoc_data.topics``) to ``DIR``. ``--tiny`` runs a few steps of a toy-sized model
    on a few hundred files, to test the script on a CPU.
``check DIR``
    reloads ``DIR`` with ``AutoModelForCausalLM`` / ``AutoTokenizer``, checks the
    tokenizer's byte round trip, measures bits per byte on the evaluation text and prints
    a greedy continuation of a prompt.

Seeds are fixed: on the same machine and software, the same arguments give the same
corpus, batches and initial weights (GPU kernels are not bit-exact between runs). The
only wall-clock dependence is ``--time-budget-s``: if training is slower than planned,
the learning-rate decay starts early; ``training_info.json`` records the step
(``--decay-start`` replays it).
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import json
import math
import multiprocessing
import os
import platform
import re
import site
import sys
import sysconfig
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F

if TYPE_CHECKING:
    from transformers import LlamaConfig, PreTrainedTokenizerBase, PreTrainedTokenizerFast

EOT_ID = 256
VOCAB_SIZE = 257
EOT = "<|endoftext|>"
EVAL_WINDOW = 512

_PROSE_SUFFIXES = {".md", ".rst", ".txt"}
_SKIP_NAMES = {
    "RECORD",
    "WHEEL",
    "INSTALLER",
    "REQUESTED",
    "entry_points.txt",
    "top_level.txt",
    "requires.txt",
    "SOURCES.txt",
    "dependency_links.txt",
    "namespace_packages.txt",
    "api_tests.txt",
}
_SKIP_PREFIXES = ("LICENSE", "LICENCE", "COPYING", "NOTICE", "AUTHORS", "CONTRIBUTORS")
_TRIPLE_QUOTED = re.compile(r'"""(.*?)"""|\'\'\'(.*?)\'\'\'', re.S)
_MAX_FILE_BYTES = 4_000_000
_CONTAMINATION_LINE_CHARS = 50
_CONTAMINATION_MAX_LINES = 3


# --------------------------------------------------------------------------- tokenizer


def byte_to_unicode() -> dict[int, str]:
    """The printable stand-in character of each byte, as the ByteLevel pre-tokenizer uses.

    Printable Latin-1 characters stand for themselves; the other 68 bytes (controls,
    space, soft hyphen, ...) get the characters from U+0100 on, in byte order.
    """
    printable = set(range(0x21, 0x7F)) | set(range(0xA1, 0xAD)) | set(range(0xAE, 0x100))
    table: dict[int, str] = {}
    extra = 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(0x100 + extra)
            extra += 1
    return table


def build_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level tokenizer: UTF-8 bytes in, one token per byte, token id = byte value."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    table = byte_to_unicode()
    if set(table.values()) != set(pre_tokenizers.ByteLevel.alphabet()):
        raise RuntimeError("byte table does not match the ByteLevel pre-tokenizer's alphabet")
    vocab = {table[b]: b for b in range(256)}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token=EOT,
        eos_token=EOT,
        pad_token=EOT,
        split_special_tokens=True,  # "<|endoftext|>" in text stays 13 bytes
    )
    if len(tok) != VOCAB_SIZE or tok.convert_tokens_to_ids(EOT) != EOT_ID:
        raise RuntimeError(f"unexpected tokenizer: {len(tok)} tokens")
    return tok


def save_tokenizer(folder: Path) -> None:
    """Save the byte tokenizer so that ``AutoTokenizer.from_pretrained(folder)`` loads it."""
    tok = build_tokenizer()
    tok.save_pretrained(folder)
    cfg_path = folder / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["tokenizer_class"] = "PreTrainedTokenizerFast"  # the name every version knows
    cfg_path.write_text(json.dumps(cfg, indent=2) + "\n")


def check_round_trip(tok: PreTrainedTokenizerBase) -> None:
    """Raise unless ``tok`` maps text to its UTF-8 bytes and back, one token per byte."""
    samples = [
        "",
        "plain ASCII, tabs\tand\nnewlines\r\n",
        "Grüße, ñ, 中文, emoji 🙂, NUL \x00 and DEL \x7f",
        f"a literal {EOT} stays bytes",
        "".join(chr(c) for c in range(1, 0x800, 7)),
    ]
    rng = np.random.default_rng(0)
    points = rng.integers(1, 0x110000, size=4000)
    samples.append("".join(chr(int(c)) for c in points if not 0xD800 <= c < 0xE000))
    for text in samples:
        ids = tok(text, add_special_tokens=True)["input_ids"]
        if ids != list(text.encode("utf-8")):
            raise RuntimeError(f"tokenizer is not byte-level on {text[:40]!r}")
        if tok.decode(ids) != text:
            raise RuntimeError(f"tokenizer does not round-trip {text[:40]!r}")


# ------------------------------------------------------------------------ evaluation text


def pydoc_topics_bytes(limit: int | None = 65536) -> bytes:
    """The evaluation text: ``pydoc_data.topics`` in key order, UTF-8, first ``limit`` bytes."""
    from pydoc_data.topics import topics

    data = "\n".join(topics[k] for k in sorted(topics)).encode("utf-8")
    return data if limit is None else data[:limit]


def _eval_lines() -> frozenset[str]:
    text = pydoc_topics_bytes(None).decode("utf-8")
    return frozenset(s for s in (line.strip() for line in text.splitlines()) if len(s) >= _CONTAMINATION_LINE_CHARS)


@torch.no_grad()
def bits_per_byte(
    model: torch.nn.Module,
    data: bytes | np.ndarray,
    window: int = EVAL_WINDOW,
    batch: int = 32,
    autocast: bool = False,
) -> dict[str, float]:
    """Mean next-token loss over non-overlapping windows of ``window`` tokens.

    Each window is scored on its own: the first token is context only, the other
    ``window - 1`` are predicted. Returns nats per token, bits per byte (one token per
    byte), perplexity per byte, and the standard error of bits per byte over windows.
    """
    tokens = np.frombuffer(data, dtype=np.uint8) if isinstance(data, bytes) else data
    n_win = len(tokens) // window
    if n_win == 0:
        raise ValueError(f"need at least {window} tokens, got {len(tokens)}")
    device = next(model.parameters()).device
    arr = torch.from_numpy(np.asarray(tokens[: n_win * window], dtype=np.int64))
    windows = arr.view(n_win, window).to(device)
    was_training = model.training
    model.eval()
    per_window = []
    for i in range(0, n_win, batch):
        x = windows[i : i + batch]
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
            logits = model(input_ids=x[:, :-1]).logits
        nll = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1), reduction="none")
        per_window.append(nll.view(x.shape[0], -1).mean(dim=1).double().cpu())
    model.train(was_training)
    w = torch.cat(per_window)
    nats = float(w.mean())
    se = float(w.std() / math.sqrt(n_win)) / math.log(2) if n_win > 1 else float("nan")
    return {
        "windows": n_win,
        "window_tokens": window,
        "nats_per_token": nats,
        "bits_per_byte": nats / math.log(2),
        "bits_per_byte_se": se,
        "perplexity_per_byte": math.exp(nats),
    }


# ---------------------------------------------------------------------------- corpus


@dataclass
class Corpus:
    train: np.ndarray  # int16 token ids, documents separated by EOT_ID
    val: np.ndarray
    info: dict = field(default_factory=dict)


def corpus_roots() -> list[Path]:
    """The Python installation's library folders (stdlib, site-packages), outermost first."""
    found: list[Path] = []
    paths = sysconfig.get_paths()
    candidates = [paths.get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")]
    candidates += list(site.getsitepackages())
    user = site.getusersitepackages()
    candidates.append(user if isinstance(user, str) else None)
    for c in candidates:
        if c and Path(c).is_dir():
            p = Path(c).resolve()
            if p not in found:
                found.append(p)
    # drop folders inside another root (site-packages under the stdlib folder, say)
    return [p for p in found if not any(q != p and q in p.parents for q in found)]


def _is_candidate(path: Path) -> bool:
    name = path.name
    if "pydoc_data" in path.parts or "__pycache__" in path.parts:
        return False
    if name in _SKIP_NAMES or name.upper().startswith(_SKIP_PREFIXES):
        return False
    parent = path.parent.name
    if parent.endswith((".dist-info", ".egg-info")):
        return name in ("METADATA", "PKG-INFO")
    if parent == "licenses":
        return False
    return path.suffix in _PROSE_SUFFIXES or path.suffix == ".py"


def list_files(roots: list[Path]) -> list[str]:
    """Candidate files under ``roots``, sorted, each real file once."""
    seen: set[str] = set()
    out: list[str] = []
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d not in ("__pycache__", "pydoc_data"))
            for fn in filenames:
                p = Path(dirpath) / fn
                if not _is_candidate(p):
                    continue
                try:
                    if not p.is_file() or p.stat().st_size > _MAX_FILE_BYTES:
                        continue
                    real = os.path.realpath(p)
                except OSError:
                    continue
                if real not in seen:
                    seen.add(real)
                    out.append(str(p))
    out.sort()
    return out


def _looks_like_prose(text: str) -> bool:
    head = text[:65536]
    if len(head) < 200:
        return False
    letters = sum(c.isalpha() or c == " " for c in head)
    lines = head.count("\n") + 1
    return letters / len(head) >= 0.6 and len(head) / lines >= 15


def extract_text(path: str) -> tuple[str, str] | None:
    """(kind, text) of one file, or None: prose files whole, docstrings of ``.py`` files."""
    try:
        raw = Path(path).read_bytes()
    except OSError:
        return None
    text = raw.decode("utf-8", errors="replace").replace("\r\n", "\n")
    if path.endswith(".py"):
        parts = []
        for m in _TRIPLE_QUOTED.finditer(text):
            s = inspect.cleandoc(m.group(1) if m.group(1) is not None else m.group(2))
            if len(s) >= 64 and s.count(" ") >= 8:
                parts.append(s)
        return ("docstrings", "\n\n".join(parts)) if parts else None
    if not _looks_like_prose(text):
        return None
    kind = "metadata" if Path(path).name in ("METADATA", "PKG-INFO") else Path(path).suffix[1:]
    return kind, text


def collect_corpus(max_files: int | None, max_bytes: int, val_every: int = 100, workers: int | None = None) -> Corpus:
    """Read, filter, de-duplicate and decontaminate the corpus; split off held-out docs."""
    t0 = time.perf_counter()
    roots = corpus_roots()
    files = list_files(roots)
    n_listed = len(files)
    if max_files is not None and len(files) > max_files:
        # a spread-out deterministic subset (for --tiny)
        files = sorted(files, key=lambda p: zlib.crc32(p.encode()))[:max_files]
        files.sort()
    workers = workers or min(16, os.cpu_count() or 1)
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        results = pool.map(extract_text, files, chunksize=32)
    eval_lines = _eval_lines()
    seen: set[bytes] = set()
    docs: list[tuple[str, str, bytes]] = []
    dropped_dup = 0
    contaminated: list[str] = []
    for path, res in zip(files, results, strict=True):
        if res is None:
            continue
        kind, text = res
        digest = hashlib.sha1(text.encode("utf-8")).digest()
        if digest in seen:
            dropped_dup += 1
            continue
        seen.add(digest)
        hits = sum(1 for line in text.splitlines() if line.strip() in eval_lines)
        if hits >= _CONTAMINATION_MAX_LINES:
            contaminated.append(path)
            continue
        docs.append((path, kind, text.encode("utf-8")))
    total = sum(len(d[2]) for d in docs)
    capped = False
    if total > max_bytes:
        capped = True
        order = sorted(range(len(docs)), key=lambda i: zlib.crc32(docs[i][0].encode()))
        keep, size = set(), 0
        for i in order:
            if size + len(docs[i][2]) > max_bytes:
                continue
            keep.add(i)
            size += len(docs[i][2])
        docs = [d for i, d in enumerate(docs) if i in keep]
    train_parts: list[np.ndarray] = []
    val_parts: list[np.ndarray] = []
    sep = np.array([EOT_ID], dtype=np.int16)
    by_kind: dict[str, dict[str, int]] = {}
    by_root: dict[str, int] = {}
    val_docs = 0
    for path, kind, data in docs:
        arr = np.frombuffer(data, dtype=np.uint8).astype(np.int16)
        if zlib.crc32(data) % val_every == 0:
            val_parts += [arr, sep]
            val_docs += 1
        else:
            train_parts += [arr, sep]
        k = by_kind.setdefault(kind, {"files": 0, "bytes": 0})
        k["files"] += 1
        k["bytes"] += len(data)
        root = next((str(r) for r in roots if path.startswith(str(r) + os.sep)), "?")
        by_root[root] = by_root.get(root, 0) + len(data)
    train = np.concatenate(train_parts) if train_parts else np.zeros(0, np.int16)
    val = np.concatenate(val_parts) if val_parts else np.zeros(0, np.int16)
    info = {
        "roots": [str(r) for r in roots],
        "files_listed": n_listed,
        "files_read": len(files),
        "documents": len(docs),
        "duplicates_dropped": dropped_dup,
        "contaminated_dropped": len(contaminated),
        "contaminated_examples": contaminated[:20],
        "capped_at_bytes": max_bytes if capped else None,
        "by_kind": by_kind,
        "bytes_by_root": by_root,
        "train_tokens": int(train.size),
        "val_tokens": int(val.size),
        "val_documents": val_docs,
        "excluded": "pydoc_data/ (the evaluation text) and documents sharing "
        f">= {_CONTAMINATION_MAX_LINES} lines of >= {_CONTAMINATION_LINE_CHARS} chars with it",
        "seconds": round(time.perf_counter() - t0, 1),
    }
    return Corpus(train=train, val=val, info=info)


# ---------------------------------------------------------------------------- training


def make_config(tiny: bool, context: int) -> LlamaConfig:
    """The model: byte vocabulary, RoPE, GQA 8/2 with head_dim 64 (toy sizes with --tiny)."""
    from transformers import LlamaConfig

    if tiny:
        size = {"hidden_size": 128, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2}
        size["num_key_value_heads"] = 1
    else:
        size = {"hidden_size": 512, "intermediate_size": 640, "num_hidden_layers": 8, "num_attention_heads": 8}
        size["num_key_value_heads"] = 2
    return LlamaConfig(
        vocab_size=VOCAB_SIZE,
        head_dim=64,
        hidden_act="silu",
        max_position_embeddings=max(1024, context),
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        rms_norm_eps=1e-5,
        initializer_range=0.02,
        tie_word_embeddings=False,
        attention_bias=False,
        mlp_bias=False,
        bos_token_id=EOT_ID,
        eos_token_id=EOT_ID,
        pad_token_id=EOT_ID,
        use_cache=False,
        **size,
    )


class Schedule:
    """Warm-up, constant, then linear decay to 5% (a warmup-stable-decay schedule).

    The decay starts at 80% of ``steps``, or earlier once 80% of the time budget is
    spent; it then lasts a quarter of the steps already taken.
    """

    def __init__(self, peak: float, warmup: int, steps: int, decay_start: int | None) -> None:
        self.peak, self.warmup = peak, warmup
        self.decay_start = decay_start if decay_start is not None else int(0.8 * steps)
        self.decay_len = max(1, (steps - self.decay_start) if decay_start is None else decay_start // 4)
        self.moved_by_time = False

    @property
    def total(self) -> int:
        return self.decay_start + self.decay_len

    def start_decay_now(self, step: int) -> None:
        if step < self.decay_start:
            self.decay_start, self.decay_len = step, max(1, step // 4)
            self.moved_by_time = True

    def lr(self, step: int) -> float:
        if step < self.warmup:
            return self.peak * (step + 1) / self.warmup
        if step < self.decay_start:
            return self.peak
        return self.peak * (1.0 - 0.95 * min(1.0, (step - self.decay_start) / self.decay_len))


def train(args: argparse.Namespace) -> None:
    from transformers import LlamaForCausalLM

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    on_gpu = device.type == "cuda"
    print(f"python {platform.python_version()}, torch {torch.__version__}, device {device}", flush=True)

    # read the files before CUDA starts: the reader processes are forked
    corpus = collect_corpus(args.max_files, int(args.max_corpus_mb * 1e6), val_every=args.holdout_every)
    ci = corpus.info
    print(
        f"corpus: {ci['documents']} documents, {ci['train_tokens'] / 1e6:.1f} M train bytes, "
        f"{ci['val_tokens'] / 1e6:.2f} M held-out bytes, {ci['duplicates_dropped']} duplicates and "
        f"{ci['contaminated_dropped']} contaminated documents dropped, {ci['seconds']} s",
        flush=True,
    )
    for kind, v in sorted(ci["by_kind"].items()):
        print(f"  {kind:10s} {v['files']:7d} files {v['bytes'] / 1e6:9.1f} MB", flush=True)
    if corpus.train.size < 4 * args.context or corpus.val.size < args.context + 1:
        raise SystemExit("corpus too small")

    if on_gpu:
        print(f"gpu: {torch.cuda.get_device_name(device)}", flush=True)
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    config = make_config(args.tiny, args.context)
    model = LlamaForCausalLM(config).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: {n_params:,} parameters, {config.num_hidden_layers} layers", flush=True)

    train_data = torch.from_numpy(corpus.train).to(device)
    val_data = corpus.val
    gen = torch.Generator(device=device).manual_seed(args.seed + 1)
    span = torch.arange(args.context + 1, device=device)
    n_val = min(64, max(1, (val_data.size - 1) // (args.context + 1)))
    val_starts = np.random.default_rng(args.seed + 2).choice(
        val_data.size - args.context - 1, size=n_val, replace=False
    )
    val_windows = np.stack([val_data[s : s + args.context + 1] for s in sorted(val_starts)])
    val_flat = val_windows.astype(np.int64).reshape(-1)

    def batch() -> tuple[torch.Tensor, torch.Tensor]:
        starts = torch.randint(0, train_data.numel() - args.context - 1, (args.batch,), device=device, generator=gen)
        seq = train_data[starts[:, None] + span].long()
        return seq[:, :-1], seq[:, 1:]

    decay, no_decay = [], []
    for p in model.parameters():
        (decay if p.ndim >= 2 else no_decay).append(p)
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
        lr=args.lr,
        betas=(0.9, 0.95),
        eps=1e-8,
        fused=on_gpu,
    )

    def loss_fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=on_gpu or args.autocast):
            logits = model(input_ids=x).logits
        return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))

    step_fn = torch.compile(loss_fn) if args.compile else loss_fn

    def val_loss() -> float:
        r = bits_per_byte(model, val_flat, window=args.context + 1, batch=16, autocast=on_gpu)
        return r["nats_per_token"]

    sched = Schedule(args.lr, args.warmup, args.steps, args.decay_start)
    tokens_per_step = args.batch * args.context
    print(
        f"training: batch {args.batch} x {args.context} tokens, peak lr {args.lr}, "
        f"{sched.total} steps planned, time budget {args.time_budget_s} s",
        flush=True,
    )
    curve: list[dict] = []
    val_curve: list[dict] = []
    running = torch.zeros((), device=device)
    running_n = 0
    t_start = time.perf_counter()
    t_loop = None  # set after the first (compiling) step
    step = 0
    model.train()
    while step < sched.total:
        for g in opt.param_groups:
            g["lr"] = sched.lr(step)
        x, y = batch()
        if t_loop is None and step_fn is not loss_fn:
            try:
                loss = step_fn(x, y)
            except Exception as exc:  # a compiler failure must not cost the run
                print(f"torch.compile failed ({type(exc).__name__}: {exc}); eager from here", flush=True)
                args.compile = False
                step_fn = loss_fn
                opt.zero_grad(set_to_none=True)
                loss = step_fn(x, y)
        else:
            loss = step_fn(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        running += loss.detach()
        running_n += 1
        step += 1
        if t_loop is None:
            first = loss.item()
            t_loop = time.perf_counter()
            print(f"step 1: loss {first:.4f} (first step incl. compile {t_loop - t_start:.1f} s)", flush=True)
            running.zero_()
            running_n = 0
            continue
        elapsed = time.perf_counter() - t_loop
        late = args.time_budget_s and elapsed > 0.8 * args.time_budget_s
        if late and not sched.moved_by_time and step < sched.decay_start:
            sched.start_decay_now(step)
            print(f"time budget: decay starts at step {step}, ends at {sched.total}", flush=True)
        if args.time_budget_s and elapsed > 1.5 * args.time_budget_s:
            print(f"time budget exceeded by half: stopping at step {step}", flush=True)
            break
        if step % args.log_every == 0 or step == sched.total:
            mean = running.item() / running_n
            elapsed = time.perf_counter() - t_loop
            rate = (step - 1) * tokens_per_step / elapsed
            curve.append({"step": step, "loss": round(mean, 4), "seconds": round(elapsed, 1)})
            print(
                f"step {step:5d}/{sched.total}: loss {mean:.4f} ({mean / math.log(2):.3f} bits/byte) "
                f"lr {sched.lr(step - 1):.2e} {elapsed:6.1f} s {rate / 1e6:.2f} M tok/s",
                flush=True,
            )
            running.zero_()
            running_n = 0
        if step % args.val_every == 0 or step == sched.total:
            v = val_loss()
            val_curve.append({"step": step, "loss": round(v, 4)})
            print(f"  held-out loss {v:.4f} ({v / math.log(2):.3f} bits/byte)", flush=True)
    train_seconds = time.perf_counter() - (t_loop or t_start)
    final_train = curve[-1]["loss"] if curve else float("nan")

    # evaluate what is saved: weights rounded to bf16, computed in fp32
    eval_bytes = pydoc_topics_bytes(args.eval_bytes)
    master = bits_per_byte(model, eval_bytes, autocast=on_gpu)
    model.to(torch.bfloat16)
    model.config.use_cache = True
    model.save_pretrained(out, max_shard_size="15MB")
    model.float()
    topics = bits_per_byte(model, eval_bytes, autocast=False)
    held_out = bits_per_byte(model, val_flat, window=args.context + 1, batch=16, autocast=False)
    save_tokenizer(out)
    if args.save_eval_text:
        Path(args.save_eval_text).write_bytes(eval_bytes)

    info = {
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": __import__("transformers").__version__,
        "device": torch.cuda.get_device_name(device) if on_gpu else platform.processor() or "cpu",
        "seed": args.seed,
        "parameters": n_params,
        "config": {
            k: getattr(config, k)
            for k in (
                "vocab_size",
                "hidden_size",
                "intermediate_size",
                "num_hidden_layers",
                "num_attention_heads",
                "num_key_value_heads",
                "head_dim",
                "max_position_embeddings",
                "rope_parameters",
            )
        },
        "corpus": corpus.info,
        "training": {
            "batch": args.batch,
            "context": args.context,
            "tokens_per_step": tokens_per_step,
            "steps": step,
            "tokens": step * tokens_per_step,
            "peak_lr": args.lr,
            "warmup": args.warmup,
            "decay_start": sched.decay_start,
            "decay_moved_by_time_budget": sched.moved_by_time,
            "seconds_after_first_step": round(train_seconds, 1),
            "compile": args.compile,
            "loss_curve": curve,
            "held_out_curve": val_curve,
        },
        "final_train_loss": final_train,
        "final_train_bits_per_byte": final_train / math.log(2),
        "held_out": held_out,
        "pydoc_topics": {
            "text": f"pydoc_data.topics values in key order joined by newlines, UTF-8, "
            f"first {len(eval_bytes)} bytes, windows of {EVAL_WINDOW} tokens "
            f"(first token of each window is context only)",
            "python": platform.python_version(),
            "sha256": hashlib.sha256(eval_bytes).hexdigest(),
            "bf16_weights_fp32_compute": topics,
            "fp32_weights_bf16_autocast": master,
        },
    }
    (out / "training_info.json").write_text(json.dumps(info, indent=2) + "\n")
    print(
        f"done: {step} steps in {train_seconds:.0f} s; train loss {final_train:.4f}, held-out "
        f"{held_out['nats_per_token']:.4f} ({held_out['bits_per_byte']:.3f} bits/byte); "
        f"pydoc_data.topics {topics['bits_per_byte']:.4f} +- {topics['bits_per_byte_se']:.4f} bits/byte "
        f"(perplexity {topics['perplexity_per_byte']:.3f} per byte); saved to {out}",
        flush=True,
    )


# ------------------------------------------------------------------------------- check


def check(args: argparse.Namespace) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = Path(args.folder)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    tok = AutoTokenizer.from_pretrained(folder)
    check_round_trip(tok)
    print(f"tokenizer: {type(tok).__name__}, {len(tok)} tokens, byte round trip ok", flush=True)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).to(device)
    model.eval()
    n_params = sum(p.numel() for p in model.parameters())
    c = model.config
    print(
        f"model: {type(model).__name__}, {n_params:,} parameters, {c.num_hidden_layers} layers, "
        f"{c.num_attention_heads} query / {c.num_key_value_heads} kv heads of {c.head_dim}",
        flush=True,
    )
    if args.text:
        data = Path(args.text).read_bytes()
        label = args.text
    else:
        data = pydoc_topics_bytes(args.eval_bytes)
        label = f"pydoc_data.topics (python {platform.python_version()})"
    data = data[: args.max_windows * EVAL_WINDOW] if args.max_windows else data
    enc = tok(data.decode("utf-8", errors="ignore"))["input_ids"]
    if data.decode("utf-8", errors="ignore").encode() == data and enc != list(data):
        raise RuntimeError("tokenizer ids differ from the bytes of the evaluation text")
    r = bits_per_byte(model, data)
    print(
        f"{label}: {r['windows']} windows of {EVAL_WINDOW}: {r['bits_per_byte']:.4f} +- "
        f"{r['bits_per_byte_se']:.4f} bits/byte, perplexity {r['perplexity_per_byte']:.4f} per byte "
        f"(sha256 {hashlib.sha256(data).hexdigest()[:16]})",
        flush=True,
    )
    ids = tok(args.prompt, return_tensors="pt")["input_ids"].to(device)
    outp = model.generate(ids, max_new_tokens=args.new_tokens, do_sample=False)
    print(f"greedy continuation of {args.prompt!r}:\n{tok.decode(outp[0])}", flush=True)


# -------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> None:
    """Command line: ``train`` or ``check`` (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train", help="collect the corpus, train, save")
    t.add_argument("--out", required=True, help="model folder to write")
    t.add_argument("--tiny", action="store_true", help="toy model, few steps, few files (CPU test)")
    t.add_argument("--device", default=None)
    t.add_argument("--seed", type=int, default=1234)
    t.add_argument("--steps", type=int, default=None, help="default 3000 (20 with --tiny)")
    t.add_argument("--batch", type=int, default=None, help="sequences per step (default 128, tiny 4)")
    t.add_argument("--context", type=int, default=None, help="tokens per sequence (default 1024, tiny 512)")
    t.add_argument("--lr", type=float, default=2e-3)
    t.add_argument("--warmup", type=int, default=None, help="default 150 (tiny 5)")
    t.add_argument("--decay-start", type=int, default=None, help="step where the lr decay starts")
    t.add_argument("--time-budget-s", type=float, default=240.0, help="0 to ignore the clock")
    t.add_argument("--max-corpus-mb", type=float, default=None, help="default 600 (tiny 2)")
    t.add_argument("--max-files", type=int, default=None, help="default all (tiny 300)")
    t.add_argument("--holdout-every", type=int, default=None, help="1 doc in N held out (100, tiny 10)")
    t.add_argument("--eval-bytes", type=int, default=65536)
    t.add_argument("--save-eval-text", default=None, help="also write the evaluated bytes here")
    t.add_argument("--log-every", type=int, default=None, help="default 50 (tiny 5)")
    t.add_argument("--val-every", type=int, default=500)
    t.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None)
    t.add_argument("--autocast", action="store_true", help="bf16 autocast also on the CPU")
    c = sub.add_parser("check", help="reload a saved folder, score it, sample from it")
    c.add_argument("folder")
    c.add_argument("--device", default=None)
    c.add_argument("--text", default=None, help="bytes to score (default pydoc_data.topics)")
    c.add_argument("--eval-bytes", type=int, default=65536)
    c.add_argument("--max-windows", type=int, default=None)
    c.add_argument("--prompt", default="The import statement")
    c.add_argument("--new-tokens", type=int, default=200)
    args = ap.parse_args(argv)
    if args.cmd == "check":
        check(args)
        return
    defaults = {
        "steps": (20, 3000),
        "batch": (4, 128),
        "context": (512, 1024),
        "warmup": (5, 150),
        "max_corpus_mb": (2.0, 600.0),
        "max_files": (300, None),
        "holdout_every": (10, 100),
        "log_every": (5, 50),
        "compile": (False, torch.cuda.is_available()),
    }
    for name, (tiny, full) in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, tiny if args.tiny else full)
    train(args)


if __name__ == "__main__":
    main()
