"""The harnesses' scored code paths, restated here from their sources, run on the extraction table
of test_eval_extract.py: what each official scorer grades must be what llama_omni_py.eval.extract
reads, reply for reply, and the scores over a run must agree too.

Each path is followed from the reply to the number it scores: which field the scorer reads, and
which function wrote that field. Written for this test from reading the sources named at each
function; nothing here is imported from them.
"""

from __future__ import annotations

import re

import pytest
from test_eval_extract import CHOICES, TABLE

from llama_omni_py.eval import extract as X
from llama_omni_py.eval.scoring import accuracy, letters

TTS_EOS = "<|tts_eos|>"

# --- OmniEvalKit (github.com/OpenBMB/OmniEvalKit, 1adac05) ----------------------------------------
# o_e_Kit/models/minicpm/minicpmo.py MiniCPMO._generate_chat: the chat() reply with <|tts_eos|>
# removed, stripped. o_e_Kit/utils/infer.py run_inference: stored as the record's "prediction".
# o_e_Kit/utils/eval.py evaluate_dataset -> o_e_Kit/utils/metrics/evaluator_mqa.py MQAEvaluator:
# eval() reads "prediction"; the choices are annotation["choices"] keyed A, B, ... in order.


def kit_prediction(reply: str) -> str:
    return reply.replace(TTS_EOS, "").strip()


def _kit_templates() -> list[str]:
    # MQAEvaluator._build_extraction_templates: each template, then it with ".", ",", ":" and ")" after
    base = [
        *("答案是#", "答案是:#", "答案是：#", "答案是 #", "答案是选项#", "答案应该是#", "答案选#", "#是正确"),
        *("选项#是最合适的", "正确答案是#", "应该选#", "选择#"),
        *("the answer is #", "the correct answer is #", "answer is #", "answer: #", "the answer is (#)"),
        *("the answer is option #", "would select #", "would choose #", "would select option #"),
        *("would choose option #", "# is the best answer", "# is correct", "option # is correct"),
        *("the best answer is #", "the best option is #", 'the answer is "#"', "the answer is '#'"),
        *("answer is: #", "answer is (#)", "(#)", "option #", "**#**", "**#.", "**#)", "is #", "is: #"),
        *("would be #", "is option #", ": #", "\\boxed{#}", "\\text{#}"),
    ]
    return [t + tail for t in base for tail in ("", ".", ",", ":", ")")]


KIT_TEMPLATES = _kit_templates()


def kit_rule_letter(record: dict) -> str | None:
    """MQAEvaluator.eval's rules on one record: templates, patterns, option content."""
    options = dict(zip("ABCDEFGHIJ", record["annotation"]["choices"]))
    text = " ".join(str(record["prediction"]).lower().split())  # _normalize_text (ignore_case)
    for template in KIT_TEMPLATES:  # _extract_by_templates: template first, then each choice
        for key in options:
            if template.replace("#", key.lower()) in text:
                return key
    if len(text) <= 3:  # _extract_by_patterns
        for key in options:
            if key in text.upper():
                return key
    for key in options:
        if text.startswith(key.lower()) and (len(text) == 1 or text[1] in ".,;:) \n"):
            return key
    for bracket in (r"\(([A-D])\)", r"\[([A-D])\]", r"（([A-D])）"):
        for hit in re.findall(bracket, text.upper()):
            if hit in options:
                return hit
    for key, content in options.items():  # _extract_by_content_matching
        c = str(content).lower()
        if c and (c == text or (len(c) > 3 and c in text and len(c) / len(text) > 0.5)):
            return key
    return None


def kit_judge_sees(record: dict) -> bool:
    """BaseEvaluator.evaluate_single keeps a rule's letter only when it scores 1.0; any other reply
    goes on to the sentence-embedding match and GPT-4o-mini."""
    return kit_rule_letter(record) != record["annotation"]["gt_answer"]


# --- llama.cpp-omni evaluation/ (hNSBQZ/llama.cpp-omni b1d40d9, zengjun123/llama.cpp-omni-bench-
# huawei-zj c80f55c, lucahttp/llama.cpp-omni b06198f) ----------------------------------------------


def lco_extract_answer(response_text: str, drop_tts_eos: bool) -> str:
    """{daily-omni,videomme}/eval_cpp_pipeline.py extract_answer (only Daily-Omni's drops <|tts_eos|>)."""
    text = (response_text.replace(TTS_EOS, "") if drop_tts_eos else response_text).strip()
    if text == "":
        return ""
    bare = text.rstrip(".").strip()
    if len(bare) == 1 and bare.upper() in "ABCD":
        return bare.upper()
    hit = re.search(r"(?<![a-zA-Z])([A-D])(?![a-zA-Z])", text)
    return hit.group(1) if hit else ""


def lco_daily_record(reply: str, gold: str) -> dict:
    """daily-omni/eval_cpp_pipeline.py process_sample sets "prediction" = extract_answer(reply)
    (and keeps "raw_response" in memory); format_output writes prediction and annotation only."""
    return {"prediction": lco_extract_answer(reply, drop_tts_eos=True), "annotation": {"gt_answer": gold}}


TWELVE_PREFIXES = (
    *("The best answer is", "The correct answer is", "The answer is", "The answer", "The best option is"),
    *("The correct option is", "Best answer:", "Best option:", "Answer:", "Option:", "The correct answer"),
    "The correct option",
)


def daily_extract_characters_regex(s: str) -> str:
    """daily-omni/eval_daily_omni_result.py extract_characters_regex."""
    s = s.strip()
    if s == "":
        return ""
    for prefix in TWELVE_PREFIXES:
        s = s.replace(prefix, "")
    s = s.replace(TTS_EOS, "").strip()
    bare = s.rstrip(".").strip()
    if len(bare) == 1 and bare.upper() in "ABCD":
        return bare.upper()
    if len(s.split()) > 10 and re.search("[ABCD]", s) is None:
        return ""
    hit = re.search("[ABCD]", s)
    return hit.group(0) if hit else ""


def daily_scorer_letter(record: dict) -> str:
    """eval_daily_omni_results: a record's "prediction", or, when empty, extract_characters_regex of
    its "raw_response" -- a field the pipeline's output does not have."""
    return record.get("prediction", "") or daily_extract_characters_regex(record.get("raw_response", ""))


def lco_videomme_question(reply: str, gold: str) -> dict:
    """videomme/eval_cpp_pipeline.py process_video: "response" = extract_answer(reply), <|tts_eos|> kept."""
    return {"response": lco_extract_answer(reply, drop_tts_eos=False), "answer": gold}


def videomme_extract_characters_regex(s: str) -> str:
    """videomme/eval_your_result.py extract_characters_regex, its list as written: Python joins the
    adjacent literals where two commas are missing."""
    s = s.strip()
    for prefix in [
        "The best answer is",
        "The correct answer is",
        "The answer is",
        "The answer",
        "The best option isThe correct option is",  # two literals, a comma missing between them
        "Best answer:Best option:",  # likewise
        "Answer:",
        "Option:",
        "The correct answer",
        "The correct option",
    ]:
        s = s.replace(prefix, "")
    if len(s.split()) > 10 and re.search("[ABCD]", s) is None:
        return ""
    hit = re.search(r"[ABCD]", s)
    return hit.group(0) if hit else ""


def videomme_scorer_letter(question: dict) -> str:
    """eval_your_results: extract_characters_regex of the question's "response" field."""
    return videomme_extract_characters_regex(question["response"])


# --- vLLM-Omni (github.com/vllm-project/vllm-omni) -----------------------------------------------
# vllm_omni/benchmarks/patch/patch.py async_request_openai_chat_omni_completions: generated_text is
# the delta "content" of every streamed chunk whose "modality" is "text", concatenated; benchmark()
# hands the outputs to the dataset's scorer.


def sse_chunks(reply: str) -> list[dict]:
    """The reply as a server streams it: text pieces, an audio chunk between them."""
    pieces = [reply[i : i + 3] for i in range(0, len(reply), 3)] or [""]
    chunks = [{"modality": "text", "choices": [{"delta": {"content": p}}]} for p in pieces]
    chunks.insert(1, {"modality": "audio", "choices": [{"delta": {"content": "UklGRg=="}}]})
    return chunks


def generated_text(chunks: list[dict]) -> str:
    text = ""
    for chunk in chunks:
        if chunk.get("choices") and chunk.get("modality") == "text":
            text += chunk["choices"][0]["delta"].get("content") or ""
    return text


def vo_daily_letter(text: str | None) -> str | None:
    """vllm_omni/benchmarks/data_modules/daily_omni_eval.py (3aa84c4) extract_predicted_choice in its
    default mode, extract_choice_letter_official: nothing is removed from the text but what comes
    before "assistant"."""
    if not text or not str(text).strip():
        return None
    whole = str(text).strip()
    tail = re.search(r"assistant\s*([\s\S]*)$", whole, flags=re.IGNORECASE)
    part = tail.group(1).strip() if tail else whole
    lead = re.match(r"(?i)^\s*([A-D])(?:[\s\.\):：]|$)", part)
    if lead:
        return lead.group(1).upper()
    word = re.search(r"\b([A-D])\b", part.upper())
    if word:
        return word.group(1)
    loose = [m.group(1) for m in re.finditer(r"(?:[^A-Za-z]|^)([A-D])(?:[^A-Za-z]|$)", part, flags=re.IGNORECASE)]
    return loose[-1].upper() if loose else None


def vo_videomme_letter(text: str | None) -> str | None:
    """vllm_omni/benchmarks/data_modules/videomme_eval.py extract_characters_regex: the official list
    with its two glued strings split apart."""
    if not text:
        return None
    s = str(text).strip()
    for prefix in TWELVE_PREFIXES:  # the Daily-Omni scorer's list, in its order
        s = s.replace(prefix, "")
    if len(s.split()) > 10 and re.search(r"[ABCD]", s) is None:
        return None
    hit = re.search(r"[ABCD]", s)
    return hit.group(0) if hit else None


# --- the table, reply by reply ------------------------------------------------------------------


def official(reply: str) -> tuple:
    """Every harness's scored letter of one reply, in the table's column order."""
    kit = kit_rule_letter({"prediction": kit_prediction(reply), "annotation": {"choices": CHOICES, "gt_answer": ""}})
    text = generated_text(sse_chunks(reply))
    return (
        kit,
        lco_extract_answer(reply, drop_tts_eos=True),
        daily_scorer_letter(lco_daily_record(reply, "")),
        videomme_scorer_letter(lco_videomme_question(reply, "")),
        vo_daily_letter(text),
        vo_videomme_letter(text),
    )


@pytest.mark.parametrize("reply", list(TABLE))
def test_official_code_paths_read_the_table(reply):
    assert official(reply) == TABLE[reply]


@pytest.mark.parametrize("reply", list(TABLE))
def test_our_extractors_agree_with_the_official_code_paths(reply):
    kit, lco, daily, vmme, vo_daily, vo_vmme = official(reply)
    assert X.evalkit_letter(reply, CHOICES) == kit
    assert X.llama_cpp_omni_letter(reply) == lco
    assert X.daily_omni_scorer_letter(reply) == daily
    assert X.videomme_scorer_letter(reply) == vmme
    assert X.vllm_omni_letter(reply, "daily-omni") == vo_daily
    assert X.vllm_omni_letter(reply, "videomme") == vo_vmme


def test_daily_omni_scorer_reads_the_prediction_not_the_reply():
    # the scorer's own regex would read B from "Based"; the pipeline's prediction is C
    reply = "Based on the video, C"
    record = lco_daily_record(reply, "C")
    assert "raw_response" not in record and daily_extract_characters_regex(reply) == "B"
    assert daily_scorer_letter(record) == X.daily_omni_scorer_letter(reply) == "C"
    # an unread reply stays unanswered: the fallback has no raw_response to read
    assert daily_scorer_letter(lco_daily_record("Because of the noise", "B")) == ""
    assert X.daily_omni_regex_letter("Because of the noise") == "B"
    assert X.daily_omni_scorer_grade("", raw_response="Because of the noise") == "B"  # had it been written


def _gold(i: int) -> str:
    return "ABCD"[i % 4]


def _records(benchmark: str) -> list[dict]:
    """One successful request per table row (gold answers cycling A-D), a failed request and an
    item whose media is missing."""
    out = [
        {"ok": True, "raw": reply, "answer": _gold(i), "letters": letters(reply, CHOICES, benchmark)}
        for i, reply in enumerate(TABLE)
    ]
    out.append({"ok": False, "raw": "", "answer": "A", "letters": {}})
    out.append({"ok": False, "missing": True, "raw": "", "answer": "B", "letters": {}})
    return out


def test_scores_over_a_run_are_the_official_ones():
    replies = list(TABLE)
    n_ok = len(replies)

    # llama.cpp-omni Daily-Omni: eval_daily_omni_results, correct / answered (a non-empty prediction)
    graded = [daily_scorer_letter(lco_daily_record(r, _gold(i))) for i, r in enumerate(replies)]
    answered = [(g, _gold(i)) for i, g in enumerate(graded) if g]
    ours = accuracy(_records("daily-omni"), "daily-omni-scorer")
    assert (ours["correct"], ours["answered"]) == (sum(g == a for g, a in answered), len(answered))

    # llama.cpp-omni Video-MME: eval_your_results, correct / answered (a letter extracted)
    graded = [videomme_scorer_letter(lco_videomme_question(r, _gold(i))) for i, r in enumerate(replies)]
    answered = [(g, _gold(i)) for i, g in enumerate(graded) if g != ""]
    ours = accuracy(_records("videomme"), "videomme-scorer")
    assert (ours["correct"], ours["answered"]) == (sum(g == a for g, a in answered), len(answered))

    # vLLM-Omni: correct / successful requests (an unread reply is wrong, a failed request left out)
    for benchmark, read in (("daily-omni", vo_daily_letter), ("videomme", vo_videomme_letter)):
        correct = sum(read(generated_text(sse_chunks(r))) == _gold(i) for i, r in enumerate(replies))
        ours = accuracy(_records(benchmark), "vllm-omni")
        assert (ours["correct"], ours["successful"]) == (correct, n_ok)

    # OmniEvalKit: what its rules get right over every item; every other successful reply goes to
    # its fallbacks, which our count names
    kit = [
        {"prediction": kit_prediction(r), "annotation": {"choices": CHOICES, "gt_answer": _gold(i)}}
        for i, r in enumerate(replies)
    ]
    ours = accuracy(_records("daily-omni"), "evalkit")
    assert (ours["correct"], ours["all"]) == (sum(not kit_judge_sees(k) for k in kit), n_ok + 2)
    from llama_omni_py.eval.scoring import counts

    assert counts(_records("daily-omni"))["judged_by_evalkit_fallbacks"] == sum(map(kit_judge_sees, kit))
