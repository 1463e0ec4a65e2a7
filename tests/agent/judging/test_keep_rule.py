"""The keep rule's words follow its settings, in the report and in what the model is told."""

from agent.judging.keep_rule import KeepRule, store_keep_rule, stored_keep_rule
from agent.judging.noise import inflated_floor
from agent.proposers.llm import system_prompt
from agent.proposers.night_facts import NightFacts
from agent.report.build import write_report
from agent.settings import LoopSettings


def test_three_sigma_is_said_as_three_in_the_report_and_to_the_model(workspace):
    assert stored_keep_rule(workspace) == KeepRule.of(LoopSettings())  # no night recorded its rule yet
    settings = LoopSettings(keep_sigmas=3, min_delta=0.001)
    store_keep_rule(workspace, KeepRule.of(settings))
    assert stored_keep_rule(workspace).keep_sigmas == 3 and workspace.settings["track"] == "test"

    for said in (write_report(workspace).read_text(), system_prompt("program", 20, NightFacts.of(settings))):
        assert "A gain above 3 sigma is kept at once" in said and "exceeds 3 standard errors" in said
        assert "2 sigma" not in said and "2 standard errors" not in said
        assert "the gain must also exceed 0.001" in said


def test_the_words_follow_each_setting():
    four_seeds = KeepRule(keep_sigmas=2.5, min_delta=0.0, noise_seeds=4).words()
    assert four_seeds.startswith("after the baseline the best commit is re-run with 4 other seed(s)")
    assert "above 2.5 sigma" in four_seeds and "must also exceed" not in four_seeds
    assert KeepRule(keep_sigmas=3, min_delta=0.02, noise_seeds=0).words() == (
        "no noise floor is measured, so a change is kept when its val_bpb beats the best by more than 0.02")
    assert "only gains above 0.15 can be kept" in inflated_floor(0.05, "cpu", keep_sigmas=3)
