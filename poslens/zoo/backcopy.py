"""The Bigram-Backcopy task: a synthetic language on which small transformers can form BOS sinks within CPU minutes.

After Guo et al. (2024), "Active-Dormant Attention Heads". The vocabulary is
``n_plain`` plain tokens (``w0`` … ``w59``) and ``n_triggers`` trigger tokens
(``q0`` … ``q3``). A plain token is followed by a token drawn from its row of
a fixed random bigram table: with probability ``trigger_rate`` one of the
triggers (uniformly), otherwise a plain token from a Dirichlet(``concentration``)
row. A trigger is followed by a copy of the token *before* it. So a
trigger is always preceded and followed by a plain token, and the next token
depends on the last two tokens only.

Why sinks are useful here: predicting a copy needs a head that, at a trigger,
reads the token two back; at every other position (about 90% of them) the
same head has nothing to contribute, and the cheapest way to contribute nothing
is to park its attention on BOS, whose value it can learn to make small (the
head is "dormant"). That is an attention sink, formed for a reason the
task states.

Why absolute position is not part of the task: every sequence is a window of a
long chain started from a plain token and run for :data:`BURN_IN` steps before
the first kept token, at a uniform offset; the bigram rows are dense, so the
chain is stationary and every position has the same distribution of tokens.
The best prediction at position i depends on tokens i − 1 and i − 2 alone, the
same rule at every i (only positions 1 and 2 lack context: the first token
follows BOS, and a copy at position 2 copies a token before the window).

Everything is deterministic from two seeds: ``table_seed`` (the bigram table)
and the data seeds of the training chains and the held-out chain. The
training stream is ``train_chains`` chains of ``chain_len`` tokens; a training
sequence is BOS and T − 1 tokens of one chain at a random offset. The held-out
stream is one chain, written as one text of space-separated token names
(``held_out.jsonl``) that the word-level tokenizer saved with each model
(:func:`backcopy_tokenizer`) maps back to the same ids, so ``--corpus`` of the
measuring commands reads the task's own sequences (``make_corpus`` cuts windows
end to end from that chain and puts BOS at position 0). Longer than 400 lines
because it is one job, the task: its constants, its table and chains, its
tokenizer and its data, each with its examples.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from poslens.errors import InputError
from poslens.files import atomic_write

#: The special tokens, with the ids of :func:`poslens.testing.byte_tokenizer`: unk 0, BOS 1, EOS 2, pad 3.
SPECIAL_TOKENS = ("<unk>", "<s>", "</s>", "<pad>")
BOS_ID, EOS_ID = 1, 2
#: Steps each chain runs before its first kept token (the chain forgets its start within a few steps: dense rows).
BURN_IN = 64


@dataclass(frozen=True)
class BackcopySpec:
    """The task's constants: vocabulary, trigger rate, the bigram table's seed and the streams' sizes and seeds.

    Attributes:
        n_plain: Plain tokens.
        n_triggers: Trigger tokens.
        trigger_rate: The probability that a plain token is followed by a trigger (then ρ/(1+ρ) of all tokens are triggers).
        concentration: The Dirichlet concentration of each plain token's row over the plain tokens.
        table_seed: The seed of the bigram table.
        train_seed: The seed of the training chains.
        held_out_seed: The seed of the held-out chain.
        train_chains: Training chains.
        chain_len: Tokens per training chain.
        held_out_len: Tokens of the held-out chain.

    Example:
        >>> spec = BackcopySpec()
        >>> spec.vocab_size, spec.token_name(4), spec.token_name(spec.vocab_size - 1)
        (68, 'w0', 'q3')
    """

    n_plain: int = 60
    n_triggers: int = 4
    trigger_rate: float = 0.1
    concentration: float = 0.5
    table_seed: int = 0
    train_seed: int = 1
    held_out_seed: int = 2
    train_chains: int = 256
    chain_len: int = 8192
    held_out_len: int = 65536

    def __post_init__(self) -> None:
        if self.n_plain < 2 or self.n_triggers < 1:
            raise InputError(f"the task needs at least 2 plain tokens and 1 trigger, got {self.n_plain} and {self.n_triggers}")
        if not 0 < self.trigger_rate < 1:
            raise InputError(f"trigger_rate must lie in (0, 1), got {self.trigger_rate}")
        if not self.concentration > 0:
            raise InputError(f"concentration must be positive, got {self.concentration}")
        if min(self.train_chains, self.chain_len, self.held_out_len) < 2:
            raise InputError("train_chains, chain_len and held_out_len must be at least 2")

    @property
    def vocab_size(self) -> int:
        """The special tokens, the plain tokens and the triggers.

        Example:
            >>> BackcopySpec(n_plain=10, n_triggers=2).vocab_size
            16
        """
        return len(SPECIAL_TOKENS) + self.n_plain + self.n_triggers

    @property
    def first_trigger(self) -> int:
        """The id of the first trigger (the triggers are the last ``n_triggers`` ids).

        Example:
            >>> BackcopySpec(n_plain=10, n_triggers=2).first_trigger
            14
        """
        return len(SPECIAL_TOKENS) + self.n_plain

    def token_name(self, token_id: int) -> str:
        """The name of a token id: a special token, ``w<i>`` for plain token i, ``q<j>`` for trigger j.

        Args:
            token_id: The id.

        Returns:
            The name.

        Example:
            >>> [BackcopySpec(n_plain=3, n_triggers=1).token_name(i) for i in range(8)]
            ['<unk>', '<s>', '</s>', '<pad>', 'w0', 'w1', 'w2', 'q0']
        """
        if token_id < len(SPECIAL_TOKENS):
            return SPECIAL_TOKENS[token_id]
        if token_id < self.first_trigger:
            return f"w{token_id - len(SPECIAL_TOKENS)}"
        return f"q{token_id - self.first_trigger}"

    def vocab(self) -> dict[str, int]:
        """Every token's name and id.

        Returns:
            ``{name: id}``.

        Example:
            >>> BackcopySpec(n_plain=2, n_triggers=1).vocab()
            {'<unk>': 0, '<s>': 1, '</s>': 2, '<pad>': 3, 'w0': 4, 'w1': 5, 'q0': 6}
        """
        return {self.token_name(i): i for i in range(self.vocab_size)}


def bigram_table(spec: BackcopySpec) -> torch.Tensor:
    """The transition table of the plain tokens: row a is the distribution of the token after plain token a.

    Columns are the task ids from the first plain token on (plain tokens, then
    triggers): each row gives ``trigger_rate`` to the triggers, shared equally,
    and ``1 − trigger_rate`` to the plain tokens, as a Dirichlet(``concentration``)
    draw seeded by ``table_seed``.

    Args:
        spec: The task.

    Returns:
        float64 [n_plain, n_plain + n_triggers], rows summing to 1.

    Example:
        >>> table = bigram_table(BackcopySpec(n_plain=5, n_triggers=2, trigger_rate=0.2))
        >>> table.shape, bool(torch.allclose(table.sum(1), torch.ones(5, dtype=torch.float64)))
        (torch.Size([5, 7]), True)
        >>> table[:, 5:].sum(1).tolist() == [0.2] * 5
        True
    """
    rows = np.random.default_rng(spec.table_seed).dirichlet(np.full(spec.n_plain, spec.concentration), size=spec.n_plain)
    draws = torch.from_numpy(rows)
    plain = draws / draws.sum(dim=1, keepdim=True) * (1 - spec.trigger_rate)  # (re)normalized in float64
    triggers = torch.full((spec.n_plain, spec.n_triggers), spec.trigger_rate / spec.n_triggers, dtype=torch.float64)
    return torch.cat([plain, triggers], dim=1)


def chains(spec: BackcopySpec, n_chains: int, length: int, seed: int, table: torch.Tensor | None = None) -> torch.Tensor:
    """``n_chains`` independent chains of the task, ``length`` tokens each after a burn-in of :data:`BURN_IN` steps.

    Each chain starts at a uniform plain token (its "token before" is plain
    too), then: after a plain token, the next is drawn from its row of
    :func:`bigram_table`; after a trigger, the next is the token before the trigger.

    Args:
        spec: The task.
        n_chains: Chains.
        length: Tokens kept per chain.
        seed: The seed of the draws.
        table: The bigram table (default: :func:`bigram_table` of ``spec``).

    Returns:
        Token ids, int64 [n_chains, length].

    Example:
        >>> spec = BackcopySpec(n_plain=6, n_triggers=2, trigger_rate=0.3)
        >>> x = chains(spec, 4, 200, seed=0)
        >>> trig = x >= spec.first_trigger
        >>> bool((x[:, 2:][trig[:, 1:-1]] == x[:, :-2][trig[:, 1:-1]]).all())  # after a trigger: the token before it
        True
        >>> bool((trig[:, 1:] & trig[:, :-1]).any()), torch.equal(x, chains(spec, 4, 200, seed=0))  # never two triggers in a row
        (False, True)
    """
    table = bigram_table(spec) if table is None else table
    cdf = table.cumsum(dim=1)
    cdf[:, -1] = 1.0  # no draw falls past the last column by rounding
    generator = torch.Generator().manual_seed(seed)
    offset = len(SPECIAL_TOKENS)
    before = torch.randint(0, spec.n_plain, (n_chains,), generator=generator)
    current = torch.randint(0, spec.n_plain, (n_chains,), generator=generator)  # column indices (0 = w0)
    out = torch.empty((n_chains, length), dtype=torch.int64)
    for step in range(BURN_IN + length):
        u = torch.rand(n_chains, generator=generator, dtype=torch.float64)
        is_trigger = current >= spec.n_plain
        drawn = torch.searchsorted(cdf[current.clamp(max=spec.n_plain - 1)], u[:, None]).squeeze(1)
        following = torch.where(is_trigger, before, drawn)
        before, current = current, following
        if step >= BURN_IN:
            out[:, step - BURN_IN] = current + offset
    return out


def backcopy_tokenizer(spec: BackcopySpec) -> Any:
    """The task's tokenizer: one word per token, split on white space, with the byte tokenizer's special ids.

    Saved with every trained model, it maps the held-out text (space-separated
    token names) back to the task's ids; it adds no BOS by itself (``make_corpus`` puts it at position 0).

    Args:
        spec: The task.

    Returns:
        A transformers ``PreTrainedTokenizerFast``.

    Example:
        >>> tok = backcopy_tokenizer(BackcopySpec())
        >>> tok("w0 w1 q3").input_ids, tok.bos_token_id, tok.eos_token_id, len(tok)
        ([4, 5, 67], 1, 2, 68)
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.WordLevel(vocab=spec.vocab(), unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    core.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins the words with spaces
    return PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>", bos_token="<s>", eos_token="</s>", pad_token="<pad>")


def text_of(spec: BackcopySpec, tokens: torch.Tensor) -> str:
    """Token ids as the task's text: their names, separated by spaces.

    Args:
        spec: The task.
        tokens: 1-D token ids.

    Returns:
        The text.

    Example:
        >>> spec = BackcopySpec()
        >>> text_of(spec, torch.tensor([4, 67, 5]))
        'w0 q3 w1'
        >>> backcopy_tokenizer(spec)(text_of(spec, torch.tensor([4, 67, 5]))).input_ids
        [4, 67, 5]
    """
    names = [spec.token_name(i) for i in range(spec.vocab_size)]
    return " ".join(names[int(i)] for i in tokens.tolist())


@dataclass
class BackcopyData:
    """The task's training chains and held-out chain, with the batches the trainer draws.

    Attributes:
        spec: The task.
        train: The training chains, [train_chains, chain_len].
        held_out: The held-out chain (1-D).
        sha256: The sha256 of the spec and both streams: the data's identity.

    Example:
        >>> data = load_backcopy(BackcopySpec(train_chains=4, chain_len=64, held_out_len=256))
        >>> data.train.shape, data.held_out.shape, data.vocab_size
        (torch.Size([4, 64]), torch.Size([256]), 68)
    """

    spec: BackcopySpec
    train: torch.Tensor
    held_out: torch.Tensor
    sha256: str

    task = "bigram-backcopy"

    @property
    def vocab_size(self) -> int:
        """The model's vocabulary: the task's tokens and the special tokens.

        Example:
            >>> load_backcopy(BackcopySpec(train_chains=2, chain_len=8, held_out_len=8)).vocab_size
            68
        """
        return self.spec.vocab_size

    def tokenizer(self) -> Any:
        """The tokenizer saved with every model (:func:`backcopy_tokenizer`).

        Returns:
            The tokenizer.

        Example:
            >>> load_backcopy(BackcopySpec(train_chains=2, chain_len=8, held_out_len=8)).tokenizer()("w1").input_ids
            [5]
        """
        return backcopy_tokenizer(self.spec)

    def describe(self) -> dict:
        """What the data is, for the logs: the task, its constants, the stream sizes and the hash.

        Returns:
            A JSON-ready dict.

        Example:
            >>> load_backcopy(BackcopySpec(train_chains=2, chain_len=8, held_out_len=8)).describe()["task"]
            'bigram-backcopy'
        """
        return {
            "task": self.task,
            **asdict(self.spec),
            "vocab_size": self.vocab_size,
            "burn_in": BURN_IN,
            "train_tokens": int(self.train.numel()),
            "held_out_tokens": int(self.held_out.numel()),
            "sha256": self.sha256,
        }

    def batch(self, seq_len: int, batch_size: int, generator: torch.Generator) -> torch.Tensor:
        """``batch_size`` training sequences: BOS, then ``seq_len − 1`` tokens of a random chain at a random offset.

        Args:
            seq_len: Tokens per sequence T, BOS included.
            batch_size: Sequences.
            generator: The seed's generator (advanced by the call).

        Returns:
            Token ids, [batch_size, seq_len].

        Raises:
            InputError: When a chain is shorter than a sequence.

        Example:
            >>> data = load_backcopy(BackcopySpec(train_chains=4, chain_len=64, held_out_len=64))
            >>> x = data.batch(16, 3, torch.Generator().manual_seed(0))
            >>> x.shape, x[:, 0].tolist()
            (torch.Size([3, 16]), [1, 1, 1])
        """
        span = seq_len - 1
        n_chains, length = self.train.shape
        if length < span:
            raise InputError(f"the training chains hold {length} tokens, too few for sequences of {seq_len}; use a shorter seq_len")
        rows = torch.randint(0, n_chains, (batch_size,), generator=generator)
        starts = torch.randint(0, length - span + 1, (batch_size,), generator=generator)
        windows = self.train[rows[:, None], starts[:, None] + torch.arange(span)[None, :]]
        return torch.cat([torch.full((batch_size, 1), BOS_ID, dtype=windows.dtype), windows], dim=1)

    def held_out_tokens(self, seq_len: int, n_seqs: int) -> torch.Tensor:
        """``n_seqs`` held-out sequences at evenly spaced offsets of the held-out chain (BOS first): the same on every call.

        Args:
            seq_len: Tokens per sequence, BOS included.
            n_seqs: Sequences.

        Returns:
            Token ids, [n_seqs, seq_len].

        Example:
            >>> data = load_backcopy(BackcopySpec(train_chains=2, chain_len=8, held_out_len=100))
            >>> data.held_out_tokens(10, 3)[:, 0].tolist()
            [1, 1, 1]
        """
        from poslens.zoo.data import held_out_batch

        return held_out_batch(self.held_out, seq_len, n_seqs)

    def write_held_out(self, path: str | Path) -> Path:
        """Write the held-out chain as a JSONL file of one ``{"name", "text"}`` line, for ``--corpus``.

        Args:
            path: The ``.jsonl`` file.

        Returns:
            ``path``.

        Example:
            >>> import tempfile, pathlib
            >>> data = load_backcopy(BackcopySpec(train_chains=2, chain_len=8, held_out_len=16))
            >>> path = data.write_held_out(pathlib.Path(tempfile.mkdtemp()) / "held_out.jsonl")
            >>> text = json.loads(path.read_text())["text"]
            >>> data.tokenizer()(text).input_ids == data.held_out.tolist()
            True
        """
        line = json.dumps({"name": "bigram-backcopy held-out chain", "text": text_of(self.spec, self.held_out)})
        return atomic_write(Path(path), lambda tmp: tmp.write_text(line + "\n", encoding="utf-8"))


def load_backcopy(spec: BackcopySpec | None = None) -> BackcopyData:
    """The task's streams: ``train_chains`` training chains and one held-out chain, from their seeds.

    Args:
        spec: The task (default :class:`BackcopySpec`).

    Returns:
        The :class:`BackcopyData`.

    Example:
        >>> a = load_backcopy(BackcopySpec(train_chains=2, chain_len=32, held_out_len=32))
        >>> b = load_backcopy(BackcopySpec(train_chains=2, chain_len=32, held_out_len=32))
        >>> a.sha256 == b.sha256, torch.equal(a.train, b.train), torch.equal(a.train[0], a.held_out)
        (True, True, False)
    """
    spec = spec or BackcopySpec()
    table = bigram_table(spec)
    train = chains(spec, spec.train_chains, spec.chain_len, spec.train_seed, table)
    held_out = chains(spec, 1, spec.held_out_len, spec.held_out_seed, table)[0]
    digest = hashlib.sha256(json.dumps(asdict(spec), sort_keys=True).encode())
    for stream in (train, held_out):
        digest.update(stream.to(torch.int16).numpy().tobytes())
    return BackcopyData(spec, train.to(torch.int16).long(), held_out, digest.hexdigest())
