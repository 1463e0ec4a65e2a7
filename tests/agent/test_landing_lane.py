"""The line in which would-be keeps settle: one at a time in the order they entered, until it opens."""

import threading
import time

from agent.steps.sharing import LandingLane, Stopping


def enter_in_thread(lane, experiment_id, entered, check=lambda: None, told=None):
    def go():
        try:
            lane.enter(experiment_id, check, None if told is None else told.append)
            entered.append(experiment_id)
        except Stopping:
            entered.append(f"{experiment_id} stopped")
    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    return thread


def settled(predicate, seconds=3.0):
    deadline = time.monotonic() + seconds
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.02)
    return predicate()


def test_the_second_waits_for_the_first_and_the_third_for_the_second():
    lane, entered, told = LandingLane(), [], []
    lane.enter("0001", lambda: None)
    enter_in_thread(lane, "0002", entered, told=told)
    assert settled(lambda: told == ["0001"])
    enter_in_thread(lane, "0003", entered)
    time.sleep(0.5)
    assert entered == []
    lane.enter("0001", lambda: None)  # the one at the front enters again (judged again after a re-base)
    lane.leave("0001")
    assert settled(lambda: entered == ["0002"])
    time.sleep(0.5)
    assert entered == ["0002"]
    lane.leave("0002")
    assert settled(lambda: entered == ["0002", "0003"])


def test_an_open_lane_lets_everyone_through_and_a_stopping_loop_ends_the_wait():
    lane, entered = LandingLane(), []
    lane.enter("0001", lambda: None)
    stop = threading.Event()

    def check():
        if stop.is_set():
            raise Stopping("the loop is stopping")
    enter_in_thread(lane, "0002", entered, check=check)
    enter_in_thread(lane, "0003", entered)
    time.sleep(0.3)
    stop.set()
    assert settled(lambda: entered == ["0002 stopped"])
    lane.open()
    assert settled(lambda: entered == ["0002 stopped", "0003"])
    lane.enter("0004", lambda: None)  # returns at once


def test_leaving_without_having_entered_changes_nothing():
    lane, entered = LandingLane(), []
    lane.leave("0009")
    enter_in_thread(lane, "0001", entered)
    assert settled(lambda: entered == ["0001"])
    lane.leave("0009")
    enter_in_thread(lane, "0002", entered)
    time.sleep(0.3)
    assert entered == ["0001"]
