"""A model the user hands to poslens stays theirs: the bridge is installed only while poslens runs it, and their hooks run or are refused.

Booting a TransformerLens bridge around a transformers model replaces the
model's submodules with the bridge's wrappers (``model.layers[i]`` becomes a
``BlockBridge`` holding the original layer). For a model given in memory,
poslens records, for every module the boot changed, its children, parameters
and buffers as given and as booted (:class:`ModelUse`), and puts the given ones
back at once: the user's model is as it was. Every forward pass of the bridge
(poslens's, or the user's through ``model.bridge``) installs the booted ones for
the pass only. :func:`in_use`, around every forward pass poslens runs
(:func:`poslens.model.hooks.run_with_hooks`), also puts every module in eval
mode and afterwards restores each module's training mode, and removes the
capture hooks TransformerLens wires on the first forward pass of a bridge the
user gave. Nothing is copied: the weights are the user's tensors. (A model
poslens loads from files keeps its bridge: nobody else holds it.)

A hook the user put on a module (a PyTorch forward or pre-hook, or a
TransformerLens hook on a hook point) is run where the bridge calls that
module. The bridge does not call every module: its attention bridge computes
attention from ``q_proj``, ``k_proj``, … itself, so a hook on ``self_attn``
itself would never run. Such a hook is refused
(:class:`~poslens.model.user_hooks.UserHookNotRunError`, naming the module and
the function) rather than silently skipped; which modules the bridge calls is
found once per model, by one forward pass of two tokens with every hook
detached. The hooks found are recorded in each result's provenance
(``meta["model"]["user_hooks"]``, :func:`poslens.model.user_hooks.user_hooks`).
"""

from __future__ import annotations

import contextlib
import functools
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from poslens.errors import PoslensError
from poslens.model.user_hooks import FORWARD_HOOKS, UserHookNotRunError, display_name, function_name, named_hooks, user_functions

_LAYOUT = ("_modules", "_parameters", "_buffers")


class ModelChangedError(PoslensError, ValueError):
    """The user replaced a module of a model poslens wrapped (its bridge would put the old one back while it runs).

    Example:
        >>> issubclass(ModelChangedError, ValueError)
        True
    """


def _layout(module: torch.nn.Module) -> tuple[dict, dict, dict]:
    return tuple(dict(getattr(module, name)) for name in _LAYOUT)  # type: ignore[return-value]


def _set_layout(module: torch.nn.Module, layout: tuple[dict, dict, dict]) -> None:
    for name, content in zip(_LAYOUT, layout, strict=True):
        target = getattr(module, name)
        target.clear()
        target.update(content)


def _same(a: tuple[dict, dict, dict], b: tuple[dict, dict, dict]) -> bool:
    return all(x.keys() == y.keys() and all(x[k] is y[k] for k in x) for x, y in zip(a, b, strict=True))


@dataclass
class ModelUse:
    """How poslens uses one model object the user holds: the modules its bridge replaces, and the user's own modules.

    Attributes:
        roots: ``(prefix, module)`` of the user's objects whose modules, hooks and training modes are theirs
            (a transformers model; a bridge and the model under it; a HookedTransformer).
        runner: What poslens calls for a forward pass (the bridge, or the HookedTransformer).
        given: ``{module: (children, parameters, buffers)}`` as the user gave them, for each module the boot changed.
        booted: The same modules' children, parameters and buffers as the bridge needs them.
        names: A name for each of those modules, for messages.
        called: The ids of the user's modules a full forward pass calls (found on first need).

    Example:
        >>> import tempfile, poslens, poslens.testing
        >>> from transformers import AutoModelForCausalLM, AutoTokenizer
        >>> folder = poslens.testing.save_tiny_model(tempfile.mkdtemp(), "llama")
        >>> hf = AutoModelForCausalLM.from_pretrained(folder); layer = hf.model.layers[0]
        >>> model = poslens.load_model(hf, tokenizer=AutoTokenizer.from_pretrained(folder))
        >>> hf.model.layers[0] is layer, type(model.use).__name__     # the bridge is not left in the user's model
        (True, 'ModelUse')
    """

    roots: list[tuple[str, torch.nn.Module]]
    runner: Any
    given: dict[torch.nn.Module, tuple[dict, dict, dict]] = field(default_factory=dict)
    booted: dict[torch.nn.Module, tuple[dict, dict, dict]] = field(default_factory=dict)
    names: dict[torch.nn.Module, str] = field(default_factory=dict)
    called: set[int] | None = None
    _depth: int = 0
    _installed: int = 0
    _runner_modules: list[torch.nn.Module] | None = None

    @classmethod
    def before_boot(cls, hf: torch.nn.Module) -> dict[torch.nn.Module, tuple[dict, dict, dict]]:
        """Every module of ``hf`` with its children, parameters and buffers, taken before a bridge is booted around it.

        Args:
            hf: the transformers model.

        Returns:
            The snapshot :meth:`after_boot` compares with.

        Example:
            >>> snapshot = ModelUse.before_boot(torch.nn.Sequential(torch.nn.Linear(2, 2)))
            >>> len(snapshot)
            2
        """
        return {module: _layout(module) for module in hf.modules()}

    @classmethod
    def after_boot(cls, hf: torch.nn.Module, bridge: Any, snapshot: dict[torch.nn.Module, tuple[dict, dict, dict]]) -> ModelUse:
        """The use of ``hf`` under ``bridge``, booted since ``snapshot`` (:meth:`before_boot`); ``hf`` is given back as it was.

        Args:
            hf: the transformers model.
            bridge: the bridge booted around it.
            snapshot: :meth:`before_boot` of ``hf``.

        Returns:
            The use, with ``hf`` restored.

        Example:
            >>> net = torch.nn.Sequential(torch.nn.Linear(2, 2))
            >>> snapshot, first = ModelUse.before_boot(net), net[0]
            >>> net[0] = torch.nn.Sequential(first)                 # what a bridge's boot does to a module
            >>> use = ModelUse.after_boot(net, None, snapshot)
            >>> net[0] is first, list(use.names.values())
            (True, ['the model'])
        """
        names = {module: name or "the model" for name, module in hf.named_modules()}
        use = cls(roots=[("", hf)], runner=bridge)
        for module, given in snapshot.items():
            now = _layout(module)
            if not _same(given, now):
                use.given[module], use.booted[module], use.names[module] = given, now, names.get(module, type(module).__name__)
        use.restore()
        if bridge is not None:
            _install_while_running(bridge, use)
        return use

    def fits(self) -> bool:
        """Whether the user's modules are still those poslens recorded (none replaced since).

        Returns:
            True when every recorded module holds the children, parameters and buffers it was given with.

        Example:
            >>> ModelUse(roots=[], runner=None).fits()
            True
        """
        return all(_same(layout, _layout(module)) for module, layout in self.given.items())

    def install(self) -> None:
        """Put the bridge's wrappers in the user's modules (for a forward pass); nested calls count, :meth:`restore` undoes each.

        Raises:
            ModelChangedError: the user replaced one of the modules since the model was wrapped.

        Example:
            >>> ModelUse(roots=[], runner=None).install()
        """
        self._installed += 1
        if self._installed > 1:
            return
        for module, layout in self.given.items():
            if not _same(layout, _layout(module)):
                self._installed = 0
                raise ModelChangedError(
                    f"a submodule, parameter or buffer of {self.names[module]} was replaced since poslens.load_model wrapped the "
                    "model; poslens would run the old one. Wrap the model again: poslens.load_model(model, tokenizer=...)"
                )
        for module, layout in self.booted.items():
            _set_layout(module, layout)

    def restore(self) -> None:
        """Put the user's modules back as they were given (once the outermost :meth:`install` is undone).

        Example:
            >>> ModelUse(roots=[], runner=None).restore()
        """
        self._installed = max(0, self._installed - 1)
        if self._installed:
            return
        for module, layout in self.given.items():
            _set_layout(module, layout)

    def modules(self) -> Iterator[tuple[str, torch.nn.Module]]:
        """The user's modules (each once), with their names.

        Yields:
            ``(name, module)``.

        Example:
            >>> [name for name, _ in ModelUse(roots=[("", torch.nn.Linear(2, 2))], runner=None).modules()]
            ['']
        """
        seen: set[int] = set()
        for prefix, root in self.roots:
            for name, module in root.named_modules(prefix=prefix.rstrip(".")):
                if id(module) not in seen:
                    seen.add(id(module))
                    yield name, module

    def hooks(self) -> list[dict[str, str]]:
        """The user's hooks on the user's modules (:func:`user_hooks`), as provenance records them.

        Returns:
            One record per hook.

        Example:
            >>> ModelUse(roots=[("", torch.nn.Linear(2, 2))], runner=None).hooks()
            []
        """
        return named_hooks(self.modules())

    def check_hooks(self, hooked: list[tuple[str, torch.nn.Module]], probe: torch.Tensor) -> None:
        """Refuse a hook of the user's that a forward pass would skip (on a module the bridge does not call); the bridge installed.

        Args:
            hooked: ``(name, module)`` of the user's modules that hold hooks of the user's.
            probe: two token ids, [1, 2], on the model's device, for the forward pass that finds the modules called.

        Raises:
            UserHookNotRunError: naming the module and the hook's function.

        Example:
            >>> ModelUse(roots=[("", torch.nn.Linear(2, 2))], runner=None).check_hooks([], torch.zeros(1, 2, dtype=torch.long))
        """
        if not hooked:
            return
        if self.called is None:
            self.called = self._modules_called(probe)
        for name, module in hooked:
            if id(module) in self.called or isinstance(module, (torch.nn.ModuleList, torch.nn.ModuleDict)):
                continue  # a container is never called, with or without poslens
            functions = ", ".join(dict.fromkeys(function_name(f) for f in user_functions(module)))
            raise UserHookNotRunError(
                f"the hook {functions} on {display_name(name) or 'the model'} ({type(module).__name__}) would not run: TransformerLens's bridge, "
                "through which poslens runs the model, computes this module's output without calling it. poslens refuses "
                "rather than measure the model without the hook: put it on a module the bridge calls (its q_proj, k_proj, "
                "v_proj or o_proj, or the decoder layer), or remove it to measure the model without it"
            )

    def _modules_called(self, probe: torch.Tensor) -> set[int]:
        """The ids of the user's modules that one full forward pass calls, every hook detached meanwhile."""
        called: set[int] = set()
        modules = [module for _, module in self.modules()]
        detached = {module: {name: getattr(module, name) for name in FORWARD_HOOKS} for module in modules}
        try:
            for module in modules:
                for name in FORWARD_HOOKS:
                    setattr(module, name, OrderedDict())
                module.register_forward_pre_hook(lambda m, args: called.add(id(m)))
            with torch.inference_mode():
                self.runner(probe)
        finally:
            for module, hooks in detached.items():
                for name, hooks_dict in hooks.items():
                    setattr(module, name, hooks_dict)  # the very dicts: the user's handles still remove their hooks
        return called

    @contextlib.contextmanager
    def running(self, probe: torch.Tensor) -> Iterator[None]:
        """The user's model set up for poslens's forward passes, and given back as it was afterwards.

        Installs the bridge, checks the user's hooks (:meth:`check_hooks`), puts every module in eval mode; on
        leaving, restores each module's training mode and the user's modules, and removes the capture hooks
        TransformerLens wired during the pass on a bridge the user gave. Nested uses count once.

        Args:
            probe: two token ids on the model's device (see :meth:`check_hooks`).

        Yields:
            None.

        Example:
            >>> with ModelUse(roots=[("", torch.nn.Linear(2, 2))], runner=None).running(torch.zeros(1, 2, dtype=torch.long)):
            ...     pass
        """
        if self._depth:
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        # one cheap walk of the user's modules (module.eval() walks modules a bridge shares again and again); names
        # are made only when a module holds a hook of the user's
        modules = _walk([root for _, root in self.roots])
        hooked = []
        if any((m._forward_hooks or m._forward_pre_hooks) and user_functions(m) for m in modules):
            hooked = [(name, module) for name, module in self.modules() if user_functions(module)]
        own_bridge = any(root is self.runner for _, root in self.roots)
        blocks = [b for b in _blocks(self.runner) if not getattr(b, "_capture_hooks_wired", True)] if own_bridge else []
        self.install()
        self._depth = 1
        training: list[torch.nn.Module] = []
        try:
            self.check_hooks(hooked, probe)
            if self._runner_modules is None:  # the bridge's own components: poslens's, and fixed once booted
                self._runner_modules = _walk([self.runner]) if isinstance(self.runner, torch.nn.Module) else []
            training = [module for module in modules + self._runner_modules if module.training]
            for module in training:  # eval mode for the pass; each module's own mode back afterwards
                module.training = False
            yield
        finally:
            self._depth = 0
            for block in blocks:  # wired by TransformerLens during this pass: not left on the user's bridge
                if getattr(block, "_capture_hooks_wired", False) and hasattr(block, "_teardown_capture_hooks"):
                    block._teardown_capture_hooks()
            self.restore()
            for module in training:
                module.training = True


def _install_while_running(bridge: Any, use: ModelUse) -> None:
    """Make every forward pass of ``bridge`` (``bridge(...)``, ``run_with_hooks``, ``generate``) install it in the user's model first.

    TransformerLens's ``run_with_hooks`` calls ``self.forward`` directly, so the bridge's own ``forward`` is
    wrapped (an attribute of this one bridge), not hooked: whoever runs the bridge gets it installed, and the
    user's model back afterwards.
    """
    forward = bridge.forward

    @functools.wraps(forward)
    def installed_forward(*args: Any, **kwargs: Any) -> Any:
        use.install()
        try:
            return forward(*args, **kwargs)
        finally:
            use.restore()

    object.__setattr__(bridge, "forward", installed_forward)


def _walk(roots: list[torch.nn.Module]) -> list[torch.nn.Module]:
    """Every module under ``roots``, each once (an iterative walk: named_modules' nested generators cost far more)."""
    seen, found, stack = set(), [], list(reversed(roots))
    while stack:
        module = stack.pop()
        if id(module) not in seen:
            seen.add(id(module))
            found.append(module)
            stack.extend(child for child in reversed(module._modules.values()) if child is not None)
    return found


def _blocks(runner: Any) -> list[Any]:
    """A bridge's blocks (whose capture hooks TransformerLens wires on a first forward pass); none for other runners."""
    blocks = getattr(runner, "blocks", None)
    return list(blocks) if isinstance(blocks, torch.nn.ModuleList) else []


@contextlib.contextmanager
def in_use(model: Any) -> Iterator[None]:
    """Around one of poslens's forward passes of ``model``: its user's model set up, and given back as it was afterwards.

    A :class:`~poslens.model.pos_model.PosModel` without a :class:`ModelUse` (built by hand) is used as it is.

    Args:
        model: the :class:`~poslens.model.pos_model.PosModel`.

    Yields:
        None.

    Raises:
        UserHookNotRunError: a hook of the user's would not run.
        ModelChangedError: a module of the user's was replaced since the model was wrapped.

    Example:
        >>> import tempfile, torch, poslens, poslens.testing
        >>> from transformers import AutoModelForCausalLM, AutoTokenizer
        >>> folder = poslens.testing.save_tiny_model(tempfile.mkdtemp(), "llama")
        >>> hf = AutoModelForCausalLM.from_pretrained(folder).train()
        >>> model = poslens.load_model(hf, tokenizer=AutoTokenizer.from_pretrained(folder))
        >>> with in_use(model):
        ...     type(hf.model.layers[0]).__name__, hf.training
        ('BlockBridge', False)
        >>> type(hf.model.layers[0]).__name__, hf.training
        ('LlamaDecoderLayer', True)
    """
    use = getattr(model, "use", None)
    if use is None:
        yield
        return
    first = model.bos_token_id if model.bos_token_id is not None else 0
    probe = torch.tensor([[first, first]], device=model.device)
    with use.running(probe):
        yield
