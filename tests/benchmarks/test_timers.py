"""The benchmarks' timers: exclusive times, and every patch taken off again."""

import sys
import time
import types

BENCHMARK = "timers"


def test_a_callers_time_leaves_out_its_wrapped_callees(bench):
    clock = bench.Clock()
    inner = clock.wrap(lambda: time.sleep(0.02), "inner")
    outer = clock.wrap(lambda: [inner(), inner()], "outer")
    outer()
    assert clock.calls == {"outer": 1, "inner": 2}
    assert clock.secs["inner"] >= 0.04
    assert clock.secs["outer"] < 0.01  # its callees' sleep is theirs, not its own


def test_patches_of_a_class_an_instance_and_a_module_come_off_again(bench):
    class Base:
        def f(self):
            return 1

    class Child(Base):
        pass

    obj = Child()
    module = types.ModuleType("timed_module")
    module.g = lambda: 2
    holder = types.ModuleType("holder_module")  # imported ``g`` by name
    holder.g = module.g
    sys.modules["timed_module"], sys.modules["holder_module"] = module, holder
    original_g = module.g
    clock = bench.Clock()
    try:
        with (
            bench.patched(obj, "f", clock, "obj.f"),  # before the class: its own method
            bench.patched(Child, "f", clock, "f"),
            bench.patched(module, "g", clock, "g"),
        ):
            assert obj.f() == 1 and Child().f() == 1 and holder.g() == 2
        assert clock.calls == {"obj.f": 1, "f": 1, "g": 1}
        assert "f" not in Child.__dict__ and "f" not in obj.__dict__  # inherited again
        assert module.g is original_g and holder.g is original_g
    finally:
        del sys.modules["timed_module"], sys.modules["holder_module"]
