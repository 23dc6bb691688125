// inductor-ext's host shim over SYCL's run-time kernel compiler (sycl_ext_oneapi_kernel_compiler).
//
// Built once per wheel version with the system g++ against the intel-sycl-rt headers and loaded
// with ctypes (inductor_ext/runtime/sycl/shim.py). Every entry point is extern "C", returns 0 on
// success, and on failure stores a malloc'd message in *err (free it with ext_sycl_free): no C++
// exception ever crosses into Python.
#include <sycl/sycl.hpp>

#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

namespace syclex = sycl::ext::oneapi::experimental;

namespace {

char *copy_string(const std::string &s) {
  char *p = static_cast<char *>(std::malloc(s.size() + 1));
  std::memcpy(p, s.c_str(), s.size() + 1);
  return p;
}

int fail(char **err, const std::string &what) {
  if (err) *err = copy_string(what);
  return 1;
}

std::string backend_name(sycl::backend b) {
  switch (b) {
  case sycl::backend::opencl: return "opencl";
  case sycl::backend::ext_oneapi_level_zero: return "level_zero";
  default: return "other";
  }
}

std::string json_escape(const std::string &s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) out += c;
  }
  return out;
}

// Arguments of one launch, as ext_sycl_launch receives them.
enum ArgKind { ARG_POINTER = 0, ARG_BYTES = 1, ARG_LOCAL = 2 };

}  // namespace

extern "C" {

int ext_sycl_abi_version() { return 2; }

void ext_sycl_free(void *p) { std::free(p); }

// An in-order queue on the first device whose backend ("opencl", "level_zero") and kind ("cpu",
// "gpu") match; an empty string matches any.
int ext_sycl_open_device(const char *backend, const char *kind, void **queue_out, char **err) {
  try {
    std::string want_backend(backend), want_kind(kind);
    std::ostringstream seen;
    for (const auto &d : sycl::device::get_devices()) {
      std::string b = backend_name(d.get_backend());
      std::string k = d.is_cpu() ? "cpu" : d.is_gpu() ? "gpu" : "other";
      seen << " " << b << ":" << k << " (" << d.get_info<sycl::info::device::name>() << ")";
      if ((want_backend.empty() || b == want_backend) && (want_kind.empty() || k == want_kind)) {
        *queue_out = new sycl::queue(d, sycl::property::queue::in_order());
        return 0;
      }
    }
    std::string found = seen.str();
    return fail(err, "no SYCL device " + want_backend + ":" + want_kind + "; devices found:" +
                         (found.empty() ? std::string(" none") : found));
  } catch (const std::exception &e) {
    return fail(err, e.what());
  }
}

// A second handle to a queue someone else owns (torch.xpu's current stream): SYCL queues are
// reference-counted handles, so this shares its device, context and ordering.
int ext_sycl_borrow_queue(void *external, void **queue_out, char **err) {
  try {
    *queue_out = new sycl::queue(*static_cast<sycl::queue *>(external));
    return 0;
  } catch (const std::exception &e) {
    return fail(err, e.what());
  }
}

void ext_sycl_release_queue(void *q) { delete static_cast<sycl::queue *>(q); }

// The queue's device, as a JSON object.
int ext_sycl_device_info(void *queue, char **json_out, char **err) {
  try {
    auto d = static_cast<sycl::queue *>(queue)->get_device();
    std::ostringstream o;
    o << "{\"name\": \"" << json_escape(d.get_info<sycl::info::device::name>()) << "\", "
      << "\"backend\": \"" << backend_name(d.get_backend()) << "\", "
      << "\"kind\": \"" << (d.is_cpu() ? "cpu" : d.is_gpu() ? "gpu" : "other") << "\", "
      << "\"max_work_group_size\": " << d.get_info<sycl::info::device::max_work_group_size>() << ", "
      << "\"local_mem_size\": " << d.get_info<sycl::info::device::local_mem_size>() << ", "
      << "\"fp16\": " << (d.has(sycl::aspect::fp16) ? "true" : "false") << ", "
      << "\"fp64\": " << (d.has(sycl::aspect::fp64) ? "true" : "false") << ", "
      << "\"sub_group_sizes\": [";
    auto sizes = d.get_info<sycl::info::device::sub_group_sizes>();
    for (size_t i = 0; i < sizes.size(); ++i) o << (i ? ", " : "") << sizes[i];
    o << "]}";
    *json_out = copy_string(o.str());
    return 0;
  } catch (const std::exception &e) {
    return fail(err, e.what());
  }
}

// Compile SYCL source at run time for the queue's device. include_names/include_sources are
// in-memory headers the source may #include; names are the kernels to look up afterwards. The
// compiler's log (warnings, or the errors on failure) goes to *log_out.
int ext_sycl_build(void *queue, const char *source, int n_includes, const char **include_names,
                   const char **include_sources, int n_options, const char **options, int n_names,
                   const char **names, void **bundle_out, char **log_out, char **err) {
  std::string log;
  try {
    auto *q = static_cast<sycl::queue *>(queue);
    syclex::include_files includes;
    for (int i = 0; i < n_includes; ++i) includes.add(include_names[i], include_sources[i]);
    auto source_bundle = syclex::create_kernel_bundle_from_source(
        q->get_context(), syclex::source_language::sycl, std::string(source),
        syclex::properties{includes});
    std::vector<std::string> opts(options, options + n_options);
    std::vector<std::string> registered(names, names + n_names);
    auto exe = syclex::build(source_bundle, std::vector<sycl::device>{q->get_device()},
                             syclex::properties{syclex::build_options{opts}, syclex::save_log{&log},
                                                syclex::registered_names{registered}});
    *bundle_out = new sycl::kernel_bundle<sycl::bundle_state::executable>(exe);
    *log_out = copy_string(log);
    return 0;
  } catch (const std::exception &e) {
    *log_out = copy_string(log);
    return fail(err, e.what());
  }
}

void ext_sycl_release_bundle(void *bundle) {
  delete static_cast<sycl::kernel_bundle<sycl::bundle_state::executable> *>(bundle);
}

int ext_sycl_get_kernel(void *bundle, const char *name, void **kernel_out, char **err) {
  try {
    auto *b = static_cast<sycl::kernel_bundle<sycl::bundle_state::executable> *>(bundle);
    if (!b->ext_oneapi_has_kernel(name)) return fail(err, std::string("no kernel named ") + name);
    *kernel_out = new sycl::kernel(b->ext_oneapi_get_kernel(name));
    return 0;
  } catch (const std::exception &e) {
    return fail(err, e.what());
  }
}

// Device image `index` of a built bundle as its backend received it (a SPIR-V module for a build
// from source), copied into *data_out (malloc'd) with *size_out bytes; *count is the number of
// images. An index past the end only sets *count.
int ext_sycl_bundle_image(void *bundle, int index, int *count, void **data_out, size_t *size_out, char **err) {
  try {
    auto *b = static_cast<sycl::kernel_bundle<sycl::bundle_state::executable> *>(bundle);
    int i = 0;
    *data_out = nullptr;
    *size_out = 0;
    for (const auto &image : *b) {
      if (i++ != index) continue;
      std::vector<std::byte> bytes = image.ext_oneapi_get_backend_content();
      *data_out = std::malloc(bytes.size() ? bytes.size() : 1);
      std::memcpy(*data_out, bytes.data(), bytes.size());
      *size_out = bytes.size();
    }
    *count = i;
    return 0;
  } catch (const std::exception &e) {
    return fail(err, e.what());
  }
}

void ext_sycl_release_kernel(void *kernel) { delete static_cast<sycl::kernel *>(kernel); }

// Largest work-group this kernel can run with on the queue's device.
int ext_sycl_kernel_max_work_group(void *queue, void *kernel, size_t *out, char **err) {
  try {
    auto *q = static_cast<sycl::queue *>(queue);
    *out = static_cast<sycl::kernel *>(kernel)->get_info<sycl::info::kernel_device_specific::work_group_size>(
        q->get_device());
    return 0;
  } catch (const std::exception &e) {
    return fail(err, e.what());
  }
}

// Launch over an nd_range of 1-3 dimensions. Argument i is a pointer (kinds[i] == 0: values[i]
// is the pointer itself), raw bytes (1: values[i] points at sizes[i] bytes: a scalar) or
// work-group local memory of sizes[i] bytes (2). With wait != 0 it returns after the kernel ran.
int ext_sycl_launch(void *queue, void *kernel, int ndim, const size_t *global, const size_t *local,
                    int nargs, const int *kinds, void *const *values, const size_t *sizes, int wait,
                    char **err) {
  try {
    auto *q = static_cast<sycl::queue *>(queue);
    auto *k = static_cast<sycl::kernel *>(kernel);
    auto event = q->submit([&](sycl::handler &h) {
      for (int i = 0; i < nargs; ++i) {
        if (kinds[i] == ARG_POINTER) {
          h.set_arg(i, values[i]);
        } else if (kinds[i] == ARG_BYTES) {
          syclex::raw_kernel_arg bytes(values[i], sizes[i]);
          h.set_arg(i, bytes);
        } else {
          syclex::work_group_memory<char[]> memory(sizes[i], h);  // set_arg needs an lvalue
          h.set_arg(i, memory);
        }
      }
      if (ndim == 1) {
        h.parallel_for(sycl::nd_range<1>({global[0]}, {local[0]}), *k);
      } else if (ndim == 2) {
        h.parallel_for(sycl::nd_range<2>({global[0], global[1]}, {local[0], local[1]}), *k);
      } else {
        h.parallel_for(sycl::nd_range<3>({global[0], global[1], global[2]}, {local[0], local[1], local[2]}), *k);
      }
    });
    if (wait) event.wait_and_throw();
    return 0;
  } catch (const std::exception &e) {
    return fail(err, e.what());
  }
}

int ext_sycl_wait(void *queue, char **err) {
  try {
    static_cast<sycl::queue *>(queue)->wait_and_throw();
    return 0;
  } catch (const std::exception &e) {
    return fail(err, e.what());
  }
}

}  // extern "C"
