"""Cases 1-2 over HTTP and the breakdown: what they count must hold on any machine (RPCs on the
wire, which probes fired), whatever they time."""

from __future__ import annotations

import pytest

from bench import breakdown, over_http, probes, served
from bench.cpu import CPU_METRIC
from bench.inprocess import ELSEWHERE, FIRST, SAME
from bench.network import CLIENT_PREFACE, NewStreams, counted_route
from localrun.firestore_rpcs import counted_emulator_client

RTT_MS = 2.0


def frame(kind: int, stream: int, payload: bytes = b"", flags: int = 0) -> bytes:
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload


# A client's side of an HTTP/2 connection: settings, two calls (HEADERS + DATA each), a
# window update and a ping on stream 0, and a HEADERS frame on an already open stream (trailers).
CONNECTION = b"".join(
    [
        CLIENT_PREFACE,
        frame(0x4, 0, b"\x00" * 12),  # SETTINGS
        frame(0x1, 1, b"h" * 40, flags=0x4),  # HEADERS, opens stream 1
        frame(0x0, 1, b"\x01" * 300, flags=0x1),  # DATA
        frame(0x8, 0, b"\x00\x00\x10\x00"),  # WINDOW_UPDATE
        frame(0x1, 3, b"h" * 9),  # HEADERS, opens stream 3 (a payload as long as a frame header)
        frame(0x1, 3, b"t" * 5, flags=0x1),  # HEADERS again on stream 3: not a new call
        frame(0x6, 0, b"p" * 8),  # PING
        frame(0x0, 3, b"\x01" * 20, flags=0x1),
    ]
)


@pytest.mark.parametrize("size", [1, 2, 7, 9, 10, 64, len(CONNECTION)])
def test_new_streams_are_counted_however_the_bytes_are_split(size):
    opened: list[None] = []
    streams = NewStreams(lambda: opened.append(None))
    for at in range(0, len(CONNECTION), size):
        streams.feed(CONNECTION[at : at + size])
    assert len(opened) == 2


def test_the_route_counts_the_rpcs_the_client_library_sends(emulator_host, project):
    with counted_route(emulator_host, 0) as route:
        assert route.host != emulator_host  # counting needs a proxy, even without delay
        client, interceptor = counted_emulator_client(route.host, project)
        document = client.collection("bench-counted").document("probe")
        document.set({"n": 1})
        document.get()
        client.collection("bench-counted").document("other").get()
        assert route.rpcs() == sum(interceptor.snapshot().values()) == 3


def test_the_direct_route_counts_nothing(emulator_host):
    with counted_route(emulator_host, 0, count=False) as route:
        assert (route.host, route.rpcs()) == (emulator_host, None)


@pytest.fixture(scope="module")
def http_rows(emulator_host, tmp_path_factory):
    env = served.server_env(emulator_host, "bench-http")
    return over_http.first_and_duplicates(
        env,
        served.OURS_SOURCE,
        served.BASELINE_SOURCE,
        emulator_host,
        RTT_MS,
        tmp_path_factory.mktemp("http"),
        rounds=1,
        per_round=3,
        progress=lambda _: None,
    )


@pytest.mark.parametrize(("kind", "ours", "baseline"), [(FIRST, 2, 6), (ELSEWHERE, 2, 3), (SAME, 0, 3)])
def test_rpcs_counted_on_the_wire_over_http(http_rows, kind, ours, baseline):
    case, name = over_http.CASES[kind]
    (row,) = [r for r in http_rows if r.case == case and r.name == name]
    assert row.rtt_ms == RTT_MS
    assert (row.ours.n, row.ours.min, row.ours.max) == (3, ours, ours)
    assert (row.baseline.min, row.baseline.max) == (baseline, baseline)


def test_every_http_latency_row_has_a_sample_per_delivery(http_rows):
    latency = [r for r in http_rows if r.name == "latency"]
    assert [r.case for r in latency] == [case for case, _ in over_http.CASES.values()]
    assert all(r.ours.n == r.baseline.n == 3 for r in latency)


def test_every_http_case_has_the_serving_instances_cpu_per_delivery(http_rows):
    cpu = [r for r in http_rows if r.name == CPU_METRIC]
    assert [r.case for r in cpu] == [case for case, _ in over_http.CASES.values()]
    # Read from outside the server, one sample per delivery, never nothing: a delivery is work.
    assert all(r.ours.n == r.baseline.n == 3 and r.ours.min > 0 and r.baseline.min > 0 for r in cpu)


@pytest.fixture(scope="module")
def measured(emulator_host, tmp_path_factory):
    env = served.server_env(emulator_host, "bench-breakdown")
    return breakdown.measure(env, emulator_host, 0, tmp_path_factory.mktemp("probed"), 3, lambda _: None)


def test_the_breakdown_has_every_part_for_every_kind_of_request(measured):
    assert set(measured.parts) == set(breakdown.KINDS)
    for parts in measured.parts.values():
        assert [part for part, _, _ in breakdown.PARTS] == list(parts)
        assert all(summary.n == 3 for summary in parts.values())


def test_the_probes_fire_where_each_delivery_goes(measured):
    first, elsewhere = measured.parts[breakdown.FIRST_KIND], measured.parts[breakdown.ELSEWHERE_KIND]
    ran_the_job = ("heartbeat and watchdog: set-up", "heartbeat and watchdog: tear-down", "completion")
    assert all(first[part].min > 0 for part in ran_the_job)
    assert all(elsewhere[part].max == 0 for part in ran_the_job)  # a duplicate runs nothing
    for parts in (first, elsewhere):
        assert parts["claim and completion: Firestore's answers"].min > 0
        assert parts["log line"].min > 0 and parts["header and body checks"].min > 0
    floor = measured.parts[breakdown.FLOOR_KIND]
    assert floor["Flask and the Functions Framework"].min > 0
    ours_only = [part for part, _, _ in breakdown.PARTS[5:]]  # from our view on
    assert all(floor[part].max == 0 for part in ours_only)


def test_the_breakdown_table_names_every_part(measured):
    table = "\n".join(breakdown.markdown([measured]))
    assert all(f"| {part} | {what} |" in table for part, what, _ in breakdown.PARTS)
    assert "| **total, as the caller timed it** |" in table


def test_every_probe_has_a_function_to_wrap():
    # A renamed function fails here, not as a part that silently reads 0.
    for patch in probes.patches():
        assert callable(getattr(patch.owner, patch.attribute)), patch
