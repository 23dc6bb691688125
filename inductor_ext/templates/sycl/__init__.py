"""Template families written in SYCL (free-function kernels built at run time by runtime/sycl)."""
