"""poslens's exceptions: one hierarchy, each class also the built-in exception it refines.

Every error poslens raises on purpose derives from :class:`PoslensError`, so a
caller can catch all of them at once (the ``poslens`` command prints their
message as one line, never a traceback). Each class also derives from the
built-in exception a Python user would expect (``ValueError`` for a bad value,
``TypeError`` for a wrong type, ``OSError`` for files), so existing
``except ValueError`` code keeps working. Every message names the file, option
or parameter at fault and says what to do. This module is the package's base
layer: it imports nothing from poslens.

Example:
    >>> try:
    ...     raise CorpusError("notes.jsonl:3 is not a JSON object; write one object per line")
    ... except ValueError as error:   # also a PoslensError
    ...     print(type(error).__name__, isinstance(error, PoslensError))
    CorpusError True
"""

from __future__ import annotations


class PoslensError(Exception):
    """Base of every error poslens raises on purpose.

    Example:
        >>> issubclass(InputError, PoslensError), issubclass(OutputConflictError, PoslensError)
        (True, True)
    """


class InputError(PoslensError, ValueError):
    """An option or parameter has a value poslens cannot use (out of range, unknown name).

    Example:
        >>> str(InputError("--tau must lie in (0, 1], got -1"))
        '--tau must lie in (0, 1], got -1'
    """


class ParameterTypeError(PoslensError, TypeError):
    """A Python argument has the wrong type (a tensor where a Corpus is expected, a string where an int is).

    Example:
        >>> issubclass(ParameterTypeError, TypeError)
        True
    """


class CorpusError(InputError):
    """A corpus file cannot be read as text: the message names the file, the line and the fix.

    Example:
        >>> issubclass(CorpusError, ValueError)
        True
    """


class ModelFileError(PoslensError, ValueError):
    """A model folder's files are missing, truncated or damaged.

    Example:
        >>> issubclass(ModelFileError, ValueError)
        True
    """


class NotFoundError(PoslensError, FileNotFoundError):
    """A file or folder the user named (a model folder, a saved result) does not exist or is not what was asked for.

    Example:
        >>> issubclass(NotFoundError, FileNotFoundError)
        True
    """


class MissingPackageError(PoslensError, ModuleNotFoundError):
    """A package that a model, corpus or option needs is not installed: the message names it and the command that installs it.

    Example:
        >>> issubclass(MissingPackageError, ImportError), str(MissingPackageError("reading it needs: pip install datasets"))
        (True, 'reading it needs: pip install datasets')
    """


class InputsChangedError(PoslensError, ValueError):
    """A saved part was made from input files (corpus, model) whose bytes have changed since.

    Example:
        >>> issubclass(InputsChangedError, ValueError)
        True
    """


class SumsMismatchError(PoslensError, ValueError):
    """A result's ``.sums.npz`` is missing, or belongs to another table than the Parquet file beside it.

    Example:
        >>> issubclass(SumsMismatchError, ValueError)
        True
    """


class SumsFormatError(PoslensError, ValueError):
    """A ``.sums.npz`` this poslens cannot read: a newer format, an older one without arrays it needs, objects, or damage.

    Example:
        >>> issubclass(SumsFormatError, ValueError)
        True
    """


class OldLayoutError(PoslensError, ValueError):
    """A study folder holds a part in the layout of an older table format, which this poslens does not reuse or replace.

    Example:
        >>> issubclass(OldLayoutError, ValueError)  # the CLI prints it as one error line
        True
    """


class EditInvariantError(PoslensError, RuntimeError):
    """An edit of the attention broke what it must keep: an edited row that is not finite or does not sum to 1.

    Example:
        >>> issubclass(EditInvariantError, RuntimeError)
        True
    """


class OutputConflictError(PoslensError, FileExistsError):
    """Writing would replace a file that poslens did not write (or that was changed since), or a folder.

    Example:
        >>> issubclass(OutputConflictError, OSError)
        True
    """


class OutputInUseError(PoslensError, RuntimeError):
    """Another poslens process is writing into the same output folder.

    Example:
        >>> issubclass(OutputInUseError, RuntimeError)
        True
    """


class DiskFullError(PoslensError, OSError):
    """A file could not be written because the disk (or a file-size limit) is full.

    Example:
        >>> issubclass(DiskFullError, OSError)
        True
    """


class EarlyWindowWarning(UserWarning):
    """``early`` is not below the sequence length, so the early query window holds every query.

    A warning, not an error: :func:`poslens.measure` goes on (the 'early' rows repeat 'all'). It lives
    here, with the exceptions, so that the ``poslens`` command can silence it (it prints its own note)
    without importing torch; :mod:`poslens.measurement.arguments` re-exports it.

    Example:
        >>> issubclass(EarlyWindowWarning, UserWarning)
        True
    """


class AdvisedWarning(UserWarning):
    """A warning whose advice names parameters, kept apart from its words, so that each caller spells them its own way.

    The text holds ``{name}`` where the advice names a parameter; ``advice`` maps each name to the value advised,
    ``found`` to the value the call had. ``str(warning)`` spells the advice as the Python API takes it
    (``n_seqs=16``); :meth:`spelled` takes another spelling, e.g. a command's flags (``--n-seqs 16``: the
    ``poslens`` command, :mod:`poslens.study.cli_warnings`). ``found`` tells a command which of its options gave
    the value (``--n-seqs`` or ``--relativize-seqs``, when both take a number of sequences).

    Args:
        text: The message, with ``{name}`` for each parameter of ``advice`` (any other brace doubled).
        advice: ``{name: advised value}``.
        found: ``{name: the value the call had}``.

    Example:
        >>> warning = AdvisedWarning("use at least 16 sequences ({n_seqs})", {"n_seqs": 16}, {"n_seqs": 8})
        >>> str(warning)
        'use at least 16 sequences (n_seqs=16)'
        >>> warning.spelled(lambda name, value: f"--{name.replace('_', '-')} {value}")
        'use at least 16 sequences (--n-seqs 16)'
    """

    def __init__(self, text: str, advice: dict | None = None, found: dict | None = None) -> None:
        super().__init__(text, dict(advice or {}), dict(found or {}))

    @property
    def text(self) -> str:
        """The message with ``{name}`` where a parameter is advised."""
        return str(self.args[0])

    @property
    def advice(self) -> dict:
        """``{parameter: advised value}``."""
        return dict(self.args[1])

    @property
    def found(self) -> dict:
        """``{parameter: the value the call had}``."""
        return dict(self.args[2])

    def spelled(self, spell=None) -> str:
        """The message, each advised parameter written by ``spell(name, value)`` (default: the API's ``name=value``).

        Args:
            spell: ``(name, value) -> str``.

        Returns:
            The message.

        Example:
            >>> AdvisedWarning("or pass {groups}", {"groups": 4}).spelled(lambda name, value: f"--{name} {value}")
            'or pass --groups 4'
        """
        spell = spell or (lambda name, value: f"{name}={value}")
        return self.text.format(**{name: spell(name, value) for name, value in self.advice.items()})

    def __str__(self) -> str:
        return self.spelled()


class UnseenOffsetWarning(UserWarning):
    """An offset D of a key-phase edit is not below the sequence length: the edit moves key 0 farther than the corpus shows.

    The ``poslens`` command silences it: the part's own warning (:mod:`poslens.study.part_warnings`) says it
    in the command's flags (``--offsets``, ``--split-offset``) and is recorded with the part.

    Example:
        >>> issubclass(UnseenOffsetWarning, UserWarning)
        True
    """
