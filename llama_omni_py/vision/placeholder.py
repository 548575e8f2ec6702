"""Where an image's embedding blocks go in the prompt, in each layout (docs/media-and-encoders.md,
"Prompt slots"). A layout is a list of parts: text (with special tokens) and the index of an
embedding block (0 the overview, then the slices row by row).

* ``reference`` -- MiniCPM-o's processor: ``[<image_id>N</image_id>]<image>{0}</image>`` then the
  grid's rows of ``<slice>{k}</slice>``, rows joined by a newline (none after the last).
* ``duplex`` -- the reference's duplex prefill: ``<image>{0}</image>`` then every
  ``<slice>{k}</slice>``, no ids, no newlines.
* ``llama.cpp-omni`` -- ``<image>{0}</image>``, every ``<slice>{k}</slice>``, then one newline
  when there were slices.
"""

from __future__ import annotations

LAYOUTS = ("reference", "duplex", "llama.cpp-omni")


def placeholder_parts(grid: tuple[int, int] | None, layout: str, image_id: int | None = None) -> list:
    """The parts of one image with ``grid`` (columns, rows; None: the overview only).
    ``image_id`` is written before the image (reference layout only; None: no id)."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    head = f"<image_id>{image_id}</image_id>" if layout == "reference" and image_id is not None else ""
    parts: list = [head + "<image>", 0, "</image>"]
    cols, rows = grid or (0, 0)
    block = 1
    for r in range(rows):
        for _ in range(cols):
            parts += ["<slice>", block, "</slice>"]
            block += 1
        if layout == "reference" and r < rows - 1:
            parts.append("\n")
    if layout == "llama.cpp-omni" and rows:
        parts.append("\n")
    return _merged(parts)


def _merged(parts: list) -> list:
    """Adjacent text parts joined into one."""
    out: list = []
    for p in parts:
        if isinstance(p, str) and out and isinstance(out[-1], str):
            out[-1] += p
        else:
            out.append(p)
    return out
