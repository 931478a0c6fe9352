"""The explicit-DAG discrete-event engine."""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sgdscale.fine.engine import Dag, run_dag
from sgdscale.fine.links import EventQueue, LinkNetwork


def test_chain_equals_the_analytic_sum():
    durations = [0.3, 1.25, 0.0, 2.5, 0.125]
    dag = Dag()
    prev = ()
    for i, d in enumerate(durations):
        prev = (dag.add(d, resource=i % 2, preds=prev),)
    run = run_dag(dag, resources=2)
    assert run.makespan_s == pytest.approx(sum(durations), rel=1e-12)
    assert dag.critical_path_s() == pytest.approx(sum(durations), rel=1e-12)


def test_fifo_resource_serialises_independent_tasks():
    dag = Dag()
    for d in (1.0, 2.0, 3.0):
        dag.add(d, resource=0)
    dag.add(10.0, resource=-1)  # a delay runs in parallel
    run = run_dag(dag, resources=1)
    assert run.start_s[:3] == [0.0, 1.0, 3.0]
    assert run.makespan_s == 10.0
    assert run.busy_s == [6.0]


def test_messages_run_on_the_network():
    q = EventQueue()
    net = LinkNetwork(q, [100.0, 100.0, 50.0], alpha_s=0.1)
    c0, c1 = net.add_connection(0, 2), net.add_connection(1, 2)
    dag = Dag()
    a = dag.add(1.0, resource=0)
    m0 = dag.add(conn=c0, nbytes=100.0, preds=[a])
    m1 = dag.add(conn=c1, nbytes=100.0, preds=[a])
    dag.add(0.5, resource=1, preds=[m0, m1])
    run = run_dag(dag, resources=2, network=net)
    # Both messages share the 50 B/s downlink: 200 B in 4 s, + latency, then the task.
    assert run.makespan_s == pytest.approx(1.0 + 4.0 + 0.1 + 0.5)


def _random_dag(seed, n_ops, n_res):
    rng = random.Random(seed)
    dag = Dag()
    for i in range(n_ops):
        preds = sorted(rng.sample(range(i), k=min(i, rng.randint(0, 3))))
        dag.add(rng.choice([0.0, rng.uniform(0.0, 2.0)]), resource=rng.randint(-1, n_res - 1), preds=preds)
    return dag


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 10**6), n_ops=st.integers(1, 60), n_res=st.integers(1, 4))
def test_makespan_bounds_on_random_dags(seed, n_ops, n_res):
    dag = _random_dag(seed, n_ops, n_res)
    run = run_dag(dag, resources=n_res)
    assert run.makespan_s >= dag.critical_path_s() - 1e-9
    for busy in run.busy_s:
        assert run.makespan_s >= busy - 1e-9
    # Every op starts after its predecessors finish, and takes its duration.
    for op in range(len(dag)):
        for p in dag.preds[op]:
            assert run.start_s[op] >= run.finish_s[p] - 1e-12
        assert run.finish_s[op] - run.start_s[op] == pytest.approx(dag.duration_s[op], abs=1e-12)
    # A resource never runs two tasks at once.
    for r in range(n_res):
        spans = sorted((run.start_s[o], run.finish_s[o]) for o in range(len(dag)) if dag.resource[o] == r)
        for (s0, f0), (s1, _) in zip(spans, spans[1:]):
            assert s1 >= f0 - 1e-12


def test_deterministic_under_a_seed():
    a = run_dag(_random_dag(42, 200, 3), resources=3)
    b = run_dag(_random_dag(42, 200, 3), resources=3)
    assert a.start_s == b.start_s and a.finish_s == b.finish_s


def test_cycle_is_reported():
    dag = Dag()
    dag.add(1.0, preds=[1])
    dag.add(1.0, preds=[0])
    with pytest.raises(ValueError, match="cycle"):
        run_dag(dag, resources=1)
