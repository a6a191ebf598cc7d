"""PNG figures (matplotlib is the optional ``plot`` extra): one place for the backend and saving."""
from __future__ import annotations

import io
import os

from icmlkit.lib.core.errors import EnvironmentProblem
from icmlkit.lib.core.io import write_bytes


def pyplot(required: bool = True):
    """``matplotlib.pyplot`` on the non-interactive Agg backend.

    Without matplotlib: :class:`EnvironmentProblem` (exit 4, with the install hint) when
    ``required``, else None so that a caller can skip an optional figure.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        if required:
            raise EnvironmentProblem("matplotlib is not installed; install it with: pip install 'icmlkit[plot]'") from None
        return None
    return plt


def save_png(fig, path: str | os.PathLike, dpi: int = 100) -> None:
    """Save ``fig`` as PNG atomically, with no timestamp or version metadata (same bytes on rerun),
    and close it."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, metadata={"Software": None})
    pyplot().close(fig)
    write_bytes(path, buf.getvalue())
