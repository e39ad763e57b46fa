"""The zoo's members: one architecture class (Mistral), the position scheme varied and nothing else.

Mistral's config holds both knobs the family needs, ``rope_theta`` and
``sliding_window`` (``None``: full causal attention), and poslens loads and
bridges it (its sliding window included). So every member is a
``MistralForCausalLM`` with the same width, depth, heads, vocabulary and
initial weights for a seed; :func:`member_config` changes only the two fields.

The members (:data:`MEMBERS`):

- ``standard``: RoPE θ = 10⁴;
- ``large-base-trained``: RoPE θ = 10⁶, *trained* with that base ("large base (trained)"; not NTK scaling at inference time);
- ``sliding``: RoPE θ = 10⁴ with a sliding window of T/8 keys (64 at T = 512), in every layer.

NoPE is left out (:data:`NOPE_NOTE` says why).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from poslens.errors import InputError

#: Why the family has no NoPE member.
NOPE_NOTE = (
    "NoPE is left out: Mistral (like Llama and Qwen2) has no setting that turns RoPE off, and the one class in "
    "transformers that does it per layer beside rope_theta and a sliding window (SmolLM3, no_rope_layers) is refused "
    "by poslens.load_model, which treats every layer as a RoPE layer (poslens/model/loading.py refuses NoPE layers: "
    "the recorded RoPE bases, the RoPE variants and the mask-only counterfactual all assume rotated queries and keys). "
    "Accepting NoPE layers is more than a few lines of the loader, so no member here is NoPE."
)


@dataclass(frozen=True)
class Member:
    """One member of the family: its position scheme.

    Attributes:
        name: The member's name (a key of :data:`MEMBERS`, the folder prefix).
        label: How tables and figures name it.
        rope_theta: The RoPE base θ it is trained with.
        windowed: Whether every layer has a sliding window (of :func:`sliding_window` keys).

    Example:
        >>> MEMBERS["large-base-trained"].label, MEMBERS["large-base-trained"].rope_theta
        ('large base (trained)', 1000000.0)
    """

    name: str
    label: str
    rope_theta: float
    windowed: bool = False


#: The family's members by name: their labels, RoPE bases and whether they are windowed.
MEMBERS: dict[str, Member] = {
    "standard": Member("standard", "standard RoPE (θ = 1e4)", 1e4),
    "large-base-trained": Member("large-base-trained", "large base (trained)", 1e6),
    "sliding": Member("sliding", "sliding window (θ = 1e4)", 1e4, windowed=True),
}
#: The fields of the config that members may differ in; every other field is the same across the family.
POSITION_FIELDS = ("rope_theta", "rope_parameters", "sliding_window")


def sliding_window(seq_len: int) -> int:
    """The sliding member's window for sequences of ``seq_len``: T / 8 keys, at least 2 (64 at T = 512).

    Args:
        seq_len: Tokens per training sequence.

    Returns:
        The window, in keys.

    Example:
        >>> sliding_window(512), sliding_window(64), sliding_window(8)
        (64, 8, 2)
    """
    return max(2, seq_len // 8)


def parse_members(value: str | tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """Member names from a comma list or a sequence, each checked and kept once, in the order given.

    Args:
        value: ``"standard,sliding"`` or ``("standard", "sliding")``.

    Returns:
        The names.

    Raises:
        InputError: When a name is not a member, or none is given.

    Example:
        >>> parse_members("standard, sliding")
        ('standard', 'sliding')
        >>> parse_members("nope")
        Traceback (most recent call last):
        poslens.errors.InputError: unknown zoo member 'nope'; choose from standard, large-base-trained, sliding (NoPE is not a member: ...
    """
    names = [v.strip() for v in value.split(",")] if isinstance(value, str) else [str(v).strip() for v in value]
    names = [name for name in names if name]
    for name in names:
        if name not in MEMBERS:
            raise InputError(
                f"unknown zoo member {name!r}; choose from {', '.join(MEMBERS)} (NoPE is not a member: see poslens.zoo.family.NOPE_NOTE)"
            )
    if not names:
        raise InputError(f"no zoo member given; choose from {', '.join(MEMBERS)}")
    return tuple(dict.fromkeys(names))


def member_config(member: Member | str, width: int, depth: int, heads: int, seq_len: int, vocab_size: int = 260, window: int | None = None) -> Any:
    """The ``MistralConfig`` of a member: the family's shared fields, with the member's RoPE base and window.

    Args:
        member: A :class:`Member` or its name.
        width: The hidden size.
        depth: The number of layers.
        heads: Attention heads per layer (as many key/value heads); ``width`` must be a multiple.
        seq_len: Tokens per training sequence (the context, and the sliding member's window, T / 8).
        vocab_size: The vocabulary (260: :func:`poslens.testing.byte_tokenizer`).
        window: The sliding member's window in keys; ``None``: :func:`sliding_window` (T / 8).

    Returns:
        The config, with ``architectures = ["MistralForCausalLM"]``.

    Raises:
        InputError: When ``width`` is not a multiple of ``heads``, the head size is odd, or a size is below 1.

    Example:
        >>> a, b = member_config("standard", 64, 2, 4, 128), member_config("sliding", 64, 2, 4, 128)
        >>> a.sliding_window, b.sliding_window, b.rope_parameters["rope_theta"], a.head_dim
        (None, 16, 10000.0, 16)
        >>> member_config("sliding", 64, 2, 4, 128, window=32).sliding_window
        32
    """
    from transformers import MistralConfig

    member = MEMBERS[member] if isinstance(member, str) else member
    if min(width, depth, heads, seq_len) < 1 or width % heads or (width // heads) % 2:
        raise InputError(
            f"width {width} must be a positive multiple of heads {heads} with an even head size "
            f"(RoPE rotates pairs of dimensions), and depth {depth} and seq_len {seq_len} at least 1"
        )
    config = MistralConfig(
        vocab_size=vocab_size,
        hidden_size=width,
        intermediate_size=4 * width,
        num_hidden_layers=depth,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        head_dim=width // heads,
        max_position_embeddings=seq_len,
        rope_theta=float(member.rope_theta),
        sliding_window=(window or sliding_window(seq_len)) if member.windowed else None,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=3,
        tie_word_embeddings=False,
        initializer_range=0.02,
    )
    config.architectures = ["MistralForCausalLM"]
    return config


def initial_model(config: Any, seed: int) -> Any:
    """The member's model with the seed's initial weights: the same for every member (their shapes are the same).

    Args:
        config: A config from :func:`member_config`.
        seed: The seed of the initial weights.

    Returns:
        A float32 ``MistralForCausalLM`` (attention: PyTorch's sdpa).

    Example:
        >>> import torch
        >>> a = initial_model(member_config("standard", 32, 1, 2, 16), seed=0)
        >>> b = initial_model(member_config("sliding", 32, 1, 2, 16), seed=0)
        >>> all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
        True
    """
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(config, dtype=torch.float32, attn_implementation="sdpa")
