"""engine/cpu.py: one torch thread per idle core, so a core busy with another process cannot stall every step."""

import pytest
import torch

from engine import cpu


@pytest.mark.parametrize("idle,default,want", [
    (2.0, 2, 2), (1.98, 2, 2), (1.6, 2, 1), (1.0, 2, 1), (0.2, 2, 1),  # one core busy -> one thread
    (7.9, 8, 8), (3.5, 8, 3), (None, 4, 4),  # None: the OS does not say, keep torch's default
])
def test_one_thread_per_idle_core(idle, default, want):
    assert cpu.choose_threads(idle, default) == want


def test_idle_cores_is_a_share_of_the_cores(monkeypatch):
    readings = iter([(100, 1000), (150, 1200)])  # (busy, total) ticks: 50 of 200 busy over the interval
    monkeypatch.setattr(cpu, "busy_and_total", lambda: next(readings))
    monkeypatch.setattr(cpu.os, "cpu_count", lambda: 2)
    assert cpu.idle_cores(interval=0.0) == pytest.approx(1.5)


def test_use_threads_sets_what_it_is_asked_and_never_raises_the_count(monkeypatch):
    before = torch.get_num_threads()
    try:
        assert cpu.use_threads(1) == 1
        monkeypatch.setattr(cpu, "idle_cores", lambda interval=0.1: 16.0)
        assert cpu.use_threads(None, "cpu") == 1  # torch uses 1 now: idle cores never raise it
        with pytest.raises(ValueError, match="threads must be an int >= 1"):
            cpu.use_threads(0)
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("script", ["sample", "bench", "train_draft"])
@pytest.mark.parametrize("value", ["0", "-1", "two"])
def test_threads_below_one_is_a_usage_error_in_every_script(script, value, capsys):
    import importlib
    with pytest.raises(SystemExit) as exit:
        importlib.import_module(script).get_args(["--threads", value])
    assert exit.value.code == 2 and "--threads: must be an int >= 1" in capsys.readouterr().err


@pytest.mark.parametrize("flags, want", [({"avx2", "fma"}, False), ({"avx2", "avx512f", "avx512_bf16"}, True),
                                         ({"avx2", "amx_tile", "amx_bf16"}, True), (set(), False)])
def test_bf16_units_are_read_from_the_cpu_flags(monkeypatch, flags, want):
    monkeypatch.setattr(cpu, "cpu_flags", lambda: flags)
    assert cpu.bf16_units() is want


def test_cpu_flags_reads_the_first_processor_line(tmp_path, monkeypatch):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: Some CPU\nflags\t\t: fpu avx2 amx_bf16\n\nflags\t\t: other\n")
    real_open, real_exists = open, cpu.os.path.exists
    monkeypatch.setattr(cpu.os.path, "exists", lambda p: True if p == "/proc/cpuinfo" else real_exists(p))
    monkeypatch.setattr("builtins.open", lambda p, *a, **k: real_open(info if p == "/proc/cpuinfo" else p, *a, **k))
    assert cpu.cpu_flags() == {"fpu", "avx2", "amx_bf16"}
