"""The multiple-choice protocols of the three harnesses users compare (docs/evaluation.md): the
prompt text to the letter, the video's frames and audio, how the parts are joined, the system and
assistant turns, the decoding, and whose letter extraction and denominator make the headline.

* ``evalkit`` -- MiniCPM-o's own evaluation kit (OmniEvalKit): no system turn, the reference's
  omni layout ("" joins, merged audio), the TTS prefix, 3-beam search with repetition penalty 1.2.
* ``llama.cpp-omni`` -- its evaluation CLIs: the voice-clone system prompt, a newline after every
  frame and audio segment, each segment encoded alone, no TTS prefix, greedy decoding.
* ``vllm-omni`` -- vLLM-Omni's benchmark with MiniCPM-o 4.5: its prompts (Daily-Omni's upstream
  one), no system turn, greedy decoding. The local run lays the user turn out as vLLM-Omni's server
  does for the benchmark's requests (prompt layout "vllm-omni"): the video's frames and audio
  segments in time order, then the text, every part joined by "\n" (Video-MME: the frames, then
  the text). The requests are built by vLLM-Omni's ``vllm_omni/benchmarks/data_modules/
  daily_omni_dataset.py`` (``DailyOmniDataset._get_minicpm_interleaved_parts`` and
  ``_build_daily_omni_openai_messages``: one ``image_url`` and one ``audio_url`` part a frame,
  the text part last) and ``videomme_dataset.py`` (``VideoMMEDataset._build_openai_messages``:
  the ``image_url`` frames, the text last), and sent as they are
  (``vllm_omni/benchmarks/patch/patch.py`` ``async_request_openai_chat_omni_completions``).
  The server, run with ``--interleave-mm-strings`` as vLLM-Omni's MiniCPM-o 4.5 recipe runs it
  for Daily-Omni, keeps each part's placeholder where the part was and joins the parts with
  "\n" (vLLM's ``vllm/entrypoints/chat_utils.py`` ``_parse_chat_message_content_parts`` and
  ``_get_interleaved_text_prompt``); MiniCPM-o 4.5's processor then writes the reference's
  markers for them (``vllm_omni/model_executor/models/minicpmo_4_5/minicpmo_4_5_omni_llm.py``
  ``MiniCPMO45OmniLLMMultiModalProcessor._get_prompt_updates``).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import InvalidArgumentError

PROTOCOLS = ("evalkit", "llama.cpp-omni", "vllm-omni")
KEYS = "ABCDEFGHIJKL"

# OmniEvalKit's omni_mcq user prompt after its "{media}\n" (generation_configs.json, daily_omni and
# videomme): no space after "answer." -- as written there, and reproduced by llama.cpp-omni.
_CAREFULLY = (
    "Carefully read the following question and select the letter corresponding to the correct answer."
    "Highlight the applicable choices without giving explanations.\n{question}\nOptions:\n{options}"
)
EVALKIT_PROMPT = _CAREFULLY + "\nPlease select the correct answer from the options above. Only respond with the letter."
# llama.cpp-omni's Video-MME prompt stops after the options.
LCO_VIDEOMME_PROMPT = _CAREFULLY
# vLLM-Omni's Daily-Omni prompt is the Daily-Omni repository's own.
DAILY_OMNI_UPSTREAM_PROMPT = (
    "Your task is to accurately answer multiple-choice questions based on the {media}.\n"
    "Select the single most accurate answer from the given choices.\n"
    "Question: {question}\nChoices: {choices}\n"
    "Your answer should be a capital letter representing your choice: A, B, C, or D. Don't generate any other text.\n"
)


def keyed_options(choices: list[str]) -> str:
    """``"A. {choice}\\n"`` per choice, stripped at the end: the evaluation kit's and
    llama.cpp-omni's Daily-Omni options. Daily-Omni's choices already start with "A. ", so a line
    reads "A. A. ..." -- as both harnesses send it."""
    return "".join(f"{k}. {c}\n" for k, c in zip(KEYS, choices)).rstrip()


def relabelled_options(choices: list[str]) -> str:
    """vLLM-Omni's options: "A. text" lines; an existing "A. " (or "A、", "A:", "A)") prefix is
    replaced when every choice has the expected one in order, else the text is kept as it is."""
    import re

    stripped = [str(c).strip() for c in choices]
    found = [re.match(r"^([A-L])\s*[.、:：)]\s*(.*)$", c) for c in stripped]
    if all(m and m.group(1) == KEYS[i] for i, m in enumerate(found)):
        stripped = [m.group(2).strip() for m in found]
    return "\n".join(f"{k}. {c}" for k, c in zip(KEYS, stripped))


@dataclass(frozen=True)
class McqProtocol:
    """How one harness runs one multiple-choice benchmark."""

    name: str
    benchmark: str  # "daily-omni" or "videomme"
    max_frames: int
    frame_rule: str  # VideoConfig.frame_rule
    audio: bool  # the video's audio interleaved with its frames
    segments: str  # VideoConfig.segments: "merged" or "separate"
    prompt_style: str  # prompt.LAYOUTS: "reference", "llama.cpp-omni-eval" or "vllm-omni"
    system: bool  # a system turn (llama.cpp-omni's voice-clone prompt) or none
    tts_template: bool  # the assistant turn ends with <|tts_bos|>
    num_beams: int
    repetition_penalty: float  # the decoder's (HF semantics with beams, llama.cpp's otherwise)
    max_new_tokens: int
    extractor: str  # whose letter extraction is this protocol's own
    denominator: str  # "all", "answered" or "successful"

    def prompt(self, question: str, choices: list[str]) -> str:
        """The text part after the media, to the letter."""
        if self.name == "vllm-omni" and self.benchmark == "daily-omni":
            joined = "\n".join(str(c).strip() for c in choices if str(c).strip())
            media = "given video and audio together" if self.audio else "given video"
            return DAILY_OMNI_UPSTREAM_PROMPT.format(media=media, question=question, choices=joined)
        if self.name == "vllm-omni":
            return EVALKIT_PROMPT.format(question=question, options=relabelled_options(choices))
        if self.name == "llama.cpp-omni" and self.benchmark == "videomme":
            return LCO_VIDEOMME_PROMPT.format(question=question, options="\n".join(choices))
        return EVALKIT_PROMPT.format(question=question, options=keyed_options(choices))


_TABLE = {
    # (name, benchmark): max_frames, frame_rule, audio, segments, style, system, tts, beams, penalty, tokens,
    #                    extractor, denominator
    ("evalkit", "daily-omni"): (64, "evalkit", True, "merged", "reference", False, True, 3, 1.2, 128, "evalkit", "all"),
    ("evalkit", "videomme"): (96, "evalkit", False, "merged", "reference", False, True, 3, 1.2, 128, "evalkit", "all"),
    ("llama.cpp-omni", "daily-omni"): (
        64,
        "evalkit",
        True,
        "separate",
        "llama.cpp-omni-eval",
        True,
        False,
        1,
        1.02,
        128,
        "daily-omni-scorer",
        "answered",
    ),
    ("llama.cpp-omni", "videomme"): (
        64,
        "evalkit",
        False,
        "separate",
        "llama.cpp-omni-eval",
        True,
        False,
        1,
        1.02,
        100,
        "videomme-scorer",
        "answered",
    ),
    ("vllm-omni", "daily-omni"): (
        64,
        "minicpmo-utils",
        True,
        "merged",
        "vllm-omni",
        False,
        False,
        1,
        1.0,
        512,
        "vllm-omni",
        "successful",
    ),
    ("vllm-omni", "videomme"): (
        96,
        "vllm-omni",
        False,
        "merged",
        "vllm-omni",
        False,
        False,
        1,
        1.0,
        128,
        "vllm-omni",
        "successful",
    ),
}


def protocol(name: str, benchmark: str, max_frames: int | None = None) -> McqProtocol:
    """The named protocol of a benchmark (``max_frames`` overrides its frame cap)."""
    if (name, benchmark) not in _TABLE:
        raise InvalidArgumentError(f"protocol must be one of {', '.join(PROTOCOLS)}, got {name!r}")
    values = list(_TABLE[(name, benchmark)])
    if max_frames is not None:
        values[0] = max_frames
    return McqProtocol(name, benchmark, *values)
