"""Sliced images in the turn-based prompt: the token sequence MiniCPM-o's processor writes for them
(its placeholder text tokenized, each run of 64 <unk> replaced by an embedding block, blocks in
order), llama.cpp-omni's layout, and video frames as plain blocks."""

import numpy as np
import pytest
from reference.image_processor import ReferenceSlicer

from llama_omni_py._native import core
from llama_omni_py.modelset import spec as ms
from llama_omni_py.modules.llm.prompt import EncodedMessage, turn_based_prompt
from llama_omni_py.modules.vpm import EncodedImage
from llama_omni_py.vision import plan_slices

UNK = "<unk>" * 64


@pytest.fixture(scope="module")
def model(tiny_dir):
    return core.LlmModel(str(next(tiny_dir.glob(ms.LLM_FILE_GLOB))), "cpu")


def _image(model, size, image: int) -> EncodedImage:
    """Blocks filled with 100 * image + their index, to check which block lands where."""
    grid = plan_slices(*size, 9).grid
    n = 1 + (grid[0] * grid[1] if grid else 0)
    rows = [np.full((64, model.info.n_embd_inp), 100 * image + k, np.float32) for k in range(n)]
    return EncodedImage(tuple(rows), grid)


def _flat(prompt) -> list:
    """Token ids, and ("block", fill value) for each embedding block."""
    out = []
    for kind, x in prompt.segments:
        out += list(x) if kind == "tokens" else [("block", float(x[0, 0]))]
    return out


def _expected(model, text: str, fills: list) -> list:
    """``text`` tokenized with each 64-<unk> run replaced by the next block."""
    out, pieces = [], text.split(UNK)
    for i, piece in enumerate(pieces):
        out += list(model.tokenize(piece, True)) if piece else []
        if i < len(pieces) - 1:
            out.append(("block", fills[i]))
    return out


@pytest.mark.parametrize("sizes", [[(1344, 1008)], [(448, 448), (4000, 300)], [(300, 4000), (960, 540), (1, 1)]])
def test_images_are_the_processors_placeholders(model, sizes):
    images = [_image(model, s, i) for i, s in enumerate(sizes)]
    question = EncodedMessage((*(("image", im) for im in images), ("text", "What does the page say?")))
    prompt = turn_based_prompt(model, user=question, style="reference")
    ref = ReferenceSlicer(use_image_id=True)
    # the reference's chat joins a message's parts (here the images, then the text) by newlines
    text = "\n".join(ref.placeholder(s, i) for i, s in enumerate(sizes))
    fills = [100 * i + k for i, img in enumerate(images) for k in range(len(img.blocks))]
    want = _expected(model, text, fills)
    got = _flat(prompt)
    head = list(model.tokenize("<|im_start|>user\n", True))
    start = next(i for i in range(len(got)) if got[i : i + len(head)] == head) + len(head)
    assert got[start : start + len(want)] == want
    after = list(model.tokenize("\nWhat", False))
    assert got[start + len(want) :][: len(after)] == after
    assert prompt.token_count() == len(got) - len(fills) + 64 * len(fills)


def test_without_image_ids_and_in_llama_cpp_omni_layout(model):
    image = _image(model, (960, 540), 0)  # grid (2, 1)
    plain = _flat(turn_based_prompt(model, user=EncodedMessage((("image", image), ("text", "q"))), image_ids=False))
    want = _expected(model, "<image>" + UNK + "</image>" + ("<slice>" + UNK + "</slice>") * 2, [0, 1, 2])
    assert any(plain[i : i + len(want)] == want for i in range(len(plain)))
    question = EncodedMessage((("image", image), ("text", "q")))
    lco = _flat(turn_based_prompt(model, user=question, image_layout="llama.cpp-omni"))
    want = _expected(model, "<image>" + UNK + "</image>" + ("<slice>" + UNK + "</slice>") * 2 + "\n", [0, 1, 2])
    assert any(lco[i : i + len(want)] == want for i in range(len(lco)))
    assert model.find_token("<image_id>") not in lco


def test_video_frames_are_plain_blocks_without_ids(model):
    frame = np.full((64, model.info.n_embd_inp), 7, np.float32)
    question = EncodedMessage((("image", _image(model, (20, 20), 0)), ("frame", frame), ("text", "q")))
    got = _flat(turn_based_prompt(model, user=question, style="reference"))
    assert got.count(model.find_token("<image_id>")) == 1  # the image, not the frame
    want = _expected(model, "<image>" + UNK + "</image>", [7.0])
    assert any(got[i : i + len(want)] == want for i in range(len(got)))
