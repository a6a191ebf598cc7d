"""Typed errors of the library; ``icmlkit.cli._common`` maps each to an exit code.

The library never prints or exits: it raises one of these with a one-line message that names
the file, the line or field, and what was expected.
"""
from __future__ import annotations


class IcmlkitError(Exception):
    """Base class. ``exit_code`` is what the command line exits with."""

    exit_code = 1


class InputError(IcmlkitError):
    """Bad input data (exit 1). Build it with :func:`input_error` to get a uniform message."""

    def __init__(self, message: str, path: str | None = None, line: int | None = None):
        where = ""
        if path is not None:
            where = f"{path}"
            if line is not None:
                where += f", line {line}"
            where += ": "
        super().__init__(where + message)
        self.path = path
        self.line = line


class UsageError(IcmlkitError):
    """Parameters that do not fit together (exit 2)."""

    exit_code = 2


class CheckFailed(IcmlkitError):
    """The run finished but a check the user asked for failed (exit 3)."""

    exit_code = 3


class EnvironmentProblem(IcmlkitError):
    """An optional extra or a device is missing (exit 4); the message carries the install hint."""

    exit_code = 4


def require_module(module: str, extra: str, package: str | None = None):
    """Import ``module`` or raise :class:`EnvironmentProblem` with the exact install hint."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:  # pragma: no cover - depends on the environment
        pkg = package or module
        raise EnvironmentProblem(
            f"{module} is not installed ({exc}); install it with: pip install 'icmlkit[{extra}]' "
            f"(or pip install {pkg})"
        ) from None
    except Exception as exc:  # noqa: BLE001 - installed but broken (e.g. a wheel built for another torch)
        raise EnvironmentProblem(
            f"{module} is installed but fails to import ({type(exc).__name__}: {exc}); it was most likely built for "
            f"another version of its dependencies (e.g. a torchvision wheel for a CUDA torch): reinstall the build "
            f"that matches them"
        ) from None
