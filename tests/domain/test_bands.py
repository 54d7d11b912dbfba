from __future__ import annotations

import pytest

from service.config import QuestionsConfig, SettingInvalid
from service.domain.bands import band

SETTINGS = QuestionsConfig(auto_answer_confidence=0.8, review_confidence=0.5)


@pytest.mark.parametrize(("confidence", "attention", "expected"), [
    (0.95, False, "auto_answer"),
    (0.8, False, "auto_answer"),
    (0.95, True, "review"),  # attention keeps an answer out of the auto-answer band
    (0.79, False, "review"),
    (0.5, False, "review"),
    (0.49, False, "needs_input"),
    (0.2, True, "needs_input"),
    (None, False, "needs_input"),
])
def test_band__follows_the_configured_thresholds(confidence, attention, expected):
    assert band(confidence, attention, SETTINGS) == expected


def test_band__review_threshold_above_auto_answer_is_refused():
    with pytest.raises(SettingInvalid, match="review_confidence"):
        QuestionsConfig(auto_answer_confidence=0.6, review_confidence=0.7)
