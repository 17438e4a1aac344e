// A small Kokkos program with a known structure, for the connector's tests.
//   setup            region            { fill: parallel_for }
//   solve            region            { iteration ×3: region { dot: parallel_reduce,
//                                                                prefix: parallel_scan } }
//   phase "a", b     region (a name that needs CSV quoting) { touch: parallel_for }
//   deep_copy of x to its host mirror; a fence.
// Argument: the number of solve iterations (default 3).
#include <Kokkos_Core.hpp>
#include <cstdlib>

int main(int argc, char* argv[]) {
  Kokkos::initialize(argc, argv);
  {
    const int iterations = argc > 1 ? std::atoi(argv[1]) : 3;
    const int n = 200000;
    Kokkos::View<double*> x("x", n);
    Kokkos::Profiling::pushRegion("setup");
    Kokkos::parallel_for("fill", n, KOKKOS_LAMBDA(int i) { x(i) = 1.0 / (1 + i); });
    Kokkos::Profiling::popRegion();
    Kokkos::Profiling::pushRegion("solve");
    double total = 0;
    for (int it = 0; it < iterations; ++it) {
      Kokkos::Profiling::pushRegion("iteration");
      double s = 0;
      Kokkos::parallel_reduce(
          "dot", n, KOKKOS_LAMBDA(int i, double& acc) { acc += x(i) * x(i); }, s);
      Kokkos::parallel_scan(
          "prefix", n, KOKKOS_LAMBDA(int i, double& up, bool) { up += x(i); });
      total += s;
      Kokkos::Profiling::popRegion();
    }
    Kokkos::Profiling::popRegion();
    Kokkos::Profiling::pushRegion("phase \"a\", b");
    Kokkos::parallel_for("touch", n, KOKKOS_LAMBDA(int i) { x(i) += 1; });
    Kokkos::Profiling::popRegion();
    auto h = Kokkos::create_mirror(x);
    Kokkos::deep_copy(h, x);
    Kokkos::fence();
    if (total <= 0) return 3;
  }
  Kokkos::finalize();
  return 0;
}
