"""The sample order of a run (train/data.py RankStream): each sample exactly once per epoch over the data ranks,
disjoint across ranks, and one global cursor (`samples_consumed`) that means the same on any world size, so a
stream saved on one plan continues on another with the very next samples."""

import pytest

from paradvisor.train.data import SHUFFLED_IN_MEMORY, Permutation, RankStream


def epoch_of(n: int, batches: list[int], seed: int, consumed: int = 0) -> list[list[int]]:
    """What each data rank takes, micro-step by micro-step, until one epoch's positions are consumed."""
    streams = [RankStream(n, batches, r, seed, samples_consumed=consumed) for r in range(len(batches))]
    taken = [[] for _ in batches]
    while streams[0].samples_consumed < consumed + n:
        for r, s in enumerate(streams):
            taken[r] += s.next()
    return taken


@pytest.mark.parametrize("batches", [[4], [2, 2], [1, 1, 1, 1], [3, 1]])
def test_each_sample_exactly_once_per_epoch(batches):
    n = 96  # a multiple of every global micro-batch here
    taken = epoch_of(n, batches, seed=5)
    flat = [i for rank in taken for i in rank]
    assert sorted(flat) == list(range(n))  # every sample once, none twice
    for a in range(len(taken)):
        for b in range(a + 1, len(taken)):
            assert not set(taken[a]) & set(taken[b])  # disjoint across data ranks
    assert flat != list(range(n))  # shuffled
    # the second epoch is another order of the same samples
    second = [i for rank in epoch_of(n, batches, seed=5, consumed=n) for i in rank]
    assert sorted(second) == list(range(n)) and second != flat


def test_a_large_corpus_is_shuffled_without_a_list_of_its_samples():
    small = Permutation(5003, seed=2, epoch=0)
    values = [small[i] for i in range(5003)]
    assert sorted(values) == list(range(5003)) and values[:100] != list(range(100))  # a bijection, shuffled
    assert [Permutation(5003, 2, 1)[i] for i in range(100)] != values[:100]  # another order each epoch
    n = SHUFFLED_IN_MEMORY + 1
    streams = [RankStream(n, [3, 5], r, seed=2) for r in range(2)]
    taken = [i for _ in range(3) for s in streams for i in s.next()]
    assert taken == [Permutation(n, 2, 0)[i] for i in range(24)]
    assert isinstance(streams[0]._order, Permutation)


def test_the_order_depends_on_the_seed_and_not_on_the_world_size():
    n = 64

    def global_order(batches, seed):
        streams = [RankStream(n, batches, r, seed) for r in range(len(batches))]
        out = []
        for _ in range(n // sum(batches)):
            for s in streams:
                out += s.next()
        return out

    one = global_order([4], 3)
    assert global_order([2, 2], 3) == one == global_order([1, 1, 1, 1], 3)
    assert global_order([4], 4) != one


def test_a_cursor_saved_on_two_ranks_resumes_on_four():
    n = 50
    two = [RankStream(n, [2, 2], r, seed=1) for r in range(2)]
    for _ in range(7):
        for s in two:
            s.next()
    state = two[0].state_dict()
    assert state["samples_consumed"] == 28 == two[1].state_dict()["samples_consumed"]
    four = [RankStream(n, [1, 1, 1, 1], r, seed=1) for r in range(4)]
    for s in four:
        s.load_state_dict(state)
    resumed = [i for s in four for i in s.next()]
    reference = RankStream(n, [4], 0, seed=1, samples_consumed=28).next()
    assert resumed == reference
