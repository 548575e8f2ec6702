"""The answer letter of a multiple-choice reply, as each harness reads it (docs/evaluation.md).

Each function restates one harness's rules in order; they disagree on purpose, because the
harnesses do, and a score moves with them:

* :func:`evalkit_letter` -- the OmniEvalKit's ``MQAEvaluator`` rules (its templates, patterns and
  option-text match), without its sentence-embedding and GPT fallbacks, which cannot run offline:
  what they would have judged is counted as unparsed.
* :func:`llama_cpp_omni_letter` -- llama.cpp-omni's evaluation pipeline (``extract_answer``).
* :func:`daily_omni_scorer_letter` / :func:`videomme_scorer_letter` -- the official scorers it
  hands the results to (Daily-Omni's, and Video-MME's ``extract_characters_regex`` with its two
  missing commas kept).
* :func:`vllm_omni_letter` -- vLLM-Omni's Daily-Omni and Video-MME extraction.
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

# The official scorers' prefixes: Daily-Omni's list, and Video-MME's as its source has it (two
# missing commas join four of them into two strings, which then never match).
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
    """The evaluation kit's rules: templates (each over every letter, in order), then the short
    and leading-letter patterns and bracketed letters, then an option's text making up more than
    half of the reply. None: its fallbacks would have had to judge."""
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
    """llama.cpp-omni's pipeline: a lone letter (a trailing period dropped), else the first A-D
    not touching another ASCII letter; "" when there is none. Its Video-MME pipeline does not
    strip <|tts_eos|> (``strip_tts_eos=False``)."""
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


def daily_omni_scorer_letter(reply: str) -> str:
    """Daily-Omni's official scorer: answer prefixes removed, a lone letter, "" for more than ten
    words without A-D, else the first A-D anywhere (inside a word too)."""
    s = str(reply).strip()
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


def videomme_scorer_letter(reply: str) -> str:
    """Video-MME's official ``extract_characters_regex``: its prefix list as written, "" for more
    than ten words without A-D, else the first A-D anywhere."""
    s = _strip_prefixes(str(reply).strip(), VIDEOMME_PREFIXES)
    if len(s.split()) > 10 and not re.search(r"[ABCD]", s):
        return ""
    m = re.search(r"[ABCD]", s)
    return m.group(0) if m else ""


def vllm_omni_letter(reply: str, benchmark: str = "daily-omni") -> str | None:
    """vLLM-Omni's extraction. Daily-Omni: the text after "assistant", a leading letter, the first
    standalone letter of the upper-cased text, the last letter between non-letters. Video-MME: the
    official prefixes (all twelve), then as Video-MME's scorer."""
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
    unthought = re.sub(r"<think>[\s\S]*?</think>", "", candidate, flags=re.IGNORECASE).strip()
    candidate = unthought or candidate
    m = re.match(r"(?i)^\s*([A-D])(?:[\s\.\):：]|$)", candidate)
    if m:
        return m.group(1).upper()
    m = re.search(r"\b([A-D])\b", candidate.upper())
    if m:
        return m.group(1)
    found = re.findall(r"(?:[^A-Za-z]|^)([A-D])(?:[^A-Za-z]|$)", candidate, flags=re.IGNORECASE)
    return found[-1].upper() if found else None
