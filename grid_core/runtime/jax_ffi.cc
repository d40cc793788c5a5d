// XLA FFI handlers through which JAX calls a GRiD library (grid_core.abi) inside its own
// programs: jax.jit, jax.vmap, XLA's stream and XLA's buffers, so a call costs no copy and
// no synchronisation.  Robot-independent: the attributes of each call name the library and
// the packed device entry (grid_abi_X_f32_packed ...), resolved once with dlopen/dlsym.
//
//   grid_ffi_call_cuda   XLA:GPU, on XLA's stream; the library must be a CUDA build
//   grid_ffi_call_host   XLA:CPU; the library must be a host-emulation build (tests, CI);
//                        each call recorded with its device, when asked (grid_ffi_record)
//
// Built by grid_core.runtime.jax_ffi against the headers jaxlib ships (jax.ffi.include_dir()).
#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

// The stream is only passed through to the library: no CUDA header is needed to name it.
struct CUstream_st;
using cudaStream_t = CUstream_st *;

namespace {

using Packed = int (*)(const uint64_t *);
using ErrorString = const char *(*)(int);
using Platform = int (*)();

// grid_abi_platform(): 0 for a CUDA build, 1 for host emulation
constexpr int kCuda = 0, kHost = 1;

struct Entry {
    Packed fn = nullptr;
    ErrorString error_string = nullptr;
    int platform = -1;
};

std::mutex entries_lock;
std::unordered_map<std::string, Entry> entries;  // "library\nsymbol" -> its entry

ffi::Error resolve(std::string_view library, std::string_view symbol, Entry &out) {
    std::string key(library);
    key += '\n';
    key += symbol;
    std::lock_guard<std::mutex> guard(entries_lock);
    auto it = entries.find(key);
    if (it != entries.end()) {
        out = it->second;
        return ffi::Error::Success();
    }
    // the runtime has loaded it already (dlopen only adds a reference); it stays loaded
    const std::string path(library);
    void *handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
        const char *why = dlerror();
        return ffi::Error::InvalidArgument("grid: cannot load " + path + ": " + (why ? why : "?"));
    }
    Entry e;
    e.fn = reinterpret_cast<Packed>(dlsym(handle, std::string(symbol).c_str()));
    e.error_string = reinterpret_cast<ErrorString>(dlsym(handle, "grid_abi_error_string"));
    auto platform = reinterpret_cast<Platform>(dlsym(handle, "grid_abi_platform"));
    if (e.fn == nullptr || e.error_string == nullptr || platform == nullptr)
        return ffi::Error::InvalidArgument("grid: " + path + " has no entry " + std::string(symbol));
    e.platform = platform();
    entries.emplace(key, e);
    out = e;
    return ffi::Error::Success();
}

// Element count and type of argument i, or an error naming it.
ffi::Error arg_info(const ffi::RemainingArgs &args, int64_t i, ffi::DataType want, size_t &count, void *&data) {
    auto buf = args.get<ffi::AnyBuffer>(size_t(i));
    if (buf.has_error()) return buf.error();
    if (buf->element_type() != want) return ffi::Error::InvalidArgument("grid: argument of the wrong dtype");
    count = buf->element_count();
    data = buf->untyped_data();
    return ffi::Error::Success();
}

// One call: the packed words (outputs, state inputs, params, then num_timesteps, layout,
// tier, threads, blocks, stream), the batch size taken from the buffers themselves, so a
// vmapped call (extra leading axes) is one larger batch.
//
//   inputs       per state input of the entry: the index of its buffer among the arguments,
//                -1 when it is omitted (an optional input)
//   input_sizes  values per state of each state input; output_sizes likewise
//   params       every param's values, concatenated (converted here to the entry's dtype);
//   param_sizes  how many values each param has (one word each: the address of its values)
//   launch       layout, tier, threads, blocks
ffi::Error call(void *stream, int platform, ffi::RemainingArgs args, ffi::RemainingRets rets,
                std::string_view library, std::string_view symbol, int64_t itemsize,
                ffi::Span<const int64_t> inputs, ffi::Span<const int64_t> input_sizes,
                ffi::Span<const int64_t> output_sizes, ffi::Span<const double> params,
                ffi::Span<const int64_t> param_sizes, ffi::Span<const int64_t> launch) {
    Entry entry;
    if (ffi::Error err = resolve(library, symbol, entry); err.failure()) return err;
    if (entry.platform != platform)
        return ffi::Error::InvalidArgument(
            platform == kCuda ? "grid: this library was built for host emulation; a JAX computation on the GPU "
                                "needs a RobotHandle"
                              : "grid: this library runs on the GPU; a JAX computation on the CPU needs an "
                                "Emulated backend (or jax.device_put the inputs onto the GPU)");
    if (itemsize != 4 && itemsize != 8) return ffi::Error::InvalidArgument("grid: itemsize must be 4 or 8");
    if (inputs.size() != input_sizes.size() || launch.size() != 4 || rets.size() != output_sizes.size())
        return ffi::Error::InvalidArgument("grid: malformed call attributes");
    const ffi::DataType dtype = itemsize == 4 ? ffi::DataType::F32 : ffi::DataType::F64;

    const size_t n_out = output_sizes.size(), n_in = inputs.size();
    const size_t n_param = param_sizes.size();
    std::vector<uint64_t> words(n_out + n_in + n_param + 6, 0);
    int64_t n = -1;
    for (size_t k = 0; k < n_in; ++k) {
        if (inputs[k] < 0) continue;  // omitted: a null pointer
        size_t count = 0;
        void *data = nullptr;
        if (ffi::Error err = arg_info(args, inputs[k], dtype, count, data); err.failure()) return err;
        const int64_t per = input_sizes[k];
        if (per <= 0 || count % size_t(per) != 0 || (n >= 0 && int64_t(count) / per != n))
            return ffi::Error::InvalidArgument("grid: state inputs of different batch sizes");
        n = int64_t(count) / per;
        words[n_out + k] = uint64_t(reinterpret_cast<uintptr_t>(data));
    }
    if (n < 0) return ffi::Error::InvalidArgument("grid: no state input");
    for (size_t j = 0; j < n_out; ++j) {
        auto buf = rets.get<ffi::AnyBuffer>(j);
        if (buf.has_error()) return buf.error();
        if ((*buf)->element_type() != dtype || int64_t((*buf)->element_count()) != n * output_sizes[j])
            return ffi::Error::InvalidArgument("grid: output of the wrong shape or dtype");
        words[j] = uint64_t(reinterpret_cast<uintptr_t>((*buf)->untyped_data()));
    }
    if (n == 0) return ffi::Error::Success();  // an empty batch: nothing to launch

    // params: host values the entry reads before it launches, in its own dtype (one of the two)
    std::vector<float> p32;
    std::vector<double> p64;
    if (itemsize == 4)
        p32.assign(params.begin(), params.end());
    else
        p64.assign(params.begin(), params.end());
    const size_t first_param = n_out + n_in;
    size_t offset = 0;
    for (size_t i = 0; i < n_param; ++i) {
        const void *values = itemsize == 4 ? static_cast<const void *>(p32.data() + offset)
                                           : static_cast<const void *>(p64.data() + offset);
        words[first_param + i] = uint64_t(reinterpret_cast<uintptr_t>(values));
        offset += size_t(param_sizes[i]);
    }
    if (offset != params.size()) return ffi::Error::InvalidArgument("grid: malformed call attributes");
    const size_t tail = first_param + n_param;
    words[tail] = uint64_t(n);
    for (size_t i = 0; i < 4; ++i) words[tail + 1 + i] = uint64_t(launch[i]);
    words[tail + 5] = uint64_t(reinterpret_cast<uintptr_t>(stream));

    const int code = entry.fn(words.data());
    if (code != 0) {
        const char *what = entry.error_string(code);
        return ffi::Error::Internal("grid: " + std::string(symbol) + " failed: CUDA error " + std::to_string(code) +
                                    ": " + (what ? what : "?"));
    }
    return ffi::Error::Success();
}

ffi::Error call_cuda(cudaStream_t stream, ffi::RemainingArgs args, ffi::RemainingRets rets,
                     std::string_view library, std::string_view symbol, int64_t itemsize,
                     ffi::Span<const int64_t> inputs, ffi::Span<const int64_t> input_sizes,
                     ffi::Span<const int64_t> output_sizes, ffi::Span<const double> params,
                     ffi::Span<const int64_t> param_sizes, ffi::Span<const int64_t> launch) {
    return call(stream, kCuda, args, rets, library, symbol, itemsize, inputs, input_sizes, output_sizes, params,
                param_sizes, launch);
}

// The record of host calls (tests: which device ran which batch), off unless asked for.
std::mutex record_lock;
bool recording = false;
std::vector<int64_t> record;  // device ordinal, batch size, per call

ffi::Error call_host(int32_t device, ffi::RemainingArgs args, ffi::RemainingRets rets, std::string_view library,
                     std::string_view symbol, int64_t itemsize, ffi::Span<const int64_t> inputs,
                     ffi::Span<const int64_t> input_sizes, ffi::Span<const int64_t> output_sizes,
                     ffi::Span<const double> params, ffi::Span<const int64_t> param_sizes,
                     ffi::Span<const int64_t> launch) {
    {
        std::lock_guard<std::mutex> guard(record_lock);
        if (recording && inputs.size() > 0 && rets.size() > 0 && output_sizes[0] > 0) {
            auto out = rets.get<ffi::AnyBuffer>(0);
            record.push_back(device);
            record.push_back(out.has_error() ? -1 : int64_t((*out)->element_count()) / output_sizes[0]);
        }
    }
    return call(nullptr, kHost, args, rets, library, symbol, itemsize, inputs, input_sizes, output_sizes, params,
                param_sizes, launch);
}

}  // namespace

#define GRID_FFI_ATTRS                                       \
    .Attr<std::string_view>("library")                       \
        .Attr<std::string_view>("symbol")                    \
        .Attr<int64_t>("itemsize")                           \
        .Attr<ffi::Span<const int64_t>>("inputs")            \
        .Attr<ffi::Span<const int64_t>>("input_sizes")       \
        .Attr<ffi::Span<const int64_t>>("output_sizes")      \
        .Attr<ffi::Span<const double>>("params")             \
        .Attr<ffi::Span<const int64_t>>("param_sizes")       \
        .Attr<ffi::Span<const int64_t>>("launch")

XLA_FFI_DEFINE_HANDLER_SYMBOL(grid_ffi_call_cuda, call_cuda,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .RemainingArgs()
                                  .RemainingRets() GRID_FFI_ATTRS);

XLA_FFI_DEFINE_HANDLER_SYMBOL(grid_ffi_call_host, call_host,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::DeviceOrdinal>()
                                  .RemainingArgs()
                                  .RemainingRets() GRID_FFI_ATTRS);

// Start (on != 0: cleared) or stop recording the host calls; copy up to `max` calls of the
// record, (device ordinal, batch size) each, into `out`; the number of calls recorded.
extern "C" int64_t grid_ffi_record(int on, int64_t *out, int64_t max) {
    std::lock_guard<std::mutex> guard(record_lock);
    if (on >= 0) {
        if (on) record.clear();
        recording = on != 0;
    }
    const int64_t calls = int64_t(record.size() / 2);
    for (int64_t k = 0; k < 2 * std::min(calls, max); ++k) out[k] = record[size_t(k)];
    return calls;
}
