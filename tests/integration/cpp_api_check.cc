// cpp_api_check: the header-only C++ layer (hetcomm.hpp) under hetcomm-run: RAII, span overloads, streams,
// groups, split, and errors as exceptions that carry the result code.
#include <cstdio>
#include <hetcomm/hetcomm.hpp>
#include <numeric>
#include <vector>

int main() {
  int failed = 0, passed = 0;
  auto expect = [&](bool ok, const char* what) {
    ok ? ++passed : ++failed;
    if (!ok) std::fprintf(stderr, "FAILED %s\n", what);
  };
  hetcomm::Comm world = hetcomm::Comm::fromEnv();
  const int rank = world.rank(), n = world.size();

  std::vector<float> v(1001, static_cast<float>(rank));
  world.allReduce(std::span(v), hetcomm::Op::kSum);
  expect(v[1000] == n * (n - 1) / 2.0f, "allReduce in place");

  std::vector<int64_t> mine(3, rank), all(3 * n);
  hetcomm::Stream s;
  world.allGather(std::span<const int64_t>(mine), std::span(all), &s);
  s.synchronize();
  expect(all[3 * (n - 1)] == n - 1, "allGather on a stream");

  {
    std::vector<double> out(5), in(5, 1.0 + rank), back(5);
    hetcomm::Group g;
    world.send(std::span<const double>(in), (rank + 1) % n);
    world.recv(std::span(back), (rank + n - 1) % n);
    g.end();
    expect(back[4] == 1.0 + (rank + n - 1) % n, "group send/recv");
  }

  hetcomm::Comm odd = world.split(rank % 2, rank);
  expect(odd && odd.size() == (n + 1 - rank % 2) / 2, "split");

  try {
    std::vector<int32_t> x(4);
    world.broadcast(std::span(x), n + 5);
    expect(false, "bad root throws");
  } catch (const hetcomm::Error& e) {
    expect(e.code() == hetcommInvalidArgument, "bad root gives hetcommInvalidArgument");
  }
  world.allReduce(std::span(v), hetcomm::Op::kMax);  // still usable after an argument error
  expect(true, "usable after an argument error");

  int totals[2] = {passed, failed};
  world.allReduce(std::span<int>(totals, 2), hetcomm::Op::kSum);
  odd.finalize();
  world.finalize();
  if (rank == 0) std::printf("cpp_api_check: %d passed, %d failed\n", totals[0], totals[1]);
  return totals[1] == 0 ? 0 : 1;
}
