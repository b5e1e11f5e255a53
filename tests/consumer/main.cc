// Creates, reopens and checks a pool through an installed pmrt package.
#include <cstdio>
#include <string>

#include "epoch/pool.h"

struct Root {
  uint64_t magic;
};

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  const std::string path = argv[1];
  {
    auto pool = pmrt::Pool::Create(path, pmrt::Pool::kMinPoolSize, "consumer");
    if (!pool.ok()) return std::puts(pool.status().ToString().c_str()), 1;
    auto root = (*pool)->root<Root>();
    if (!root.ok()) return 1;
    (*root)->magic = 0xC0FFEE;
  }
  auto pool = pmrt::Pool::Open(path, "consumer");
  if (!pool.ok()) return std::puts(pool.status().ToString().c_str()), 1;
  auto root = (*pool)->root<Root>();
  if (!root.ok() || (*root)->magic != 0xC0FFEE) return 1;
  std::puts("consumer: OK");
  return 0;
}
