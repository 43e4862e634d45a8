"""The interpreter exits cleanly right after asyncio work: no runtime thread may take the GIL
while Python finalizes (that crashed the process with SIGSEGV about one exit in ten)."""
import subprocess
import sys

SCRIPT = """
import asyncio, sys
import ironlock

async def main():
    m = ironlock.AsyncLockManager(sys.argv[1].split(","), restart_quarantine=False)
    async def worker(i):
        for j in range(30):
            lock = await m.acquire(f"exit-test:{i}:{j}", 5.0)
            await lock.release()
    await asyncio.gather(*(worker(i) for i in range(16)))

asyncio.run(main())
print("done")
"""


def test_exit_after_asyncio_work_is_clean(cluster3):
    nodes = ",".join(cluster3.urls)
    for attempt in range(8):
        p = subprocess.run([sys.executable, "-c", SCRIPT, nodes], capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, f"attempt {attempt}: exit {p.returncode}\n{p.stderr[-2000:]}"
        assert p.stdout.strip().endswith("done")
