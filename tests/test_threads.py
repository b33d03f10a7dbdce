"""Threads that follow the free cores (situate.resources.models.threads): the meter's arithmetic on FAKE
/proc tick readings, the real /proc read, and a real model's threads set through llama.cpp."""

import time

import pytest
from conftest import needs_models


def _fake_meter(monkeypatch, readings, cores=(0, 1)):
    """A CoreMeter over FAKE (busy, total, own) tick readings, one per measurement."""
    import situate.resources.models.threads as th

    it = iter(readings)
    monkeypatch.setattr(th, "_read_ticks", lambda cores: next(it))
    monkeypatch.setattr(th, "MIN_WINDOW_S", 0.0)
    return th.CoreMeter(list(cores))


def test_another_process_on_one_of_two_cores_leaves_one_thread(monkeypatch):
    # 200 ticks of 2 cores: 100 busy, none of them this process's -> the others hold 1 core
    m = _fake_meter(monkeypatch, [(0, 0, 0), (100, 200, 0)])
    assert m.threads() == 1 and m.others == pytest.approx(1.0)


def test_this_process_own_work_is_not_counted_as_load(monkeypatch):
    # both cores busy, all of it this process's (llama.cpp's two threads) -> keep both
    m = _fake_meter(monkeypatch, [(0, 0, 0), (200, 200, 200), (380, 400, 300)])
    assert m.threads() == 2 and m.others == 0.0
    # next window: 180 busy, 100 of them ours -> the others hold 0.8 of a core -> round to 1 free
    assert m.threads() == 1 and m.others == pytest.approx(0.8)


def test_a_light_load_keeps_every_core_and_never_below_one(monkeypatch):
    # others 30 of 200 ticks (0.3 of a core): 1.7 free -> 2; then both cores theirs -> still 1
    m = _fake_meter(monkeypatch, [(0, 0, 0), (30, 200, 0), (230, 400, 0)])
    assert m.threads() == 2 and m.others == pytest.approx(0.3)
    assert m.threads() == 1 and m.others == pytest.approx(2.0)


def test_unreadable_proc_keeps_every_allowed_core(monkeypatch):
    m = _fake_meter(monkeypatch, [None], cores=(0, 1, 2, 3))
    assert m.threads() == 4


def test_real_proc_ticks_count_this_process():
    from situate.resources.models.threads import _read_ticks, allowed_cores

    a = _read_ticks(allowed_cores())
    t0 = time.process_time()
    while time.process_time() - t0 < 0.3:  # 0.3 s of this process's CPU
        pass
    b = _read_ticks(allowed_cores())
    assert b[2] - a[2] >= 20  # clock ticks (USER_HZ 100): at least 0.2 s of ours
    assert b[0] - a[0] >= b[2] - a[2] - 5 and b[1] > a[1]  # the cores' busy ticks include ours


@needs_models
@pytest.mark.models
def test_a_model_call_sets_llama_cpp_threads(monkeypatch):
    import situate.resources.models.threads as th
    from situate.pipelines.settings import resources_from_env

    llm = resources_from_env(plain=True)["llm"].model_copy(update={"n_threads": 1})
    L = llm.load()
    g = llm.generate(L.tokenize(b"def add(a, b):", add_bos=False), stop=[], max_tokens=4)
    assert g.generated >= 1 and L._situate_threads == 1
    # n_threads 0: the meter's choice (FAKE: the others hold every core but one)
    monkeypatch.setattr(th.meter(), "threads", lambda: 1)
    llm0 = llm.model_copy(update={"n_threads": 0})
    llm0.generate(L.tokenize(b"def add(a, b):", add_bos=False), stop=[], max_tokens=4)
    assert llm0.load()._situate_threads == 1
