"""Settings shared by every test directory."""

from hypothesis import settings

# The suite runs on 2 shared cores (and inside a TCG guest): wall-clock
# deadlines per example would make property tests flaky, not stricter.
settings.register_profile("vnpu", deadline=None, print_blob=True)
settings.load_profile("vnpu")
