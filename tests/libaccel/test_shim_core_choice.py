"""The shim's choice of core for a job, as vnpu.ko's vnpu_job_pick_core makes it: the least
loaded core, the file's last core on a tie, so a lone file's jobs stay on one core."""

from __future__ import annotations

from libaccel import Device, Job, JobBo
from libaccel.backends.shim import ShimBackend, ShimDevice
from uapi.isa import encode


def test_idle_cores_keep_a_files_jobs_on_its_last_core() -> None:
    shim = ShimDevice(num_cores=2)
    try:
        files = [ShimBackend(shim) for _ in range(2)]
        files[0].last_core, files[1].last_core = 1, 0  # as if each one's last job ran there
        for core_of_file, backend in zip((1, 0), files, strict=True):
            dev = Device(backend)
            before = [c.jobs_done for c in shim.npu.cores]
            out = dev.create_bo(4096)
            stream = encode("END")
            job = Job(dev.create_bo_with(stream, read_only=True), len(stream), [JobBo(out)])
            for _ in range(6):
                dev.submit(job)
                assert out.wait(timeout=30).status == 0
            done = [c.jobs_done - b for c, b in zip(shim.npu.cores, before, strict=True)]
            assert done[core_of_file] == 6 and sum(done) == 6, done
            assert backend.last_core == core_of_file
            dev.close()
    finally:
        shim.close()
