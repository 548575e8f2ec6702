"""The answer letter of a multiple-choice reply, as each harness's scored code path reads it
(docs/evaluation.md#scores).

Each function restates the function whose output a harness actually scores -- the field its
scorer reads and the function that wrote that field -- and they disagree on purpose, because the
harnesses do:

* :func:`evalkit_letter` -- OmniEvalKit: ``MQAEvaluator.eval`` on the ``prediction`` field.
* :func:`llama_cpp_omni_letter` -- llama.cpp-omni's pipelines: ``extract_answer`` on the reply.
* :func:`daily_omni_scorer_letter` -- llama.cpp-omni's Daily-Omni score: its scorer on the record
  the pipeline writes (the ``prediction`` field, written by ``extract_answer``).
* :func:`videomme_scorer_letter` -- llama.cpp-omni's Video-MME score: Video-MME's
  ``extract_characters_regex`` on the ``response`` field, written by ``extract_answer``.
* :func:`vllm_omni_letter` -- ``vllm bench serve --omni``: its Daily-Omni and Video-MME scoring on
  the streamed text.

Each docstring names the sources read. llama.cpp-omni's ``evaluation/`` suite was read in the
copies published at github.com/hNSBQZ/llama.cpp-omni (b1d40d9),
github.com/zengjun123/llama.cpp-omni-bench-huawei-zj (c80f55c) and
github.com/lucahttp/llama.cpp-omni (b06198f); where two of them hold a file, the functions named
read the same. Its ``*/rerun_failed.py`` reruns an item whose field holds no letter and writes
``extract_answer``'s letter back, so the field stays that function's output.
"""

from __future__ import annotations

import re

LETTERS = "ABCDEFGHIJ"

# The evaluation kit's answer templates, in its order ([CHOICE] is the letter, lower case, matched
# as a plain substring of the lower-cased, single-spaced reply; its variants with a trailing
# ".", ",", ":" or ")" can only match where these do, so they change nothing).
EVALKIT_TEMPLATES = (
    "答案是[CHOICE]",
    "答案是:[CHOICE]",
    "答案是：[CHOICE]",
    "答案是 [CHOICE]",
    "答案是选项[CHOICE]",
    "答案应该是[CHOICE]",
    "答案选[CHOICE]",
    "[CHOICE]是正确",
    "选项[CHOICE]是最合适的",
    "正确答案是[CHOICE]",
    "应该选[CHOICE]",
    "选择[CHOICE]",
    "the answer is [CHOICE]",
    "the correct answer is [CHOICE]",
    "answer is [CHOICE]",
    "answer: [CHOICE]",
    "the answer is ([CHOICE])",
    "the answer is option [CHOICE]",
    "would select [CHOICE]",
    "would choose [CHOICE]",
    "would select option [CHOICE]",
    "would choose option [CHOICE]",
    "[CHOICE] is the best answer",
    "[CHOICE] is correct",
    "option [CHOICE] is correct",
    "the best answer is [CHOICE]",
    "the best option is [CHOICE]",
    'the answer is "[CHOICE]"',
    "the answer is '[CHOICE]'",
    "answer is: [CHOICE]",
    "answer is ([CHOICE])",
    "([CHOICE])",
    "option [CHOICE]",
    "**[CHOICE]**",
    "**[CHOICE].",
    "**[CHOICE])",
    "is [CHOICE]",
    "is: [CHOICE]",
    "would be [CHOICE]",
    "is option [CHOICE]",
    ": [CHOICE]",
    "\\boxed{[CHOICE]}",
    "\\text{[CHOICE]}",
)
_EVALKIT_BRACKETS = (r"\(([A-D])\)", r"\[([A-D])\]", r"（([A-D])）")

# The answer prefixes of the official scorers: Daily-Omni's list (also vLLM-Omni's Video-MME list,
# which splits the two strings Video-MME's source glues together), and Video-MME's as its source
# has it (two missing commas join four of them into two strings, which then never match).
DAILY_OMNI_PREFIXES = (
    "The best answer is",
    "The correct answer is",
    "The answer is",
    "The answer",
    "The best option is",
    "The correct option is",
    "Best answer:",
    "Best option:",
    "Answer:",
    "Option:",
    "The correct answer",
    "The correct option",
)
VIDEOMME_PREFIXES = (
    "The best answer is",
    "The correct answer is",
    "The answer is",
    "The answer",
    "The best option isThe correct option is",
    "Best answer:Best option:",
    "Answer:",
    "Option:",
    "The correct answer",
    "The correct option",
)
TTS_EOS = "<|tts_eos|>"


def evalkit_letter(reply: str, choices: list[str]) -> str | None:
    """OmniEvalKit's reading of a reply. ``MiniCPMO._generate_chat`` removes ``<|tts_eos|>`` and
    strips the reply, ``run_inference`` stores it as the ``prediction`` field, and
    ``MQAEvaluator.eval`` reads that field (lower-cased, single-spaced): its templates (each over
    every letter, in order), then a reply of at most 3 characters holding a letter, a leading
    letter followed by ``.,;:)``, a space or a newline, a bracketed A-D, then an option's text
    making up more than half of the reply.

    The kit then sends every reply whose letter is missing *or wrong* to a sentence-embedding
    match and to GPT-4o-mini (``BaseEvaluator.evaluate_single`` keeps a rule's letter only when it
    is correct); neither runs offline, so this is the rules' letter, and None where they found
    none.

    Source: github.com/OpenBMB/OmniEvalKit 1adac05, ``o_e_Kit/models/minicpm/minicpmo.py``
    ``MiniCPMO._generate_chat``, ``o_e_Kit/utils/infer.py`` ``run_inference``,
    ``o_e_Kit/utils/eval.py`` ``evaluate_dataset``, ``o_e_Kit/utils/metrics/evaluator_mqa.py``
    ``MQAEvaluator.eval`` and ``o_e_Kit/utils/metrics/evaluator_base.py``
    ``BaseEvaluator.evaluate_single``."""
    text = " ".join(str(reply).replace(TTS_EOS, "").strip().lower().split())
    letters = LETTERS[: min(len(choices), len(LETTERS))] or "ABCD"
    for template in EVALKIT_TEMPLATES:
        for letter in letters:
            if template.replace("[CHOICE]", letter.lower()) in text:
                return letter
    if len(text) <= 3:
        for letter in letters:
            if letter in text.upper():
                return letter
    for letter in letters:
        if text.startswith(letter.lower()) and (len(text) == 1 or text[1] in ".,;:) \n"):
            return letter
    for pattern in _EVALKIT_BRACKETS:
        for found in re.findall(pattern, text.upper()):
            if found in letters:
                return found
    for letter, content in zip(letters, choices):
        c = str(content).lower()
        if not c:
            continue
        if c == text or (len(c) > 3 and c in text and len(c) / max(1, len(text)) > 0.5):
            return letter
    return None


def llama_cpp_omni_letter(reply: str, strip_tts_eos: bool = True) -> str:
    """llama.cpp-omni's ``extract_answer``: a lone letter (a trailing period dropped, lower case
    accepted), else the first capital A-D touching no other ASCII letter; "" when there is none.
    The Daily-Omni pipeline removes ``<|tts_eos|>`` first; the Video-MME one does not
    (``strip_tts_eos=False``).

    Source: llama.cpp-omni ``evaluation/daily-omni/eval_cpp_pipeline.py`` and
    ``evaluation/videomme/eval_cpp_pipeline.py``, ``extract_answer``."""
    text = (str(reply).replace(TTS_EOS, "") if strip_tts_eos else str(reply)).strip()
    if not text:
        return ""
    cleaned = text.rstrip(".").strip()
    if len(cleaned) == 1 and cleaned.upper() in "ABCD":
        return cleaned.upper()
    m = re.search(r"(?<![a-zA-Z])([A-D])(?![a-zA-Z])", text)
    return m.group(1) if m else ""


def _strip_prefixes(s: str, prefixes) -> str:
    for p in prefixes:
        s = s.replace(p, "")
    return s


def daily_omni_regex_letter(s: str) -> str:
    """The ``extract_characters_regex`` of llama.cpp-omni's Daily-Omni scorer: its answer prefixes
    removed, then ``<|tts_eos|>``; a lone letter; "" for more than ten words without a capital
    A-D; else the first capital A-D anywhere, inside a word too.

    Source: llama.cpp-omni ``evaluation/daily-omni/eval_daily_omni_result.py``
    ``extract_characters_regex``."""
    s = str(s).strip()
    if not s:
        return ""
    s = _strip_prefixes(s, DAILY_OMNI_PREFIXES).replace(TTS_EOS, "").strip()
    cleaned = s.rstrip(".").strip()
    if len(cleaned) == 1 and cleaned.upper() in "ABCD":
        return cleaned.upper()
    if len(s.split()) > 10 and not re.search(r"[ABCD]", s):
        return ""
    m = re.search(r"[ABCD]", s)
    return m.group(0) if m else ""


def daily_omni_scorer_grade(prediction: str, raw_response: str | None = None) -> str:
    """``eval_daily_omni_results`` on one record: its ``prediction`` field as it stands; only an
    empty one falls back to :func:`daily_omni_regex_letter` of its ``raw_response`` field.

    Source: llama.cpp-omni ``evaluation/daily-omni/eval_daily_omni_result.py``
    ``eval_daily_omni_results``."""
    return prediction if prediction else daily_omni_regex_letter(raw_response or "")


def daily_omni_scorer_letter(reply: str) -> str:
    """llama.cpp-omni's Daily-Omni score of a reply: ``process_sample`` sets ``prediction`` to
    ``extract_answer(reply)`` and ``format_output`` writes no ``raw_response`` field, so the
    scorer's fallback reads nothing and the letter is :func:`llama_cpp_omni_letter`'s ("" leaves
    the item unanswered).

    Source: llama.cpp-omni ``evaluation/daily-omni/eval_cpp_pipeline.py`` ``process_sample`` and
    ``format_output``, then ``evaluation/daily-omni/eval_daily_omni_result.py``
    ``eval_daily_omni_results``."""
    return daily_omni_scorer_grade(llama_cpp_omni_letter(reply))


def videomme_regex_letter(s: str) -> str:
    """Video-MME's official ``extract_characters_regex``: its prefix list as written (missing
    commas kept), "" for more than ten words without a capital A-D, else the first capital A-D
    anywhere.

    Source: llama.cpp-omni ``evaluation/videomme/eval_your_result.py``
    ``extract_characters_regex``."""
    s = _strip_prefixes(str(s).strip(), VIDEOMME_PREFIXES)
    if len(s.split()) > 10 and not re.search(r"[ABCD]", s):
        return ""
    m = re.search(r"[ABCD]", s)
    return m.group(0) if m else ""


def videomme_scorer_letter(reply: str) -> str:
    """llama.cpp-omni's Video-MME score of a reply: ``process_video`` writes
    ``extract_answer(reply)`` (``<|tts_eos|>`` kept) as the ``response`` field, which
    ``eval_your_results`` reads through :func:`videomme_regex_letter`.

    Source: llama.cpp-omni ``evaluation/videomme/eval_cpp_pipeline.py`` ``process_video`` and
    ``format_output``, then ``evaluation/videomme/eval_your_result.py`` ``eval_your_results``."""
    return videomme_regex_letter(llama_cpp_omni_letter(reply, strip_tts_eos=False))


def vllm_omni_letter(reply: str, benchmark: str = "daily-omni") -> str | None:
    """``vllm bench serve --omni``'s letter of the streamed text, as it stands (no ``<think>``
    block is removed). Daily-Omni (``extract_choice_letter_official``, the default mode): the text
    after the first "assistant", a leading letter followed by white space, ``.``, ``)``, ``:``,
    ``：`` or the end, the first standalone letter of the upper-cased text, the last letter
    between non-letters. Video-MME (``extract_characters_regex``): all twelve prefixes removed,
    then as Video-MME's scorer. None: no letter.

    Source: github.com/vllm-project/vllm-omni: ``vllm_omni/benchmarks/patch/patch.py``
    ``async_request_openai_chat_omni_completions`` (``generated_text``: the ``content`` of every
    streamed chunk whose ``modality`` is ``text``, concatenated) and ``benchmark`` (hands the
    outputs to ``vllm_omni/benchmarks/data_modules/daily_omni_eval.py`` (3aa84c4)
    ``compute_daily_omni_accuracy_metrics`` -> ``extract_predicted_choice`` ->
    ``extract_choice_letter_official``); ``vllm_omni/benchmarks/data_modules/videomme_eval.py``
    ``compute_videomme_accuracy_metrics`` (the same outputs) -> ``extract_characters_regex``."""
    if reply is None or not str(reply).strip():
        return None
    raw = str(reply).strip()
    if benchmark == "videomme":
        s = _strip_prefixes(raw, DAILY_OMNI_PREFIXES)
        if len(s.split()) > 10 and not re.search(r"[ABCD]", s):
            return None
        m = re.search(r"[ABCD]", s)
        return m.group(0) if m else None
    m = re.search(r"assistant\s*([\s\S]*)$", raw, flags=re.IGNORECASE)
    candidate = m.group(1).strip() if m else raw
    m = re.match(r"(?i)^\s*([A-D])(?:[\s\.\):：]|$)", candidate)
    if m:
        return m.group(1).upper()
    m = re.search(r"\b([A-D])\b", candidate.upper())
    if m:
        return m.group(1)
    found = re.findall(r"(?:[^A-Za-z]|^)([A-D])(?:[^A-Za-z]|$)", candidate, flags=re.IGNORECASE)
    return found[-1].upper() if found else None
