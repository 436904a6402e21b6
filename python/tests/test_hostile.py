"""Hostile calls from a script never take the interpreter down: a size that cannot be had
raises ``MemoryError``, a panic inside the extension raises an exception, and the process goes
on and exits cleanly. Each runs in a subprocess, so that an abort (SIGABRT, what allocation
failure did before) fails the test instead of ending the test run."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _lines(code: str) -> list[str]:
    p = _run(code)
    assert p.returncode == 0, (
        f"exit {p.returncode} (negative: killed by that signal)\n"
        f"stdout: {p.stdout}\nstderr: {p.stderr}"
    )
    return p.stdout.splitlines()


def test_a_region_too_large_to_have_raises_memory_error():
    out = _lines(
        """
        import roce
        d = roce.Device()
        pd = d.alloc_pd()
        for size in (2**40, 2**62, 2**63 - 1):
            try:
                d.reg_mr(pd, size, 0)
                print("registered", size)
            except MemoryError as e:
                print("MemoryError", size, e)
        # The device is still whole: a small region registers and is usable.
        mr = d.reg_mr(pd, 4096, 0)
        d.mr_write(mr, 0, b"still here")
        print("ok", d.mr_info(mr)["length"])
        """
    )
    assert [l.split()[:2] for l in out[:3]] == [
        ["MemoryError", str(2**40)],
        ["MemoryError", str(2**62)],
        ["MemoryError", str(2**63 - 1)],
    ], out
    assert "cannot be allocated" in out[0], out
    assert out[-1] == "ok 4096", out


def test_a_region_past_the_address_space_limit_raises_memory_error():
    out = _lines(
        """
        import resource
        import roce
        d = roce.Device()
        pd = d.alloc_pd()
        limit = 4 << 30
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        try:
            d.reg_mr(pd, 8 << 30, 0)
            print("registered")
        except MemoryError:
            print("MemoryError")
        # Within the limit, a region is had as before.
        mr = d.reg_mr(pd, 1 << 20, 0)
        print("ok", d.mr_info(mr)["length"])
        """
    )
    assert out == ["MemoryError", "ok 1048576"], out


def test_a_panic_in_the_extension_is_an_exception():
    out = _lines(
        """
        import roce
        try:
            roce._roce._panic_for_test()
            print("returned")
        except BaseException as e:
            print(type(e).__name__, e)
        # The interpreter and the extension go on.
        print("ok", len(roce.build(opcode="RC_SEND_ONLY", src="10.0.0.1", dst="10.0.0.2")))
        """
    )
    assert out[0].startswith("PanicException a deliberate panic"), out
    assert out[-1].startswith("ok "), out
