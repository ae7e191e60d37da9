"""The quiet spell: when the input has been quiet long enough to commit, once a spell (fake clock)."""

from __future__ import annotations

from streamer.kafka.quiet import QuietSpell
from streamer.testing import FakeClock


def test_the_worked_example() -> None:
    clock = FakeClock()
    spell = QuietSpell(0.1, clock)
    seen = []
    for at, heard in [(0.00, True), (0.03, False), (0.05, True), (0.08, False), (0.11, False),
                      (0.14, False), (0.17, False), (0.20, False)]:
        clock.advance(at - clock())
        passed = spell.passed(heard)
        if passed:
            spell.spend()
        seen.append((at, passed))
    assert [at for at, passed in seen if passed] == [0.17]


def test_gaps_shorter_than_the_spell_never_pass() -> None:
    clock = FakeClock()
    spell = QuietSpell(0.1, clock)
    for k in range(200):  # an event every 50 ms, a pass every 10 ms
        clock.advance(0.01)
        assert not spell.passed(heard=k % 5 == 0)


def test_a_spent_spell_waits_for_input_then_quiet_again() -> None:
    clock = FakeClock()
    spell = QuietSpell(0.1, clock)
    clock.advance(0.2)
    assert spell.passed(heard=False)
    spell.spend()
    clock.advance(10)
    assert not spell.passed(heard=False)  # spent: a failed commit waits for the interval
    assert not spell.passed(heard=True)
    clock.advance(0.1)
    assert spell.passed(heard=False)
