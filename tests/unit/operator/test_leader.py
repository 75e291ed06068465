"""The leader-election decisions (client-go's tryAcquireOrRenew), on an injected clock."""

from __future__ import annotations

from pathlib import Path

import pytest

from draco.kube.leader import (
    Election,
    ElectionConfig,
    LeaseRecord,
    default_identity,
    default_lease_namespace,
    jittered,
    lease_spec,
    record_of,
)
from draco.operator.cli import parse_options


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def config(identity: str = "me") -> ElectionConfig:
    return ElectionConfig(name="draco-operator", namespace="default", identity=identity)


def election(identity: str = "me") -> tuple[Election, FakeClock]:
    clock = FakeClock()
    stamps = iter(f"2026-01-01T00:00:{i:02d}.000000Z" for i in range(60))
    return Election(config(identity), clock=clock, wall=lambda: next(stamps)), clock


def other(renew: str = "t0", *, transitions: int = 3) -> LeaseRecord:
    return LeaseRecord(
        holder="them", lease_duration_s=15, acquire_time="a0", renew_time=renew, transitions=transitions
    )


def test_the_first_candidate_creates_the_lease_as_holder() -> None:
    logic, _ = election()
    record = logic.to_create()
    assert record.holder == "me"
    assert record.lease_duration_s == 15
    assert record.transitions == 0
    assert record.acquire_time == record.renew_time is not None


def test_a_held_lease_is_left_alone_for_the_lease_duration_on_our_clock() -> None:
    logic, clock = election()
    assert logic.to_write(other()) is None
    clock.now += 14.9
    assert logic.to_write(other()) is None, "unchanged, but 15 s have not passed on our clock"
    clock.now += 0.2
    taken = logic.to_write(other())
    assert taken is not None
    assert taken.holder == "me"
    assert taken.transitions == 4, "taking over counts a transition"
    assert taken.acquire_time == taken.renew_time


def test_every_renewal_by_the_holder_restarts_the_wait() -> None:
    logic, clock = election()
    assert logic.to_write(other("t0")) is None
    clock.now += 10
    assert logic.to_write(other("t1")) is None
    clock.now += 10  # 20 s after the first sight, 10 s after the last change
    assert logic.to_write(other("t1")) is None
    clock.now += 5.1
    assert logic.to_write(other("t1")) is not None


def test_the_holders_renew_time_is_never_compared_with_our_clock() -> None:
    """A candidate that first sees a lease waits a full duration, however old renewTime looks."""
    logic, clock = election()
    ancient = LeaseRecord(holder="them", lease_duration_s=15, acquire_time="1970", renew_time="1970")
    assert logic.to_write(ancient) is None
    clock.now += 15.01
    assert logic.to_write(ancient) is not None


def test_the_lease_duration_written_in_the_lease_is_the_one_waited_for() -> None:
    logic, clock = election()
    short = LeaseRecord(holder="them", lease_duration_s=5, acquire_time="a", renew_time="r")
    assert logic.to_write(short) is None
    clock.now += 5.01
    assert logic.to_write(short) is not None


def test_a_released_lease_is_taken_at_once() -> None:
    logic, _ = election()
    released = LeaseRecord(holder="", lease_duration_s=1, acquire_time="x", renew_time="x", transitions=7)
    taken = logic.to_write(released)
    assert taken is not None
    assert taken.holder == "me"
    assert taken.transitions == 8


def test_renewing_keeps_acquire_time_and_transitions() -> None:
    logic, clock = election()
    first = logic.to_create()
    logic.written(first)
    assert logic.is_leader
    clock.now += 2
    renewed = logic.to_write(first)
    assert renewed is not None
    assert renewed.acquire_time == first.acquire_time
    assert renewed.transitions == first.transitions
    assert renewed.renew_time != first.renew_time


def test_a_leader_that_sees_another_holder_is_no_longer_leader() -> None:
    logic, clock = election()
    logic.written(logic.to_create())
    clock.now += 1
    assert logic.to_write(other()) is None
    assert not logic.is_leader
    assert logic.holder == "them"


def test_the_renew_deadline_ends_a_round() -> None:
    logic, clock = election()
    started = clock.now
    clock.now += 9.9
    assert not logic.renew_overdue(round_started=started)
    clock.now += 0.1
    assert logic.renew_overdue(round_started=started)


def test_release_empties_the_holder_and_keeps_the_transition_count() -> None:
    logic, _ = election()
    assert logic.to_release() is None, "nothing to release when not leading"
    logic.written(
        LeaseRecord(holder="me", lease_duration_s=15, acquire_time="a", renew_time="r", transitions=2)
    )
    released = logic.to_release()
    assert released is not None
    assert released.holder == ""
    assert released.lease_duration_s == 1
    assert released.transitions == 2


def test_a_leader_that_stopped_renewing_is_unhealthy_a_standby_never() -> None:
    logic, clock = election()
    assert logic.to_write(other()) is None
    clock.now += 1000
    assert logic.healthy(), "a standby is healthy however long it waits"
    logic.written(logic.to_create())
    clock.now += 10
    assert logic.healthy(tolerance_s=5)
    clock.now += 5.1
    assert not logic.healthy(tolerance_s=5)


def test_lease_spec_and_record_round_trip() -> None:
    record = LeaseRecord(holder="me", lease_duration_s=15, acquire_time="a", renew_time="r", transitions=2)
    assert record_of({"spec": lease_spec(record)}) == record
    assert record_of({}) == LeaseRecord()
    assert lease_spec(LeaseRecord(lease_duration_s=1))["holderIdentity"] is None


@pytest.mark.parametrize(
    ("duration", "deadline", "retry"),
    [(10, 10, 2), (15, 10, 9), (15, 0, 2), (15, 10, 0)],
)
def test_inconsistent_timings_are_refused(duration: float, deadline: float, retry: float) -> None:
    with pytest.raises(ValueError):
        ElectionConfig(
            name="x",
            namespace="y",
            identity="z",
            lease_duration_s=duration,
            renew_deadline_s=deadline,
            retry_period_s=retry,
        )


def test_retries_are_jittered_like_client_go() -> None:
    samples = [jittered(2.0) for _ in range(200)]
    assert all(2.0 <= s <= 2.0 * 2.2 for s in samples)
    assert max(samples) - min(samples) > 0.5


def test_identity_is_the_pod_name_plus_a_random_suffix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_NAME", "draco-operator-7d9f")
    first, second = default_identity(), default_identity()
    assert first.startswith("draco-operator-7d9f_")
    assert first != second


def test_lease_namespace_comes_from_the_service_account(tmp_path: Path) -> None:
    path = tmp_path / "namespace"
    assert default_lease_namespace(path) == "default"
    path.write_text("draco-system\n")
    assert default_lease_namespace(path) == "draco-system"


def test_leader_election_flags() -> None:
    options = parse_options([])
    assert options.leader_elect is True
    assert options.leader_election_id == "draco-operator"
    assert options.leader_election_namespace == default_lease_namespace()
    assert parse_options(["--leader-elect=false"]).leader_elect is False
    assert parse_options(["--leader-elect"]).leader_elect is True
    chosen = parse_options(["--leader-election-namespace", "ops", "--leader-election-id", "mine"])
    assert (chosen.leader_election_namespace, chosen.leader_election_id) == ("ops", "mine")
    with pytest.raises(SystemExit):
        parse_options(["--leader-elect=maybe"])
