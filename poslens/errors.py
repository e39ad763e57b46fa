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
