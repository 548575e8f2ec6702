"""Each harness's letter extraction on replies whose letters its rules give (the table of
docs/evaluation.md#letter-extraction), prompts to the letter, and llama.cpp-omni's stratified
Video-MME sampling."""

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

# reply: (evaluation kit rules, llama.cpp-omni pipeline, Daily-Omni scorer, Video-MME scorer, vLLM-Omni);
# None: no letter
TABLE = {
    "B": ("B", "B", "B", "B", "B"),
    "B.": ("B", "B", "B", "B", "B"),
    "b": ("B", "B", "B", "", "B"),
    "(C)": ("C", "C", "C", "C", "C"),
    "C)": ("C", "C", "C", "C", "C"),
    "The answer is D.": ("D", "D", "D", "D", "D"),
    "Answer: B": ("B", "B", "B", "B", "B"),
    "答案是C": ("C", "C", "C", "C", "C"),
    "选B": ("B", "B", "B", "B", "B"),
    "**A**": ("A", "A", "A", "A", "A"),
    "I think it is a dog, so B": ("A", "B", "B", "B", "A"),
    "D. Rain falling on a roof": ("D", "D", "D", "D", "D"),
    "Rain falling on a roof": (None, "", "", "", "A"),
    "The correct option isB": (None, "", "B", "B", None),
    "A man playing a guitar is shown.": ("A", "A", "A", "A", "A"),
    "Based on the video, option C is correct.": ("C", "C", "B", "B", "C"),
    "BD": ("B", "", "B", "B", None),
    "DB": ("B", "", "D", "D", None),
    "D, B": ("D", "D", "D", "D", "D"),
    "\\boxed{D}": ("D", "D", "D", "D", "D"),
    "[B]": ("B", "B", "B", "B", "B"),
    "None of the above": (None, "", "", "", None),
    "": (None, "", "", "", None),
    "Because of the noise": (None, "", "B", "B", None),
    "assistant\nC": (None, "C", "C", "C", "C"),
    "A and B are wrong; the answer is C": ("C", "A", "A", "A", "A"),
    "Definitely D": (None, "D", "D", "D", "D"),
    "c. two children": ("C", "", "", "", "C"),
    "I choose: d": ("D", "", "", "", "D"),
    "Answer C. Two children laughing": ("C", "C", "A", "A", "C"),
    "It's C.": (None, "C", "C", "C", "C"),
    "I'd say b.": (None, "", "", "", "D"),
    "The answer is C or D": ("C", "C", "C", "C", "C"),
}


@pytest.mark.parametrize("reply", list(TABLE))
def test_each_harness_reads_its_letter(reply):
    evalkit, lco, daily, vmme, vo = TABLE[reply]
    assert X.evalkit_letter(reply, CHOICES) == evalkit
    assert X.llama_cpp_omni_letter(reply) == lco
    assert X.daily_omni_scorer_letter(reply) == daily
    assert X.videomme_scorer_letter(reply) == vmme
    assert X.vllm_omni_letter(reply) == vo


def test_evalkit_matches_option_text_over_half_the_reply():
    cities = ["London", "Berlin", "Paris", "Madrid"]
    assert X.evalkit_letter("Paris", cities) == "C"
    assert X.evalkit_letter("It's Paris", cities) is None  # 5 of 10 characters is not more than half
    assert X.evalkit_letter("The capital is definitely Paris, the city of light", cities) == "D"  # "is d"


def test_videomme_scorer_keeps_its_missing_commas():
    # "The correct option is" is glued to "The best option is" in its list, so it is never removed
    assert X.videomme_scorer_letter("The correct option is B") == "B"
    assert X.videomme_scorer_letter("The best option isThe correct option is C") == "C"
    assert X.daily_omni_scorer_letter("Based on it, C") == "B"  # the first capital A-D anywhere
    long = "this reply has many words but not a single capital letter among them at all really"
    assert X.videomme_scorer_letter(long) == "" and X.daily_omni_scorer_letter(long) == ""


def test_vllm_omni_videomme_strips_all_twelve_prefixes():
    assert X.vllm_omni_letter("The correct option is C", "videomme") == "C"
    assert X.vllm_omni_letter("", "videomme") is None


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
