"""Results cross the layers as typed values (issue 32): the modules that make and read them read few results
by a string key (tests/result_keys.py says how they are counted, and lists them)."""

from result_keys import NOT_RESULTS, counted, result_keys


def test_results_are_read_by_attribute_not_by_string_key():
    inside, _ = counted()
    assert len(inside) < 20, "\n".join(f"{r.path}:{r.line}: {r.text}" for r in inside)


def test_the_count_rests_on_the_recorded_documents_and_every_exception_is_still_needed():
    assert {"samples_per_s", "data_wait_share", "verdict", "rounds", "ratio", "sync_cost", "share"} <= result_keys()
    _, left_out = counted()
    assert {(r.path, r.receiver) for r, _ in left_out} == set(NOT_RESULTS)
