"""The launch path: the typed kernel objects each executor loads, and the fast path (cpp/launch.cpp) that
triton calls for every launch, against the Python launcher it falls back to."""
import os
import signal
import struct
import threading

import pytest
import torch
import triton
import triton.language as tl

from spine.driver.arguments import Arguments, Param
from spine.errors import DeviceAssertionError, KernelFault
from tests.kernels import add_kernel


@triton.jit
def scalars_kernel(out_ptr, i32, i64, u8: tl.uint8, f32, f64: tl.float64, flag):
    tl.store(out_ptr + 0, i32.to(tl.float64))
    tl.store(out_ptr + 1, i64.to(tl.float64))
    tl.store(out_ptr + 2, u8.to(tl.float64))
    tl.store(out_ptr + 3, f32.to(tl.float64))
    tl.store(out_ptr + 4, f64)
    tl.store(out_ptr + 5, flag.to(tl.float64))


@triton.jit
def half_scalars_kernel(out_ptr, h: tl.float16, b: tl.bfloat16):
    tl.store(out_ptr + 0, h.to(tl.float32))
    tl.store(out_ptr + 1, b.to(tl.float32))


@triton.jit
def many_args_kernel(out_ptr, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, x0_ptr, x1_ptr, x2_ptr):
    s = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9 + a10 + a11
    tl.store(out_ptr + tl.program_id(0), tl.load(x0_ptr) + tl.load(x1_ptr) + tl.load(x2_ptr) + s)


@triton.jit
def grid_ids_kernel(out_ptr, scale):
    x, y, z = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    linear = (z * tl.num_programs(1) + y) * tl.num_programs(0) + x
    tl.store(out_ptr + linear, (x + 10 * y + 100 * z) * scale)


@triton.jit
def assert_positive_kernel(x_ptr):
    tl.device_assert(tl.load(x_ptr) > 0, "x must be positive")


@triton.jit
def wild_store_kernel(out_ptr, far):
    tl.store(out_ptr + far, 1.0)


def _launcher_kind(compiled) -> str:
    return type(compiled.run).__name__


def test_triton_gets_the_fast_path(target):
    x, out = torch.rand(10), torch.empty(10)
    compiled = add_kernel[(1,)](x, x, out, 10, BLOCK=16)
    assert _launcher_kind(compiled) == "DirectLauncher"
    torch.testing.assert_close(out, 2 * x)


def test_the_fast_path_is_called_positionally(target):
    """triton passes a launch's arguments by position; a keyword is refused by name, not dropped."""
    x, out = torch.rand(10), torch.empty(10)
    compiled = add_kernel[(1,)](x, x, out, 10, BLOCK=16)
    with pytest.raises(TypeError, match="positional arguments only"):
        compiled.run(1, 1, 1, None, compiled.function, None, None, None, None, x, x, out, 10, BLOCK=16)
    assert type(compiled.run.python_launcher).__name__ == "CPULauncher"
    out.zero_()
    compiled.run(1, 1, 1, None, compiled.function, None, None, None, None, x, x, out, 10)
    torch.testing.assert_close(out, 2 * x)


def test_one_element_add(target):
    x, y, out = torch.rand(1), torch.rand(1), torch.empty(1)
    for _ in range(3):
        add_kernel[(1,)](x, y, out, 1, BLOCK=16)
        assert torch.equal(out, x + y)


def test_scalars(target):
    out = torch.zeros(6, dtype=torch.float64)
    scalars_kernel[(1,)](out, -7, -(1 << 40) - 3, 200, 1.5, 2.25e100, True)
    assert out.tolist() == [-7.0, float(-(1 << 40) - 3), 200.0, 1.5, 2.25e100, 1.0]
    # ints where floats are expected: encoded as floats, as the Python launcher does
    scalars_kernel[(1,)](out, 3, 4, 5, 6, 7, False)
    assert out.tolist() == [3.0, 4.0, 5.0, 6.0, 7.0, 0.0]
    scalars_kernel[(1,)](out, 3, 4, 5 + 256, 6, 7, False)   # an integer keeps its type's bits
    assert out[2] == 5.0


def test_float_too_large_for_its_type_is_refused(target):
    out = torch.zeros(6, dtype=torch.float64)
    with pytest.raises(OverflowError):
        scalars_kernel[(1,)](out, 2, 2, 3, 1e300, 1.0, True)


def test_half_and_bfloat16_scalars(target):
    out = torch.zeros(2)
    half_scalars_kernel[(1,)](out, 1.5, -2.75)
    assert out.tolist() == [1.5, -2.75]


def test_many_arguments(target):
    xs = [torch.full((1,), float(i + 1)) for i in range(3)]
    out = torch.zeros(4)
    many_args_kernel[(4,)](out, *[float(a) for a in range(12)], *xs)
    assert out.tolist() == [6.0 + 66.0] * 4


def test_three_dimensional_grid(target):
    gx, gy, gz = 4, 3, 2
    out = torch.zeros(gx * gy * gz, dtype=torch.int32)
    grid_ids_kernel[(gx, gy, gz)](out, 2)
    z, y, x = torch.meshgrid(torch.arange(gz), torch.arange(gy), torch.arange(gx), indexing="ij")
    assert torch.equal(out.view(gz, gy, gx), ((x + 10 * y + 100 * z) * 2).int())


def test_views_of_one_storage(target):
    base = torch.arange(32, dtype=torch.float32)
    add_kernel[(1,)](base[:8], base[8:16], base[16:24], 8, BLOCK=8)
    assert torch.equal(base[16:24], base[:8] + base[8:16])
    strided = torch.arange(64, dtype=torch.float32).view(8, 8)[:, 1]   # a non-contiguous view
    out = torch.empty(8)
    add_kernel[(1,)](strided.contiguous(), strided.contiguous(), out, 8, BLOCK=8)
    assert torch.equal(out, 2 * strided)


def test_arguments_the_fast_path_hands_back(target):
    """Tensor wrappers and launch hooks take the Python launcher; results are the same."""
    x, out = torch.rand(10), torch.empty(10)
    as_int = torch.arange(10, dtype=torch.int32)
    out_int = torch.empty(10, dtype=torch.int32)
    add_kernel[(1,)](triton.reinterpret(as_int.view(torch.float32), tl.int32), as_int, out_int, 10, BLOCK=16)
    assert torch.equal(out_int, 2 * as_int)
    seen = []
    triton.knobs.runtime.launch_enter_hook.add(seen.append)
    try:
        add_kernel[(1,)](x, x, out, 10, BLOCK=16)
    finally:
        triton.knobs.runtime.launch_enter_hook.remove(seen.append)
    assert len(seen) == 1


def test_bad_arguments_are_still_reported(target):
    x = torch.rand(10)
    with pytest.raises(TypeError, match="is on device 'meta'"):
        add_kernel[(1,)](x, torch.empty(10, device="meta"), x, 10, BLOCK=16)


def test_device_assertion_raises(target):
    compiled = assert_positive_kernel[(1,)](torch.ones(1), debug=True)
    assert _launcher_kind(compiled) == "DirectLauncher"   # bounds-checked: the extents are passed too
    with pytest.raises(DeviceAssertionError, match="x must be positive"):
        assert_positive_kernel[(1,)](torch.zeros(1), debug=True)
    assert_positive_kernel[(1,)](torch.ones(1), debug=True)


def test_fault_raises_and_the_next_launch_works(target):
    out = torch.zeros(4)
    with pytest.raises(KernelFault, match="wild_store_kernel"):
        wild_store_kernel[(1,)](out, 1 << 42)
    test_one_element_add(target)


def test_empty_grid_launches_nothing(target):
    x, out = torch.rand(4), torch.full((4,), -1.0)
    add_kernel[(0,)](x, x, out, 4, BLOCK=4)
    assert torch.equal(out, torch.full((4,), -1.0))


@pytest.mark.parametrize("grid", [(2**32 + 1,), (2**31,), (-1,), (1, -3), (2**31 - 1, 2**31 - 1, 4)])
@pytest.mark.parametrize("python_launcher", [False, True])
def test_a_grid_the_runtime_cannot_count_is_an_error(target, grid, python_launcher):
    """Grid dimensions are int32 program ids and the program count an int64: a grid beyond either is a
    clear error on both launch paths, never one cut to 32 bits (2**32 + 1 ran one program, 2**31 none)."""
    x, out = torch.rand(4), torch.full((4,), -1.0)
    hook = triton.knobs.runtime.launch_enter_hook
    if python_launcher:
        hook.add(print)
    try:
        with pytest.raises(ValueError, match="grid"):
            add_kernel[grid](x, x, out, 4, BLOCK=4)
    finally:
        if python_launcher:
            hook.remove(print)
    assert torch.equal(out, torch.full((4,), -1.0))
    test_one_element_add(target)


def test_a_long_kernel_timeout_under_qemu(monkeypatch):
    """SPINE_KERNEL_TIMEOUT=3000000 is 3e9 ms, past a C int: the fast path once failed its first launch
    casting it ("Unable to cast") with the executor's lock still held, and every later launch waited for
    that lock forever. Launches in a thread, so a hang fails the test instead of ending the run."""
    import platform
    from spine.driver import CPUDriver
    if platform.machine() == "riscv64":
        pytest.skip("no QEMU on a riscv64 machine")
    triton.runtime.driver.set_active(CPUDriver(target="riscv64"))
    monkeypatch.setenv("SPINE_KERNEL_TIMEOUT", "3000000")
    outcome = []

    def launches():
        for _ in range(2):
            test_one_element_add("riscv64")
        outcome.append("done")
    worker = threading.Thread(target=launches, daemon=True)
    worker.start()
    worker.join(120)
    assert outcome == ["done"]


# The kernel objects, used directly.

def _loaded(target):
    x, out = torch.rand(10), torch.empty(10)
    compiled = add_kernel[(1,)](x, x, out, 10, BLOCK=16)
    compiled._init_handles()
    return compiled.function


def _add_arguments(x, y, out, n):
    params = (Param(0, "x_ptr", "*fp32"), Param(1, "y_ptr", "*fp32"), Param(2, "out_ptr", "*fp32"),
              Param(3, "n", "i32"))
    return Arguments(params, (x, y, out, n), frozenset({2}))


def test_kernel_object_launches_directly(target):
    kernel = _loaded(target)
    assert type(kernel).__name__ == ("NativeKernel" if target == "host" else "QemuKernel")
    assert kernel.name == "add_kernel" and kernel.so_path.endswith(".so")
    x, y, out = torch.rand(40), torch.rand(40), torch.zeros(40)
    kernel((3, 1, 1), _add_arguments(x, y, out, 40))
    torch.testing.assert_close(out, x + y)
    kernel.launch((1, 1, 1), _add_arguments(x, x, out, 16))
    torch.testing.assert_close(out[:16], 2 * x[:16])


def test_arguments_slots():
    x = torch.rand(2)
    args = _add_arguments(x, x, x, 5)
    assert args.slots() == [x.data_ptr(), x.data_ptr(), x.data_ptr(), 5]


def test_run_message_layout():
    from spine.driver import kernel_protocol as protocol
    message = protocol.run_message(7, (2, 3, 4), 5, bytes([1, 0]), [64, 9])
    command, length, handle, gx, gy, gz, threads, n = struct.unpack_from("<III4iI", message)
    assert (command, handle, gx, gy, gz, threads, n) == (protocol.CMD_RUN, 7, 2, 3, 4, 5, 2)
    assert length == len(message) - 8
    assert message[32:34] == bytes([1, 0]) and struct.unpack_from("<2Q", message, 40) == (64, 9)
    profiled = protocol.run_message(7, (2, 3, 4), 5, bytes([1, 0]), [64, 9], record_programs=True)
    assert struct.unpack_from("<III", profiled) == (protocol.CMD_RUN_PROFILED, len(profiled) - 8, 1)
    assert profiled[12:] == message[8:]


def test_channel_round_trip_and_errors():
    from spine.driver import kernel_protocol as protocol
    request_read, request_write = os.pipe()
    reply_read, reply_write = os.pipe()
    channel = protocol.Channel(reply_read, request_write)

    def serve():
        for status, payload in ((0, b"pong"), (2, b"x > 0"), (1, b"bad")):
            command, length = struct.unpack("<II", os.read(request_read, 8))
            os.read(request_read, length) if length else b""
            os.write(reply_write, struct.pack("<iI", status, len(payload)) + payload)
        os.close(reply_write)

    server = threading.Thread(target=serve)
    server.start()
    assert channel.request(protocol.CMD_PING, b"hi", timeout=10) == b"pong"
    with pytest.raises(DeviceAssertionError, match="x > 0"):
        channel.request(protocol.CMD_PING, b"", timeout=10)
    with pytest.raises(protocol.ServerError, match="bad"):
        channel.request(protocol.CMD_PING, b"", timeout=10)
    server.join()
    with pytest.raises(protocol.ChannelClosed):
        channel.request(protocol.CMD_PING, b"", timeout=10)
    for fd in (request_read, request_write, reply_read):
        os.close(fd)


@triton.jit
def spin_kernel(out_ptr, n: tl.int64):
    acc = n * 0
    for i in range(n):
        acc = (acc * 31 + i) % 1000003
    tl.store(out_ptr, acc)


def test_ctrl_c_interrupts_a_long_launch_under_qemu():
    import platform
    from spine.driver import CPUDriver
    if platform.machine() == "riscv64":
        pytest.skip("no QEMU on a riscv64 machine")
    triton.runtime.driver.set_active(CPUDriver(target="riscv64"))
    out = torch.zeros(1, dtype=torch.int32)
    spin_kernel[(1,)](out, 10)
    spin_kernel[(1,)](out, 16)   # the specialisation the long launch uses is compiled before the timer runs
    # A process started in the background by a shell without job control inherits SIGINT ignored, and
    # Python then installs no KeyboardInterrupt handler: install it, or the endless launch never ends.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _interrupt_long_launches(out)
    finally:
        signal.signal(signal.SIGINT, previous)


def _interrupt_long_launches(out):
    hook = triton.knobs.runtime.launch_enter_hook
    for python_launcher in (False, True):   # a launch hook sends the launch through the Python launcher
        if python_launcher:
            hook.add(print)
        timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT))
        timer.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                spin_kernel[(1,)](out, 1 << 40)
        finally:
            timer.join()
            hook.remove(print)
        test_one_element_add("riscv64")


def test_the_fast_path_refuses_a_reply_longer_than_a_run_has(monkeypatch):
    """A kernel server out of step (or hostile) announces a 2 GiB reply: the launch fails with a clear
    KernelFault and the server is stopped, instead of the host allocating and waiting for what it said."""
    import ctypes
    import platform
    from spine.driver import CPUDriver
    from spine.driver.qemu import QemuKernel
    if platform.machine() == "riscv64":
        pytest.skip("no QEMU on a riscv64 machine")
    triton.runtime.driver.set_active(CPUDriver(target="riscv64"))
    test_one_element_add("riscv64")   # compiled, and the fast path built
    arena = ctypes.create_string_buffer(1 << 16)
    request_read, request_write = os.pipe()
    reply_read, reply_write = os.pipe()
    os.write(reply_write, struct.pack("<iI", 0, 1 << 31))
    lock = threading.Lock()

    def lying_server(self, arena_bytes):
        lock.acquire()
        return (0, ctypes.addressof(arena), request_write, reply_read, 10_000, lock)
    monkeypatch.setattr(QemuKernel, "direct_server", lying_server)
    try:
        x, out = torch.rand(4), torch.zeros(4)
        with pytest.raises(KernelFault, match="announced more bytes"):
            add_kernel[(1,)](x, x, out, 4, BLOCK=4)
        assert not lock.locked()
    finally:
        for fd in (request_read, request_write, reply_read, reply_write):
            os.close(fd)
    monkeypatch.undo()
    test_one_element_add("riscv64")


def test_a_full_kernel_table_under_qemu_replaces_the_server(monkeypatch):
    """With room for one kernel, two kernels launched in turn each find the table full: the server is
    replaced and the kernel loaded again, on both launch paths, and every result is right."""
    import platform
    from spine.driver import CPUDriver
    from spine.driver.cpu_driver import _executor_for
    from spine.targets import riscv64_target
    if platform.machine() == "riscv64":
        pytest.skip("no QEMU on a riscv64 machine")
    triton.runtime.driver.set_active(CPUDriver(target="riscv64"))
    test_one_element_add("riscv64")
    out = torch.zeros(6, dtype=torch.float64)
    scalars_kernel[(1,)](out, 3, 4, 5, 6, 7, False)   # both compiled before the server is replaced
    executor = _executor_for(riscv64_target())
    executor.shutdown()
    monkeypatch.setenv("SPINE_SERVER_KERNEL_SLOTS", "1")
    started = executor.generation
    hook = triton.knobs.runtime.launch_enter_hook
    for python_launcher in (False, True):
        if python_launcher:
            hook.add(print)
        try:
            for _ in range(2):
                test_one_element_add("riscv64")
                out.zero_()
                scalars_kernel[(1,)](out, 3, 4, 5, 6, 7, False)
                assert out.tolist() == [3.0, 4.0, 5.0, 6.0, 7.0, 0.0]
        finally:
            if python_launcher:
                hook.remove(print)
    assert executor.generation - started >= 4
    executor.shutdown()


def test_a_load_interrupted_before_its_reply_replaces_the_server(monkeypatch):
    """Ctrl-C after a LOAD went out and before its reply was read: that reply, still in the pipe, once
    answered the next launch's RUN (a handle and an address read as the launch's result)."""
    import platform
    from spine.driver import CPUDriver
    from spine.driver.kernel_protocol import Channel
    if platform.machine() == "riscv64":
        pytest.skip("no QEMU on a riscv64 machine")
    triton.runtime.driver.set_active(CPUDriver(target="riscv64"))
    test_one_element_add("riscv64")
    out = torch.zeros(6, dtype=torch.float64)
    scalars_kernel[(1,)](out, 3, 4, 5, 6, 7, False)
    from spine.driver.cpu_driver import _executor_for
    from spine.targets import riscv64_target
    _executor_for(riscv64_target()).shutdown()   # both kernels load again on the next server
    real = Channel.read_reply
    replies = []

    def interrupted_once(self, *args, **kwargs):
        replies.append(True)
        if len(replies) == 2:   # the new server's hello is the first reply, the LOAD's the second
            raise KeyboardInterrupt
        return real(self, *args, **kwargs)
    monkeypatch.setattr(Channel, "read_reply", interrupted_once)
    with pytest.raises(KeyboardInterrupt):
        scalars_kernel[(1,)](out, 3, 4, 5, 6, 7, False)
    monkeypatch.undo()
    for _ in range(2):
        test_one_element_add("riscv64")
        scalars_kernel[(1,)](out, 3, 4, 5, 6, 7, False)
        assert out.tolist() == [3.0, 4.0, 5.0, 6.0, 7.0, 0.0]


class _StorageView:
    """What FlagGems' StridedBuffer is to triton: a data pointer into a tensor's storage (here its last
    row), a dtype, the storage; no shape of its own that Spine could read."""

    def __init__(self, base, offset):
        self.base, self.dtype = base, base.dtype
        self._ptr = base.data_ptr() + offset * base.element_size()

    def data_ptr(self):
        return self._ptr

    def untyped_storage(self):
        return self.base.untyped_storage()


@triton.jit
def _reverse_row_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(dst_ptr + offs, tl.load(src_ptr - offs, mask=offs < n), mask=offs < n)   # walks backwards


def test_a_pointer_that_is_not_a_tensor_reaches_its_whole_storage(target):
    """Under QEMU the arena gets the whole storage such an object names, so a kernel reading before
    its data pointer (a negative stride, as FlagGems' flip) reads what it reads natively."""
    x = torch.arange(40, dtype=torch.float32)
    out = torch.zeros(10)
    _reverse_row_kernel[(1,)](_StorageView(x, 39), _StorageView(out, 0), 10, BLOCK=16)
    assert out.tolist() == [float(v) for v in range(39, 29, -1)]


@triton.jit
def scaled_copy_kernel(x_ptr, out_ptr, n, SCALE: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * SCALE, mask=offs < n)


def test_alternating_kernels_find_their_code_range_cached():
    """The fault guard looks a kernel's code range up (a walk over every loaded object) on its first
    launch only: twelve kernels launched in turn, as a model's layers launch theirs, hit the cache."""
    import ctypes
    from spine.driver import CPUDriver
    from spine.driver.toolchain import host_runtime_library
    triton.runtime.driver.set_active(CPUDriver(target="host"))
    lookups = ctypes.CDLL(host_runtime_library()).spine_fault_guard_code_lookups
    lookups.restype = ctypes.c_uint64
    x, out = torch.rand(5), torch.empty(5)
    scales = range(1, 13)
    for scale in scales:               # compiled, loaded and launched once each
        scaled_copy_kernel[(1,)](x, out, 5, SCALE=scale, BLOCK=8)
    before = lookups()
    for _ in range(5):
        for scale in scales:
            scaled_copy_kernel[(1,)](x, out, 5, SCALE=scale, BLOCK=8)
            torch.testing.assert_close(out, x * scale)
    assert lookups() == before
