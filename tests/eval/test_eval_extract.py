"""Each harness's letter extraction on replies whose letters its scored code path gives (the table
of docs/evaluation.md#scores; tests/eval/test_official_scorers.py runs the restated official code
paths on the same table), prompts to the letter, and llama.cpp-omni's stratified Video-MME
sampling."""

import pytest

from llama_omni_py.errors import InvalidArgumentError
from llama_omni_py.eval import extract as X
from llama_omni_py.eval.datasets import McqItem, stratified
from llama_omni_py.eval.protocols import keyed_options, protocol, relabelled_options

CHOICES = [
    "A. A man playing a guitar",
    "B. A dog barking at the door",
    "C. Two children laughing",
    "D. Rain falling on a roof",
]

# reply: the letter each scored code path reads --
#   OmniEvalKit's rules (evalkit_letter; None: only its fallbacks could read it),
#   llama.cpp-omni's extract_answer (llama_cpp_omni_letter),
#   llama.cpp-omni's Daily-Omni score (its scorer on the pipeline's prediction field),
#   llama.cpp-omni's Video-MME score (Video-MME's scorer on the pipeline's response field),
#   vLLM-Omni's Daily-Omni and Video-MME scoring of the streamed text (None: no letter).
TABLE = {
    "B": ("B", "B", "B", "B", "B", "B"),
    "B.": ("B", "B", "B", "B", "B", "B"),
    "b": ("B", "B", "B", "B", "B", None),
    "(C)": ("C", "C", "C", "C", "C", "C"),
    "C)": ("C", "C", "C", "C", "C", "C"),
    "The answer is D.": ("D", "D", "D", "D", "D", "D"),
    "Answer: B": ("B", "B", "B", "B", "B", "B"),
    "The best option is C": ("C", "C", "C", "C", "C", "C"),
    "Best answer: D": ("D", "D", "D", "D", "D", "D"),
    "答案是C": ("C", "C", "C", "C", "C", "C"),
    "选B": ("B", "B", "B", "B", "B", "B"),
    "**A**": ("A", "A", "A", "A", "A", "A"),
    "\\boxed{D}": ("D", "D", "D", "D", "D", "D"),
    "[B]": ("B", "B", "B", "B", "B", "B"),
    "D. Rain falling on a roof": ("D", "D", "D", "D", "D", "D"),
    "Rain falling on a roof": (None, "", "", "", "A", None),
    "The correct option isB": (None, "", "", "", None, "B"),
    "I think it is a dog, so B": ("A", "B", "B", "B", "A", "B"),
    # a capitalised word starting with A-D: the official scorers' regex alone would read its first letter
    "Based on the video, B": (None, "B", "B", "B", "B", "B"),
    "Based on the video, C": (None, "C", "C", "C", "C", "B"),
    "Based on the video, option C is correct.": ("C", "C", "C", "C", "C", "B"),
    "Because of the noise": (None, "", "", "", None, "B"),
    "Definitely C": (None, "C", "C", "C", "C", "D"),
    "Definitely D": (None, "D", "D", "D", "D", "D"),
    "Dogs bark, so B": (None, "B", "B", "B", "B", "D"),
    "Children laughing, so D": (None, "D", "D", "D", "D", "C"),
    "Answer C. Two children laughing": ("C", "C", "C", "C", "C", "A"),
    "Both A and B": (None, "A", "A", "A", "A", "B"),
    "A dog is barking at the door": ("B", "A", "A", "A", "A", "A"),  # the kit's "is [X]" reads "is b"
    "A man playing a guitar is shown.": ("A", "A", "A", "A", "A", "A"),
    # several letters
    "BD": ("B", "", "", "", None, "B"),
    "DB": ("B", "", "", "", None, "D"),
    "D, B": ("D", "D", "D", "D", "D", "D"),
    "C or D": ("C", "C", "C", "C", "C", "C"),
    "The answer is C or D": ("C", "C", "C", "C", "C", "C"),
    "A and B are wrong; the answer is C": ("C", "A", "A", "A", "A", "A"),
    # lower case and punctuation
    "c. two children": ("C", "", "", "", "C", None),
    "I choose: d": ("D", "", "", "", "D", None),
    "It's C.": (None, "C", "C", "C", "C", "C"),
    "I'd say b.": (None, "", "", "", "D", None),
    # vLLM-Omni reads what follows "assistant"
    "assistant\nC": (None, "C", "C", "C", "C", "C"),
    # a thinking block in the text: every scorer reads it as it stands
    "<think>\nIt could be A.\n</think>\nC": (None, "A", "A", "A", "A", "A"),
    "<think>\n\n</think>\n\nB": (None, "B", "B", "B", "B", "B"),
    # the TTS end marker: the Video-MME pipeline keeps it, the letter survives
    "B<|tts_eos|>": ("B", "B", "B", "B", "B", "B"),
    "B.<|tts_eos|>": ("B", "B", "B", "B", "B", "B"),
    "<|tts_eos|>": (None, "", "", "", None, None),
    # nothing to read
    "None of the above": (None, "", "", "", None, None),
    "": (None, "", "", "", None, None),
    "   ": (None, "", "", "", None, None),
}


@pytest.mark.parametrize("reply", list(TABLE))
def test_each_harness_reads_its_letter(reply):
    evalkit, lco, daily, vmme, vo_daily, vo_vmme = TABLE[reply]
    assert X.evalkit_letter(reply, CHOICES) == evalkit
    assert X.llama_cpp_omni_letter(reply) == lco
    assert X.daily_omni_scorer_letter(reply) == daily
    assert X.videomme_scorer_letter(reply) == vmme
    assert X.vllm_omni_letter(reply) == vo_daily
    assert X.vllm_omni_letter(reply, "videomme") == vo_vmme


def test_evalkit_matches_option_text_over_half_the_reply():
    cities = ["London", "Berlin", "Paris", "Madrid"]
    assert X.evalkit_letter("Paris", cities) == "C"
    assert X.evalkit_letter("It's Paris", cities) is None  # 5 of 10 characters is not more than half
    assert X.evalkit_letter("The capital is definitely Paris, the city of light", cities) == "D"  # "is d"


def test_videomme_regex_keeps_its_missing_commas():
    # "The correct option is" is glued to "The best option is" in its list, so it is never removed
    assert X.videomme_regex_letter("The correct option is B") == "B"
    assert X.videomme_regex_letter("The best option isThe correct option is C") == "C"
    assert X.videomme_regex_letter("The best option is D") == "D"  # "The best option is" alone stays too
    long = "this reply has many words but not a single capital letter among them at all really"
    assert X.videomme_regex_letter(long) == "" and X.daily_omni_regex_letter(long) == ""


def test_official_scorers_read_the_pipelines_letter_not_the_reply():
    # their regexes would read the first capital A-D of "Based"; the field they grade holds C
    assert X.daily_omni_regex_letter("Based on it, C") == "B" and X.videomme_regex_letter("Based on it, C") == "B"
    assert X.daily_omni_scorer_letter("Based on it, C") == X.videomme_scorer_letter("Based on it, C") == "C"
    # an empty prediction falls back to a raw_response field the pipeline never writes
    assert X.daily_omni_scorer_letter("Because of the noise") == ""
    assert X.daily_omni_scorer_grade("", "Because of the noise") == "B"
    assert X.daily_omni_scorer_grade("D", "Because of the noise") == "D"


def test_vllm_omni_videomme_strips_all_twelve_prefixes():
    assert X.vllm_omni_letter("The correct option is C", "videomme") == "C"
    assert X.vllm_omni_letter("", "videomme") is None


def test_vllm_omni_keeps_a_thinking_block():
    reply = "<think>\nIt could be A.\n</think>\nC"
    assert X.vllm_omni_letter(reply) == "A" and X.vllm_omni_letter(reply, "videomme") == "A"


def test_prompts_to_the_letter():
    ek = protocol("evalkit", "daily-omni").prompt("What barks?", CHOICES)
    assert ek == (
        "Carefully read the following question and select the letter corresponding to the correct answer."
        "Highlight the applicable choices without giving explanations.\nWhat barks?\nOptions:\n"
        "A. A. A man playing a guitar\nB. B. A dog barking at the door\nC. C. Two children laughing\n"
        "D. D. Rain falling on a roof\nPlease select the correct answer from the options above. "
        "Only respond with the letter."
    )
    assert protocol("llama.cpp-omni", "daily-omni").prompt("What barks?", CHOICES) == ek
    lco_vmme = protocol("llama.cpp-omni", "videomme").prompt("Q?", ["A. one", "B. two"])
    assert lco_vmme.endswith("Options:\nA. one\nB. two")  # no closing sentence, the parquet's own prefixes
    vo = protocol("vllm-omni", "videomme").prompt("Q?", ["A. one", "B. two"])
    assert "Options:\nA. one\nB. two\nPlease select" in vo  # relabelled: no "A. A."
    vo_daily = protocol("vllm-omni", "daily-omni").prompt("What barks?", CHOICES)
    assert vo_daily.startswith(
        "Your task is to accurately answer multiple-choice questions based on the given video and audio together.\n"
    )
    assert "Choices: A. A man playing a guitar\nB. A dog" in vo_daily and vo_daily.endswith("other text.\n")
    assert keyed_options(["x", "y"]) == "A. x\nB. y"
    assert relabelled_options(["B. x", "A. y"]) == "A. B. x\nB. A. y"  # not in order: kept as they are


def _items(n_videos, keys):
    return [
        McqItem(f"{v}-{q}", str(v), None, None, "q", ("A", "B"), "A", dict(zip(("d", "s"), keys(v))))
        for v in range(n_videos)
        for q in range(3)
    ]


def test_stratified_sampling_is_llama_cpp_omnis():
    items = _items(10, lambda v: ("short", "x"))
    chosen = stratified(items, 0.5, ("d", "s"))
    assert sorted({it.video_id for it in chosen}, key=int) == ["1", "3", "5", "7", "9"]
    assert len(chosen) == 15  # every question of a chosen video
    grid = [
        McqItem(f"{d}{s}{v}", f"{d}-{s}-{v}", None, None, "q", ("A",), "A", {"d": d, "s": s})
        for d in ("short", "medium", "long")
        for s in range(30)
        for v in range(10)
    ]
    picked = stratified(grid, 0.5, ("d", "s"))
    assert len(picked) == 450
    per = {}
    for it in picked:
        per[(it.groups["d"], it.groups["s"])] = per.get((it.groups["d"], it.groups["s"]), 0) + 1
    assert set(per.values()) == {5}
    two = _items(6, lambda v: ("short", "a" if v < 3 else "b"))
    assert len({it.video_id for it in stratified(two, 0.5, ("d", "s"))}) == 3
    for bad in (0, -0.1, 1.1):
        with pytest.raises(InvalidArgumentError, match="ratio"):
            stratified(items, bad, ("d",))
