/* The host launch fast path, a Python extension (pybind11): triton calls a DirectLauncher for every
 * launch of a kernel, and it turns the arguments into the 8-byte slots of the kernel's entry point and runs
 * the grid with the GIL released, with no Python frame of its own. DirectLauncher's Python type is a plain
 * CPython one with vectorcall (LauncherObject, at the end), so the caller's argument array arrives as it is.
 *
 * It only takes the common case: CPU tensors, Python ints and floats, no launch hooks, no profiling
 * listener, arguments that do not alias memory the kernel writes. Anything else goes to `slow`, the
 * Python launcher, which handles it in full (tensor wrappers, errors about bad arguments, the alias-safe
 * variant, profiled launches).
 *
 * A kernel object offers one of two ways in: `direct_entry`, an entry point in this process (NativeKernel),
 * or `direct_server(arena bytes)`, a kernel server reached through a shared arena and a pair of pipes
 * (QemuKernel): the launch is then one RUN round trip of the kernel server protocol, with the tensors'
 * byte ranges copied into the arena before and the written ones back after, as qemu.py's arena_layout.
 * A launch that did not succeed is handed to `finish`, which raises the Python exception.
 *
 * The runtime's settings (threads, kernel capture, the host kernel timeout) come from `settings`,
 * spine/driver/settings.py's runtime_settings, which reads and validates spine/switches.py's variables.
 * Calling it costs more than the rest of a launch, so its answer is kept while the environment array holds
 * the same entries (see environment() at the end), and the C runtime reads no variable itself. */
#include <pybind11/pybind11.h>

#include <cerrno>
#include <cstddef>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include <poll.h>
#include <unistd.h>

namespace py = pybind11;

namespace {

typedef int (*run_grid_fn)(void *entry, void **args, int32_t gx, int32_t gy, int32_t gz, int32_t threads,
                           int64_t timeout_ns);
typedef int (*assert_pending_fn)(void);

/* How a parameter's value becomes its slot. */
enum Kind : uint8_t { POINTER = 0, INT = 1, FP32 = 2, FP64 = 3, FP16 = 4, BF16 = 5 };

constexpr size_t MAX_PARAMS = 512;
/* A bounds-checked (debug) kernel takes each pointer's extent after its own parameters. */
constexpr size_t MAX_SLOTS = 2 * MAX_PARAMS;
/* A RUN's reply carries an error or assertion message: a longer announced length is a broken stream,
 * never an allocation of up to 4 GiB. */
constexpr uint32_t MAX_RUN_REPLY = 1u << 20;

struct Param {
    Kind kind;
    uint64_t mask;       /* INT: the value's bits */
    Py_ssize_t position; /* where triton's argument tuple has it */
    bool reads;          /* read in place: it must not overlap memory the kernel writes */
    bool checked_write;  /* written, and checked against those read in place */
    bool written;
};

struct ByteRange {
    uintptr_t lo, hi;
    bool reads, written;
};

uint16_t half_bits(double value) {
    _Float16 h = (_Float16)value;
    uint16_t bits;
    std::memcpy(&bits, &h, 2);
    return bits;
}

uint16_t bf16_bits(double value) {  /* round to nearest even, as arguments.py's _bf16_encode */
    float f = (float)value;
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    return (uint16_t)(((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF);
}

/* Whether environ holds the same entries as `entries`, a copy taken earlier: setenv, putenv and unsetenv
 * (os.environ's writes among them) each change an entry's pointer or the array's length. glibc keeps every
 * string setenv made and hands the same one out for the same NAME=value, so equal pointers are equal
 * values. */
bool environment_unchanged(const std::vector<char *> &entries) {
    size_t n = 0;
    while (environ[n] != nullptr) n++;
    return entries.size() == n && std::memcmp(entries.data(), environ, n * sizeof(char *)) == 0;
}

void copy_environment(std::vector<char *> *entries) {
    size_t n = 0;
    while (environ[n] != nullptr) n++;
    entries->assign(environ, environ + n);
}

/* runtime_settings()'s answer, and the environment it was read in. */
struct Settings {
    std::vector<char *> environment;
    bool read = false;
    int32_t threads = 1;
    bool capture = false;
    int64_t timeout_ns = 0;
};

class DirectLauncher {
  public:
    DirectLauncher(py::list params, py::list extents, py::handle tensor_type, py::list sessions, py::list captures,
                   uintptr_t run_grid, uintptr_t assert_pending, py::object settings, py::object slow,
                   py::object finish)
        : tensor_type_((PyTypeObject *)tensor_type.ptr()), sessions_(sessions), captures_(captures),
          run_grid_((run_grid_fn)run_grid), assert_pending_((assert_pending_fn)assert_pending),
          read_settings_(settings), slow_(slow), finish_(finish) {
        for (py::handle item : params) {
            py::tuple t = py::reinterpret_borrow<py::tuple>(item);
            Param p;
            p.kind = (Kind)t[0].cast<int>();
            int bits = t[1].cast<int>();
            p.mask = bits >= 64 ? ~0ull : ((1ull << bits) - 1);
            p.position = t[2].cast<Py_ssize_t>();
            p.reads = t[3].cast<bool>();
            p.checked_write = t[4].cast<bool>();
            p.written = t[5].cast<bool>();
            params_.push_back(p);
        }
        if (params_.size() > MAX_PARAMS) throw std::invalid_argument("too many kernel parameters");
        /* extents: for each pointer parameter in order, its pointee's bytes (empty: no bounds checks) */
        for (size_t i = 0; i < params_.size() && extents.size(); i++)
            if (params_[i].kind == POINTER) extent_of_.push_back(i);
        for (py::handle bytes : extents) extent_bytes_.push_back(bytes.cast<int64_t>());
        if (extent_bytes_.size() != (extents.size() ? extent_of_.size() : 0))
            throw std::invalid_argument("one extent per pointer parameter");
        is_cpu_ = py::str("is_cpu");
        data_ptr_ = py::str("data_ptr");
        shape_ = py::str("shape");
        stride_ = py::str("stride");
        element_size_ = py::str("element_size");
        direct_entry_ = py::str("direct_entry");
        calls_ = py::str("calls");
        direct_server_ = py::str("direct_server");
        untyped_storage_ = py::str("untyped_storage");
        active_ = py::str("active");
        is_contiguous_ = py::str("is_contiguous");
        nbytes_ = py::str("nbytes");
    }

    /* the Python launcher (CPULauncher) this one falls back to: what it knows about the kernel */
    py::object python_launcher() const { return slow_; }

    /* triton's launcher call, its n arguments in a: (gridX, gridY, gridZ, stream, function, packed_metadata,
     * launch_metadata, launch_enter_hook, launch_exit_hook, *args). */
    py::object call(PyObject *const *a, Py_ssize_t n) {
        Call all{a, n};
        if (n < 9 || !no_hook(a[7]) || !no_hook(a[8]) || listening()) return slow(all);
        const Settings &settings = current_settings();  /* raises ValueError for a bad variable */
        if (settings.capture) return slow(all);
        int32_t grid[3];
        for (int d = 0; d < 3; d++) {
            long g = PyLong_Check(a[d]) ? PyLong_AsLong(a[d]) : -1;
            if (g < 0 || g > INT32_MAX) {
                PyErr_Clear();
                return slow(all);
            }
            grid[d] = (int32_t)g;
        }
        void *entry = entry_of(a[4]);
        if (entry == nullptr) return slow(all);  /* neither way in */
        int32_t threads = settings.threads;

        uint64_t slots[MAX_SLOTS];
        void *pointers[MAX_SLOTS];
        ByteRange ranges[MAX_PARAMS];
        size_t num_ranges = 0;
        PyObject *const *args = a + 9;
        Py_ssize_t num_args = n - 9;
        for (size_t i = 0; i < params_.size(); i++) {
            const Param &p = params_[i];
            if (p.position >= num_args) return slow(all);
            PyObject *value = args[p.position];
            if (!encode(p, value, &slots[i])) return slow(all);
            if (p.reads || p.checked_write) {
                ByteRange &range = ranges[num_ranges++];
                if (!byte_range(value, slots[i], &range)) return slow(all);
                range.reads = p.reads;
                range.written = p.checked_write;
            }
            pointers[i] = &slots[i];
        }
        if (num_ranges && overlaps(ranges, num_ranges)) return slow(all);  /* the alias-safe variant */
        size_t num_slots = params_.size();
        for (size_t k = 0; k < extent_of_.size(); k++, num_slots++) {  /* as arguments.element_extent */
            size_t i = extent_of_[k];
            ByteRange range;
            if (!byte_range(args[params_[i].position], slots[i], &range)) return slow(all);
            slots[num_slots] = (uint64_t)((int64_t)(range.hi - range.lo) / extent_bytes_[k]);
            pointers[num_slots] = &slots[num_slots];
        }
        int64_t programs;
        if (__builtin_mul_overflow((int64_t)grid[0] * grid[1], (int64_t)grid[2], &programs) || programs > (1LL << 62))
            return slow(all);  /* which says why (the grid runtime counts at most 2^62 programs) */
        if (programs == 0) return py::none();
        if (entry == SERVER) return arena_launch(all, a[4], args, grid, threads, slots, num_slots);
        int rc;
        {
            py::gil_scoped_release released;
            rc = run_grid_(entry, pointers, grid[0], grid[1], grid[2], threads, settings.timeout_ns);
        }
        if (rc != 0 || assert_pending_()) finish_(py::handle(a[4]), rc);
        return py::none();
    }

  private:
    /* entry_of's answer for a kernel reached through a kernel server. */
    static inline void *const SERVER = (void *)1;

    /* A launch's arguments as the caller passed them (vectorcall: no tuple). */
    struct Call {
        PyObject *const *a;
        Py_ssize_t n;
    };

    py::object slow(Call all) {
        PyObject *result = PyObject_Vectorcall(slow_.ptr(), all.a, (size_t)all.n, nullptr);
        if (result == nullptr) throw py::error_already_set();
        return py::reinterpret_steal<py::object>(result);
    }

    /* The settings for this launch: those last read, unless the environment changed since. */
    const Settings &current_settings() {
        if (settings_.read && environment_unchanged(settings_.environment)) return settings_;
        settings_.read = false;
        copy_environment(&settings_.environment);
        py::tuple t = read_settings_();
        settings_.threads = t[0].cast<int32_t>();
        settings_.capture = t[1].cast<bool>();
        settings_.timeout_ns = t[2].cast<int64_t>();
        settings_.read = true;
        return settings_;
    }

    struct Span {
        uintptr_t lo, hi, key;
        bool written;
        uint64_t offset;
    };

    /* One RUN round trip to the kernel server behind `function` (see the top of this file). */
    py::object arena_launch(Call all, PyObject *function, PyObject *const *args, const int32_t grid[3],
                            int32_t threads, uint64_t *slots, size_t num_slots) {
        Span spans[MAX_PARAMS];
        size_t num_spans = 0, span_of[MAX_PARAMS] = {};
        for (size_t i = 0; i < params_.size(); i++) {
            const Param &p = params_[i];
            if (p.kind != POINTER) continue;
            ByteRange range;
            uintptr_t key;
            if (!byte_range(args[p.position], slots[i], &range) || !storage_of(args[p.position], &key))
                return slow(all);
            spans[num_spans] = Span{range.lo, range.hi, key, p.written, 0};
            span_of[i] = num_spans++;
        }
        num_spans = merge_spans(spans, num_spans, span_of, params_.size());
        uint64_t total = 0;
        for (size_t s = 0; s < num_spans; s++) {
            spans[s].offset = total;
            total += (spans[s].hi - spans[s].lo + 63) / 64 * 64;
        }
        /* (handle, arena address, request fd, reply fd, timeout ms or -1, lock held) or None; the lock is
         * the executor's, taken by direct_server and released by us. */
        py::object server = py::reinterpret_steal<py::object>(
            PyObject_CallMethodOneArg(function, direct_server_.ptr(), py::int_(total).ptr()));
        if (!server) throw py::error_already_set();
        if (server.is_none()) return slow(all);
        py::tuple t = py::reinterpret_borrow<py::tuple>(server);
        /* The lock first: a cast below that throws must still release it, or every later launch waits. */
        py::object lock = t[5];
        struct Release {
            py::object &lock;
            ~Release() { lock.attr("release")(); }
        } release{lock};
        uint32_t handle = t[0].cast<uint32_t>();
        uint8_t *arena = (uint8_t *)t[1].cast<uintptr_t>();
        int request_fd = t[2].cast<int>(), reply_fd = t[3].cast<int>();
        int64_t timeout_ms = t[4].cast<int64_t>();

        size_t n = num_slots, values_at = (24 + n + 7) / 8 * 8;
        std::vector<uint8_t> message(8 + values_at + 8 * n, 0);
        uint32_t header[2] = {2 /* RUN */, (uint32_t)(values_at + 8 * n)};
        int32_t head[6];
        std::memcpy(&head[0], &handle, 4);
        std::memcpy(&head[1], grid, 12);
        head[4] = threads;
        head[5] = (int32_t)n;
        std::memcpy(message.data(), header, 8);
        std::memcpy(message.data() + 8, head, 24);
        for (size_t i = 0; i < n; i++) {
            uint64_t value = slots[i];
            if (i < params_.size() && params_[i].kind == POINTER) {
                const Span &span = spans[span_of[i]];
                value = span.offset + (slots[i] - span.lo);
                message[8 + 24 + i] = 1;  /* an arena offset */
            }
            std::memcpy(message.data() + 8 + values_at + 8 * i, &value, 8);
        }
        int32_t status;
        std::string body;
        {
            py::gil_scoped_release released;
            for (size_t s = 0; s < num_spans; s++)
                std::memcpy(arena + spans[s].offset, (void *)spans[s].lo, spans[s].hi - spans[s].lo);
            status = round_trip(request_fd, reply_fd, message, timeout_ms, &body);
            if (status == 0 || status == 2)  /* what the kernel wrote is visible, even when it asserted */
                for (size_t s = 0; s < num_spans; s++)
                    if (spans[s].written)
                        std::memcpy((void *)spans[s].lo, arena + spans[s].offset, spans[s].hi - spans[s].lo);
        }
        if (status == -3) {  /* interrupted: the reply is still to come, so the server is stopped */
            PyObject *type, *value, *traceback;
            PyErr_Fetch(&type, &value, &traceback);
            try {
                finish_(py::handle(function), status, py::bytes(body));
            } catch (py::error_already_set &) {
            }
            PyErr_Restore(type, value, traceback);
            throw py::error_already_set();
        }
        if (status != 0 || !body.empty()) finish_(py::handle(function), status, py::bytes(body));
        return py::none();
    }

    /* Writes the request and reads the reply's status and payload: -1 when the stream closed, -2 when no
     * reply came within timeout_ms, -3 when a Python signal handler raised (its exception is set). */
    static int32_t round_trip(int request_fd, int reply_fd, const std::vector<uint8_t> &message, int64_t timeout_ms,
                              std::string *body) {
        size_t sent = 0;
        while (sent < message.size()) {
            ssize_t w = write(request_fd, message.data() + sent, message.size() - sent);
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) break;  /* the read below reports the closed stream */
            sent += (size_t)w;
        }
        struct timespec start;
        clock_gettime(CLOCK_MONOTONIC, &start);
        uint8_t header[8];
        int32_t rc = read_exact(reply_fd, header, 8, timeout_ms, start);
        if (rc) return rc;
        int32_t status;
        uint32_t length;
        std::memcpy(&status, header, 4);
        std::memcpy(&length, header + 4, 4);
        if (length > MAX_RUN_REPLY) return -4;
        body->resize(length);
        if (length && (rc = read_exact(reply_fd, &(*body)[0], length, timeout_ms, start))) return rc;
        return status;
    }

    static int32_t read_exact(int fd, void *buffer, size_t n, int64_t timeout_ms, struct timespec start) {
        uint8_t *p = (uint8_t *)buffer;
        while (n) {
            int wait = -1;
            if (timeout_ms >= 0) {
                struct timespec now;
                clock_gettime(CLOCK_MONOTONIC, &now);
                int64_t spent = (now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000;
                if (spent >= timeout_ms) return -2;
                /* poll takes an int: a longer wait is cut into pieces, the deadline stays the reply's */
                int64_t left = timeout_ms - spent;
                wait = left < INT32_MAX ? (int)left : INT32_MAX;
            }
            struct pollfd ready = {fd, POLLIN, 0};
            int r = poll(&ready, 1, wait);
            if (r < 0 && errno == EINTR) {
                /* A signal: run Python's handlers; one that raises (Ctrl-C) ends the wait. */
                py::gil_scoped_acquire held;
                if (PyErr_CheckSignals() != 0) return -3;
                continue;
            }
            if (r == 0) return -2;
            ssize_t got = read(fd, p, n);
            if (got < 0 && errno == EINTR) continue;
            if (got <= 0) return -1;
            p += got;
            n -= (size_t)got;
        }
        return 0;
    }

    /* Joins spans that share a storage or whose bytes overlap, so each byte of memory has one place in the
     * arena: two written views of one buffer from different storages (torch.frombuffer over one bytearray
     * and a memoryview of it) copied back as separate spans would each overwrite the other's stores.
     * `span_of` maps each of the `num_params` parameters to its span and is renumbered. Quadratic: a
     * launch has few spans. */
    static size_t merge_spans(Span *spans, size_t n, size_t *span_of, size_t num_params) {
        size_t group[MAX_PARAMS];
        for (size_t s = 0; s < n; s++) group[s] = s;
        for (bool joined = true; joined;) {
            joined = false;
            for (size_t a = 0; a < n; a++) {
                for (size_t b = a + 1; b < n; b++) {
                    if (group[b] == group[a]) continue;
                    Span &x = spans[group[a]], &y = spans[group[b]];
                    bool overlap = x.lo < y.hi && y.lo < x.hi;
                    if (x.key != y.key && !overlap) continue;
                    x.lo = x.lo < y.lo ? x.lo : y.lo;
                    x.hi = x.hi > y.hi ? x.hi : y.hi;
                    x.written |= y.written;
                    size_t gone = group[b];
                    for (size_t c = 0; c < n; c++)
                        if (group[c] == gone) group[c] = group[a];
                    joined = true;
                }
            }
        }
        size_t number[MAX_PARAMS], kept = 0;
        for (size_t s = 0; s < n; s++) {
            if (group[s] != s) continue;
            number[s] = kept;
            spans[kept++] = spans[s];
        }
        for (size_t i = 0; i < num_params && n; i++) span_of[i] = number[group[span_of[i]]];
        return kept;
    }

    /* The address of a tensor's storage, which groups views of one storage into one span. */
    bool storage_of(PyObject *tensor, uintptr_t *key) {
        py::object storage = py::reinterpret_steal<py::object>(PyObject_CallMethodNoArgs(tensor, untyped_storage_.ptr()));
        if (!storage) return clear();
        py::object ptr = py::reinterpret_steal<py::object>(PyObject_CallMethodNoArgs(storage.ptr(), data_ptr_.ptr()));
        if (!ptr) return clear();
        *key = (uintptr_t)PyLong_AsUnsignedLongLong(ptr.ptr());
        return !PyErr_Occurred() || clear();
    }

    /* Whether a profiling session is active (spine/proton/session.py's plan_launch) or a launch graph
     * captures (spine/driver/graph.py): both are the Python launcher's work. */
    bool listening() {
        if (PyList_GET_SIZE(captures_.ptr()) > 0) return true;
        PyObject *list = sessions_.ptr();
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(list); i++) {
            PyObject *active = PyObject_GetAttr(PyList_GET_ITEM(list, i), active_.ptr());
            int on = active == nullptr ? 1 : PyObject_IsTrue(active);
            Py_XDECREF(active);
            if (on != 0) {
                PyErr_Clear();
                return true;
            }
        }
        return false;
    }

    /* None, or one of triton's HookChains with no hook in it. */
    bool no_hook(PyObject *hook) {
        if (hook == Py_None) return true;
        PyObject *calls = PyObject_GetAttr(hook, calls_.ptr());
        bool empty = calls != nullptr && PyList_Check(calls) && PyList_GET_SIZE(calls) == 0;
        Py_XDECREF(calls);
        if (calls == nullptr) PyErr_Clear();
        return empty;
    }

    /* The entry point the loaded kernel object lets us call directly, SERVER when it is reached through
     * direct_server, null when every launch must go through its launch(); looked up once per object. */
    void *entry_of(PyObject *function) {
        if (function != last_function_.ptr()) {
            PyObject *entry = PyObject_GetAttr(function, direct_entry_.ptr());
            if (entry == nullptr) {
                PyErr_Clear();
                return nullptr;
            }
            last_entry_ = PyLong_AsVoidPtr(entry);
            Py_DECREF(entry);
            if (PyErr_Occurred()) {
                PyErr_Clear();
                return nullptr;
            }
            if (last_entry_ != nullptr && run_grid_ == nullptr) last_entry_ = nullptr;  /* no runtime here */
            if (last_entry_ == nullptr && PyObject_HasAttr(function, direct_server_.ptr())) last_entry_ = SERVER;
            last_function_ = py::reinterpret_borrow<py::object>(function);
        }
        return last_entry_;
    }

    bool encode(const Param &p, PyObject *value, uint64_t *slot) {
        switch (p.kind) {
        case POINTER: {
            if (!PyObject_TypeCheck(value, tensor_type_)) return false;
            PyObject *cpu = PyObject_GetAttr(value, is_cpu_.ptr());
            bool on_cpu = cpu == Py_True;
            Py_XDECREF(cpu);
            if (!on_cpu) return clear();
            PyObject *ptr = PyObject_CallMethodNoArgs(value, data_ptr_.ptr());
            if (ptr == nullptr) return clear();
            *slot = PyLong_AsUnsignedLongLong(ptr);
            Py_DECREF(ptr);
            return !PyErr_Occurred() || clear();
        }
        case INT: {
            if (!PyLong_Check(value)) return false;
            *slot = PyLong_AsUnsignedLongLongMask(value) & p.mask;
            return !PyErr_Occurred() || clear();
        }
        default: {
            if (!PyFloat_Check(value) && !PyLong_Check(value)) return false;
            double d = PyFloat_AsDouble(value);
            if (PyErr_Occurred()) return clear();
            /* A finite value its type cannot hold: the Python launcher raises OverflowError for it. */
            bool narrow = p.kind == FP32 || p.kind == BF16;
            if (std::isfinite(d) && (narrow ? std::isinf((float)d) : p.kind == FP16 && std::isinf((double)(_Float16)d)))
                return false;
            if (p.kind == FP32) {
                float f = (float)d;
                uint32_t bits;
                std::memcpy(&bits, &f, 4);
                *slot = bits;
            } else if (p.kind == FP64) {
                std::memcpy(slot, &d, 8);
            } else {
                *slot = p.kind == FP16 ? half_bits(d) : bf16_bits(d);
            }
            return true;
        }
        }
    }

    static bool clear() {
        PyErr_Clear();
        return false;
    }

    /* [first, last + 1) bytes a tensor view may touch, as arguments.byte_range. A contiguous view touches
     * its nbytes from its data pointer (a dimension of size 1 adds nothing, whatever its stride): two of
     * torch's calls where shape, stride() and element_size() are three, each about 0.1 us. */
    bool byte_range(PyObject *tensor, uint64_t data, ByteRange *range) {
        PyObject *contiguous = PyObject_CallMethodNoArgs(tensor, is_contiguous_.ptr());
        if (contiguous == nullptr) return clear();
        bool dense = contiguous == Py_True;
        Py_DECREF(contiguous);
        if (dense) {
            PyObject *nbytes = PyObject_GetAttr(tensor, nbytes_.ptr());
            if (nbytes == nullptr) return clear();
            long long bytes = PyLong_AsLongLong(nbytes);
            Py_DECREF(nbytes);
            if (bytes < 0) return clear();
            range->lo = data;
            range->hi = data + (uint64_t)bytes;
            return true;
        }
        py::object shape = py::reinterpret_steal<py::object>(PyObject_GetAttr(tensor, shape_.ptr()));
        py::object stride = py::reinterpret_steal<py::object>(PyObject_CallMethodNoArgs(tensor, stride_.ptr()));
        py::object size = py::reinterpret_steal<py::object>(PyObject_CallMethodNoArgs(tensor, element_size_.ptr()));
        if (!shape || !stride || !size || !PyTuple_Check(shape.ptr()) || !PyTuple_Check(stride.ptr())) return clear();
        Py_ssize_t rank = PyTuple_GET_SIZE(shape.ptr());
        if (PyTuple_GET_SIZE(stride.ptr()) != rank) return false;
        int64_t extent = 1;
        for (Py_ssize_t d = 0; d < rank; d++) {
            int64_t s = PyLong_AsLongLong(PyTuple_GET_ITEM(shape.ptr(), d));
            int64_t st = PyLong_AsLongLong(PyTuple_GET_ITEM(stride.ptr(), d));
            if (s == 0) return empty(data, range);
            extent += (s - 1) * st;
        }
        int64_t bytes = PyLong_AsLongLong(size.ptr());
        if (PyErr_Occurred()) return clear();
        range->lo = data;
        range->hi = data + extent * bytes;
        return true;
    }

    static bool empty(uint64_t data, ByteRange *range) {
        range->lo = range->hi = data;
        return true;
    }

    /* Whether a range the kernel reads in place shares bytes with one it writes. */
    static bool overlaps(const ByteRange *ranges, size_t n) {
        for (size_t i = 0; i < n; i++) {
            if (!ranges[i].reads) continue;
            for (size_t j = 0; j < n; j++)
                if (ranges[j].written && ranges[i].lo < ranges[j].hi && ranges[j].lo < ranges[i].hi) return true;
        }
        return false;
    }

    std::vector<Param> params_;
    std::vector<size_t> extent_of_;      /* bounds-checked kernels: the parameter of each extent slot */
    std::vector<int64_t> extent_bytes_;  /* and its pointee's size */
    PyTypeObject *tensor_type_;
    py::list sessions_, captures_;
    run_grid_fn run_grid_;
    assert_pending_fn assert_pending_;
    py::object read_settings_;
    Settings settings_;
    py::object slow_, finish_;
    py::object last_function_;
    void *last_entry_ = nullptr;
    py::str is_cpu_, data_ptr_, shape_, stride_, element_size_, direct_entry_, calls_, active_, direct_server_,
        untyped_storage_, is_contiguous_, nbytes_;
};

/* The raw values of environment variables (None when unset), as one tuple: what the driver keys its
 * device index by, read without os.environ's per-variable Python work. triton asks on every launch, and a
 * getenv per name scans the whole environment each time, so the answer is kept while the environment array
 * holds the same entries (environment_unchanged). */
struct EnvironmentAnswer {
    std::vector<char *> entries;      /* environ's entries when `values` was read */
    PyObject *names = nullptr;        /* strong references, never released: a static py::object would be */
    PyObject *values = nullptr;       /* released after the interpreter is gone */
};
static EnvironmentAnswer *const last_environment = new EnvironmentAnswer;

py::tuple environment(py::tuple names) {
    if (last_environment->names == names.ptr() && environment_unchanged(last_environment->entries))
        return py::reinterpret_borrow<py::tuple>(last_environment->values);
    Py_ssize_t n = PyTuple_GET_SIZE(names.ptr());
    py::tuple out(n);
    for (Py_ssize_t i = 0; i < n; i++) {
        const char *value = std::getenv(PyUnicode_AsUTF8(PyTuple_GET_ITEM(names.ptr(), i)));
        PyObject *item = value != nullptr && *value != 0 ? PyBytes_FromString(value) : Py_NewRef(Py_None);
        PyTuple_SET_ITEM(out.ptr(), i, item);
    }
    copy_environment(&last_environment->entries);
    Py_XSETREF(last_environment->names, Py_NewRef(names.ptr()));
    Py_XSETREF(last_environment->values, Py_NewRef(out.ptr()));
    return out;
}

/* The Python type of a DirectLauncher: a plain CPython type with vectorcall, rather than a pybind11 class,
 * because triton calls it for every launch. pybind11's dispatch copied the arguments into a new tuple (whose
 * allocations also run the garbage collector), looked the C++ type up and parsed the call: about a third of
 * a warm launch's own time. Here the caller's argument array reaches DirectLauncher::call as it is.
 * Constructed with pybind11's casts, once per compiled kernel. */
struct LauncherObject {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    DirectLauncher *launcher;
};

/* Runs f (which returns a new reference or null), turning a C++ exception into the Python one pybind11 would
 * raise for it. */
template <class F>
PyObject *guarded(F f) {
    try {
        return f();
    } catch (py::error_already_set &e) {
        e.restore();
    } catch (py::builtin_exception &e) {
        e.set_error();
    } catch (std::invalid_argument &e) {
        PyErr_SetString(PyExc_ValueError, e.what());
    } catch (std::bad_alloc &) {
        PyErr_NoMemory();
    } catch (std::exception &e) {
        PyErr_SetString(PyExc_RuntimeError, e.what());
    }
    return nullptr;
}

PyObject *launcher_call(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    if (kwnames != nullptr && PyTuple_GET_SIZE(kwnames) > 0) {
        PyErr_SetString(PyExc_TypeError, "a DirectLauncher takes positional arguments only");
        return nullptr;
    }
    DirectLauncher *launcher = ((LauncherObject *)self)->launcher;
    return guarded([&] { return launcher->call(args, PyVectorcall_NARGS(nargsf)).release().ptr(); });
}

PyObject *launcher_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    if (kwargs != nullptr && PyDict_GET_SIZE(kwargs) > 0) {
        PyErr_SetString(PyExc_TypeError, "DirectLauncher takes positional arguments only");
        return nullptr;
    }
    if (PyTuple_GET_SIZE(args) != 10) {
        PyErr_Format(PyExc_TypeError, "DirectLauncher takes 10 arguments (%zd given)", PyTuple_GET_SIZE(args));
        return nullptr;
    }
    return guarded([&]() -> PyObject * {
        py::tuple t = py::reinterpret_borrow<py::tuple>(args);
        auto *launcher = new DirectLauncher(t[0].cast<py::list>(), t[1].cast<py::list>(), t[2], t[3].cast<py::list>(),
                                            t[4].cast<py::list>(), t[5].cast<uintptr_t>(), t[6].cast<uintptr_t>(),
                                            t[7], t[8], t[9]);
        PyObject *self = type->tp_alloc(type, 0);
        if (self == nullptr) {
            delete launcher;
            return nullptr;
        }
        ((LauncherObject *)self)->vectorcall = launcher_call;
        ((LauncherObject *)self)->launcher = launcher;
        return self;
    });
}

void launcher_dealloc(PyObject *self) {
    delete ((LauncherObject *)self)->launcher;
    Py_TYPE(self)->tp_free(self);
}

PyObject *launcher_python_launcher(PyObject *self, void *) {
    return ((LauncherObject *)self)->launcher->python_launcher().release().ptr();
}

PyGetSetDef launcher_getset[] = {
    {"python_launcher", launcher_python_launcher, nullptr,
     "the Python launcher (CPULauncher) this one falls back to: what it knows about the kernel", nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

PyTypeObject launcher_type = {PyVarObject_HEAD_INIT(nullptr, 0)};

py::handle launcher_type_ready() {
    launcher_type.tp_name = "spine_launch.DirectLauncher";
    launcher_type.tp_basicsize = sizeof(LauncherObject);
    launcher_type.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL;
    launcher_type.tp_vectorcall_offset = offsetof(LauncherObject, vectorcall);
    launcher_type.tp_call = PyVectorcall_Call;
    launcher_type.tp_new = launcher_new;
    launcher_type.tp_dealloc = launcher_dealloc;
    launcher_type.tp_getset = launcher_getset;
    launcher_type.tp_doc = "DirectLauncher(params, extents, tensor_type, sessions, captures, run_grid, "
                           "assert_pending, settings, slow, finish): triton's launcher for one compiled kernel";
    if (PyType_Ready(&launcher_type) < 0) throw py::error_already_set();
    return py::handle((PyObject *)&launcher_type);
}

}  // namespace

PYBIND11_MODULE(spine_launch, m) {
    m.doc() = "Spine's host launch fast path";
    m.add_object("DirectLauncher", launcher_type_ready());
    m.def("environment", &environment);
    m.attr("POINTER") = (int)POINTER;
    m.attr("INT") = (int)INT;
    m.attr("FP32") = (int)FP32;
    m.attr("FP64") = (int)FP64;
    m.attr("FP16") = (int)FP16;
    m.attr("BF16") = (int)BF16;
}
