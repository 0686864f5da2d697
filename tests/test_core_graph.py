"""Graph validation at build time, execution order and critical path."""
import pytest

from rt_runtime import ContractError, Graph, GraphError, Op, TensorSpec


def spec(name, n=4, dtype="float32"):
    return TensorSpec(name, (n,), dtype)


def nop(*_):
    pass


def test_cycle_is_named():
    ops = [Op("a", nop, (spec("x"), spec("z")), (spec("y"),)), Op("b", nop, (spec("y"),), (spec("w"),)),
           Op("c", nop, (spec("w"),), (spec("z"), spec("out")))]
    with pytest.raises(GraphError, match=r"cycle: (a -> b -> c -> a|b -> c -> a -> b|c -> a -> b -> c)"):
        Graph("g", ops, [spec("x")], ["out"])


def test_dangling_input():
    with pytest.raises(GraphError, match="op 'a' reads 'ghost'.*dangling"):
        Graph("g", [Op("a", nop, (spec("ghost"),), (spec("y"),))], [spec("x")], ["y"])


def test_unused_output():
    ops = [Op("a", nop, (spec("x"),), (spec("y"), spec("debug")))]
    with pytest.raises(GraphError, match="'debug'.*unused output"):
        Graph("g", ops, [spec("x")], ["y"])


def test_producer_consumer_mismatch_names_both_sides():
    ops = [Op("a", nop, (spec("x"),), (spec("y", dtype="float32"),)),
           Op("b", nop, (spec("y", dtype="float16"),), (spec("z"),))]
    with pytest.raises(ContractError) as e:
        Graph("g", ops, [spec("x")], ["z"])
    msg = str(e.value)
    assert e.value.field == "dtype" and "op 'b'" in msg and "op 'a'" in msg and "float16" in msg


def test_duplicate_writers_and_op_names():
    with pytest.raises(GraphError, match="written by both"):
        Graph("g", [Op("a", nop, (spec("x"),), (spec("y"),)), Op("b", nop, (spec("x"),), (spec("y"),))],
              [spec("x")], ["y"])
    with pytest.raises(GraphError, match="two ops are named 'a'"):
        Graph("g", [Op("a", nop, (spec("x"),), (spec("y"),)), Op("a", nop, (spec("y"),), (spec("z"),))],
              [spec("x")], ["z"])


def test_order_is_topological_with_declaration_tie_break():
    # Declared out of order: c depends on a and b; b and a are independent.
    ops = [Op("c", nop, (spec("ya"), spec("yb")), (spec("out"),)), Op("b", nop, (spec("x"),), (spec("yb"),)),
           Op("a", nop, (spec("x"),), (spec("ya"),))]
    g = Graph("g", ops, [spec("x")], ["out"])
    assert [o.name for o in g.ops] == ["b", "a", "c"]
    assert [o.name for o in Graph("g", ops, [spec("x")], ["out"]).ops] == ["b", "a", "c"]


def test_critical_path_follows_the_costliest_chain():
    ops = [Op("fast", nop, (spec("x"),), (spec("f"),), cost_us=1), Op("slow", nop, (spec("x"),), (spec("s"),), cost_us=9),
           Op("join", nop, (spec("f"), spec("s")), (spec("out"),), cost_us=2)]
    g = Graph("g", ops, [spec("x")], ["out"])
    cp = g.critical_path()
    assert cp.ops == ("slow", "join") and cp.cost_us == 11
    assert g.critical_path({"fast": 20}).ops == ("fast", "join")
    assert g.longest_op_us() == 9


def test_inplace_must_fit_its_input():
    with pytest.raises(ContractError, match="inplace"):
        Op("a", nop, (spec("x", 4),), (spec("y", 8),), inplace={"y": "x"})
    with pytest.raises(ContractError, match="inplace"):
        Op("a", nop, (spec("x"),), (spec("y"),), inplace={"y": "nope"})
