"""C++ template families for the CPU (kernels Inductor's C++ backend renders and compiles)."""
