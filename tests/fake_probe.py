"""A memory probe stand-in for the measured window's tests (a800lab.core.window.PointWindow
takes `probe=`): counted bytes, no device."""


class FakeProbe:
    """A device whose allocations the test makes by hand: live bytes and a resettable peak."""

    device = "cpu"
    on_cuda = False
    kind = "allocated"

    def __init__(self, live_bytes=0):
        self.live = live_bytes
        self.peak = live_bytes

    def alloc(self, nbytes):
        self.live += nbytes
        self.peak = max(self.peak, self.live)

    def free(self, nbytes):
        self.live -= nbytes

    def warm(self):
        pass

    def current_bytes(self):
        return self.live

    def reset_peak(self):
        self.peak = self.live
        return True

    def peak_bytes(self):
        return self.peak

    def peak_reserved_bytes(self):
        return None
