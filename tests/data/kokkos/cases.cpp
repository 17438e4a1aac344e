// A Kokkos program with one mode per thing the connector's tests check: how a program
// ends (a crash, a signal, an exit), the names it gives, how deep it nests, how many
// callbacks it makes. Usage: cases MODE [N]
//
// The ending modes run  run { N × step { work: parallel_for } }  and then, inside `run`:
//   abort       std::abort()                     segv     a write through a null pointer
//   term        SIGTERM to itself                 kill     SIGKILL to itself, 50 ms later
//   exit        exit(3), without Kokkos::finalize
//   handled     its own SIGTERM handler (installed first) notes the signal; the program
//               goes on: `after` region, Kokkos::finalize, exit 0; prints "handled"
//   handled_exit  its own SIGTERM handler prints "handler ran" and calls _exit(7)
// The other modes:
//   names       regions and kernels named with bytes that are not UTF-8 (Latin-1 and
//               broken sequences), and short plain names ("f", "i") that are no types
//   unnamed     kernels without a name (a lambda, a functor, a functor with a tag); prints
//               the typeid name of each, one per line, as "typeid <name>"
//   nest        N nested regions (default 600), a parallel_for in the innermost
//   longname    one region whose name is N (default 200000) times 'x'
//   heavy       N × { region "iteration", parallel_for "touch", parallel_reduce "sum" }
//               (6 callbacks each); prints "thread_cpu_ns <ns>" of this thread before
//               Kokkos::finalize
#include <Kokkos_Core.hpp>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <typeinfo>
#include <unistd.h>

namespace {

volatile std::sig_atomic_t got_signal = 0;

void note_signal(int) { got_signal = 1; }

void exit_from_handler(int) {
  const char text[] = "handler ran\n";
  if (write(1, text, sizeof text - 1) < 0) _exit(8);
  _exit(7);
}

struct Scale {
  KOKKOS_INLINE_FUNCTION void operator()(int) const {}
};
struct Twice {};
struct Tagged {
  KOKKOS_INLINE_FUNCTION void operator()(Twice, int) const {}
};

void steps(long n) {
  for (long i = 0; i < n; ++i) {
    Kokkos::Profiling::pushRegion("step");
    Kokkos::parallel_for("work", 4, KOKKOS_LAMBDA(int){});
    Kokkos::Profiling::popRegion();
  }
}

void end_inside_run(const std::string& mode, long n) {
  Kokkos::Profiling::pushRegion("run");
  steps(n);
  if (mode == "abort") std::abort();
  if (mode == "segv") *static_cast<volatile int*>(nullptr) = 1;
  if (mode == "term" || mode == "handled_exit") {
    kill(getpid(), SIGTERM);
    for (;;) pause();
  }
  if (mode == "handled") {
    kill(getpid(), SIGTERM);
    while (!got_signal) pause();
  }
  if (mode == "kill") {
    timespec wait = {0, 50000000};
    nanosleep(&wait, nullptr);
    kill(getpid(), SIGKILL);
  }
  if (mode == "exit") std::exit(3);
  Kokkos::Profiling::popRegion();
}

void names() {
  const char* const regions[] = {"caf\xe9", "\xff\xfe start", "half \xe2\x82", "f", "i",
                                 "ok \xe2\x82\xac"};
  for (const char* name : regions) {
    Kokkos::Profiling::pushRegion(name);
    Kokkos::Profiling::popRegion();
  }
  Kokkos::parallel_for("kern\xe9l", 4, KOKKOS_LAMBDA(int){});
  Kokkos::parallel_for("i", 4, KOKKOS_LAMBDA(int){});
}

void unnamed() {
  auto lambda = KOKKOS_LAMBDA(int){};
  Kokkos::parallel_for(4, lambda);
  Kokkos::parallel_for(4, Scale());
  Kokkos::parallel_for(Kokkos::RangePolicy<Twice>(0, 4), Tagged());
  std::printf("typeid %s\n", typeid(lambda).name());
  std::printf("typeid %s\n", typeid(Scale).name());
  std::printf("typeid %s/%s\n", typeid(Tagged).name(), typeid(Twice).name());
}

void nest(long depth) {
  for (long i = 0; i < depth; ++i) Kokkos::Profiling::pushRegion("level " + std::to_string(i));
  Kokkos::parallel_for("innermost", 4, KOKKOS_LAMBDA(int){});
  for (long i = 0; i < depth; ++i) Kokkos::Profiling::popRegion();
}

void heavy(long n) {
  Kokkos::View<double*> x("x", 16);
  double total = 0;
  for (long it = 0; it < n; ++it) {
    Kokkos::Profiling::pushRegion("iteration");
    Kokkos::parallel_for("touch", 16, KOKKOS_LAMBDA(int i) { x(i) += 1.0; });
    double s = 0;
    Kokkos::parallel_reduce("sum", 16, KOKKOS_LAMBDA(int i, double& acc) { acc += x(i); }, s);
    total += s;
    Kokkos::Profiling::popRegion();
  }
  timespec cpu;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu);
  std::printf("thread_cpu_ns %lld\ntotal %g\n",
              static_cast<long long>(cpu.tv_sec) * 1000000000LL + cpu.tv_nsec, total);
}

}  // namespace

int main(int argc, char* argv[]) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const long n = argc > 2 ? std::atol(argv[2]) : -1;
  // the program's own handlers come first, as a program's would
  if (mode == "handled") std::signal(SIGTERM, note_signal);
  if (mode == "handled_exit") std::signal(SIGTERM, exit_from_handler);
  Kokkos::initialize(argc, argv);
  {
    if (mode == "names") {
      names();
    } else if (mode == "unnamed") {
      unnamed();
    } else if (mode == "nest") {
      nest(n < 0 ? 600 : n);
    } else if (mode == "longname") {
      Kokkos::Profiling::pushRegion(std::string(n < 0 ? 200000 : n, 'x'));
      Kokkos::Profiling::popRegion();
    } else if (mode == "heavy") {
      heavy(n < 0 ? 1000 : n);
    } else {
      end_inside_run(mode, n < 0 ? 1000 : n);
      if (mode == "handled") {
        Kokkos::Profiling::pushRegion("after");
        Kokkos::Profiling::popRegion();
        std::printf("handled\n");
      }
    }
  }
  Kokkos::finalize();
  return 0;
}
